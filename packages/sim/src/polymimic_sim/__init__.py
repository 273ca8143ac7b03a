"""polymimic-sim: simulated tasks for closed-loop evaluation.

`record(task, dest)` writes scripted demonstrations as episodes; `make_task(name)` builds a
task (`metaworld/<task>`); `evaluate_policy(trained, task, RolloutSettings(...))` runs
closed-loop episodes of a loaded policy through a chunk executor (`evaluate_checkpoint` of a
file, `evaluate` of any client in one simulator) and gives the success rate with its 95%
Wilson interval; `summarise` and `summarise_suite` make the summary it writes from
`Outcome`s. Names load on first use.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

import lazy_loader

try:
    __version__ = _version("polymimic-sim")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

# The public names and their modules: one table, in __init__.pyi.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
