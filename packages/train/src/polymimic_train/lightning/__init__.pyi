# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .data_module import EmbodimentDataModule as EmbodimentDataModule
from .policy_module import PolicyModule as PolicyModule
