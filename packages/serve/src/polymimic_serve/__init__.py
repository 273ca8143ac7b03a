"""polymimic-serve: a trained policy on a robot, with no training stack.

`load_policy(path)` rebuilds a policy from a checkpoint of `train` or an export (a file
it cannot use raises CheckpointError, one line naming the file);
`PolicyServer` serves it on openpi's websocket protocol (`polymimic-serve CHECKPOINT`);
`PolicyClient` and `LocalPolicy` speak to it over the wire or in process; chunk executors
(`make_executor("chunk" | "temporal_ensemble" | "rtc", policy)`) turn chunks into one
action per control tick, synchronously or against a clock (`RealTimeRunner`). Names load
on first use: a client alone imports no torch. `PolicyRunner`, `ObservationReader` and
`StateHistory` are the pieces a batching caller (polymimic-sim's parallel rollouts) builds on.
"""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

import lazy_loader

try:
    __version__ = _version("polymimic-serve")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

# The public names and their modules: one table, in __init__.pyi.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
