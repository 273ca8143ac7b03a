"""Generated data for the default run, tests and benchmarks.

Synthetic episodes; EgoVerse-layout episodes as EgoVerse's writer makes them; hand keypoints.
(LeRobot-format datasets, a fixture for tests and benchmarks only, are in
`polymimic_data.testing`.)
"""

import lazy_loader

# The public names and their modules: one table, in __init__.pyi. Each loads on first use.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
