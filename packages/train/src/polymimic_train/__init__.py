"""polymimic-train: the thin app that composes data, policy, strategy and eval under Hydra.

`run(cfg)` is the recipe (`uv run train` composes the config and calls it).
`load_policy(path)` rebuilds a trained policy from a checkpoint or an export alone, and
`read_record(run_dir)` reads a run directory's record (`run.json`: its state and steps);
`recorded_cameras(cfg.data)` the cameras a composed config reads, those its episodes hold
(None where the episodes' own will do).
`export_policy(checkpoint)` writes an export (see trained_policy; both load from
polymimic-serve, which a robot computer installs alone); importing them loads
neither Lightning nor Hydra.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

import lazy_loader

try:
    __version__ = _version("polymimic-train")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

# The public names and their modules: one table, in __init__.pyi.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
