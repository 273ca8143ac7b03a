# The public names, each with the module it loads from on first use (lazy_loader reads
# this table at import; type checkers read it as the package's interface).
from .app import run as run
from .run_episodes import recorded_cameras as recorded_cameras
from .runs.run_dirs import read_record as read_record
from .trained_policy import TrainedPolicy as TrainedPolicy
from .trained_policy import export_policy as export_policy
from .trained_policy import load_policy as load_policy

__version__: str
