"""The Lightning modules the recipe composes.

`PolicyModule`: the policy's training and validation steps; `EmbodimentDataModule`: the
loaders per embodiment. Each loads on first use, so `train --help` stays light.
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
