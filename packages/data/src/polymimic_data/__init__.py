"""polymimic-data: EgoVerse-compatible zarr episodes turned into training batches.

The names below load on first use, so `import polymimic_data` is light, and importing one
light subpackage (`polymimic_data.geometry`, `polymimic_data.embodiments`) loads no torch or
zarr. The subpackages, by concern (each layer imports only those above it):

    geometry     rotations, poses and coordinate frames, layouts
    embodiments  the built-in registry, embodiments declared by data, policy inputs
    store        the episode store: zarr reading and writing, atomic files, remote roots
    episodes     resolving (cached), splits, deep checks, corrections
    samples      the dataset, windows, faults, JPEG decode, collate, loaders, normalisation
    lerobot      LeRobot v3 source and importer (the `lerobot` extra)
    synthetic    generated episodes (the default run's), EgoVerse-layout writer, hand keypoints
    testing      fixtures for tests and benchmarks only (LeRobot-format writer, S3 test server)
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

import lazy_loader

try:
    __version__ = _version("polymimic-data")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

# The public names and their subpackages: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
