"""Samples and batches.

The dataset (assembly only), its windows and episode cache, faults, JPEG decode, collate,
loaders, normalisation and augmentation.
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
