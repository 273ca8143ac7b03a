"""polymimic-serve: a trained policy on a robot, with no training stack.

`load_policy(path)` rebuilds a policy from a checkpoint of `train` or an export (a file
it cannot use raises CheckpointError, one line naming the file);
`PolicyServer` serves it on openpi's websocket protocol (`polymimic-serve CHECKPOINT`);
`PolicyClient` and `LocalPolicy` speak to it over the wire or in process; chunk executors
(`make_executor("chunk" | "temporal_ensemble" | "rtc", policy)`) turn chunks into one
action per control tick, synchronously or against a clock (`RealTimeRunner`). Names load
on first use: a client alone imports no torch.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

try:
    __version__ = _version("polymimic-serve")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

_WHERE = {
    "CheckpointError": "checkpoints",
    "ChunkBroker": "executors",
    "ChunkExecutor": "executors",
    "Continuation": "trained_policy",
    "EXECUTORS": "executors",
    "LocalPolicy": "inference",
    "ObservationError": "observations",
    "PolicyClient": "client",
    "PolicyServer": "server",
    "RealTimeChunking": "executors",
    "RealTimeRunner": "realtime",
    "RunningServer": "server",
    "TemporalEnsemble": "executors",
    "TrainedPolicy": "trained_policy",
    "checkpoint_record": "checkpoints",
    "load_policy": "trained_policy",
    "make_executor": "executors",
    "write_export": "checkpoints",
    "write_untrained_export": "untrained",
}
__all__ = [
    "EXECUTORS",
    "CheckpointError",
    "ChunkBroker",
    "ChunkExecutor",
    "Continuation",
    "LocalPolicy",
    "ObservationError",
    "PolicyClient",
    "PolicyServer",
    "RealTimeChunking",
    "RealTimeRunner",
    "RunningServer",
    "TemporalEnsemble",
    "TrainedPolicy",
    "checkpoint_record",
    "load_policy",
    "make_executor",
    "write_export",
    "write_untrained_export",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"polymimic_serve.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'polymimic_serve' has no attribute {name!r}")


if TYPE_CHECKING:
    from polymimic_serve.checkpoints import CheckpointError, checkpoint_record, write_export
    from polymimic_serve.client import PolicyClient
    from polymimic_serve.executors import (
        EXECUTORS,
        ChunkBroker,
        ChunkExecutor,
        RealTimeChunking,
        TemporalEnsemble,
        make_executor,
    )
    from polymimic_serve.inference import LocalPolicy
    from polymimic_serve.observations import ObservationError
    from polymimic_serve.realtime import RealTimeRunner
    from polymimic_serve.server import PolicyServer, RunningServer
    from polymimic_serve.trained_policy import Continuation, TrainedPolicy, load_policy
    from polymimic_serve.untrained import write_untrained_export
