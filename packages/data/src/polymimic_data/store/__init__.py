"""The episode store: zarr episodes read and written, atomic files, remote roots.

Imports nothing from samples, episodes, lerobot or synthetic (the import-rule test holds it).
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
