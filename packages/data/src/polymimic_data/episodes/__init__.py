"""Episodes as a collection: resolving them under roots (cached), splits, checks, corrections."""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
