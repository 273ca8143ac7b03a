"""polymimic-sim: simulated tasks for closed-loop evaluation.

`record(task, dest)` writes scripted demonstrations as episodes; `make_task(name)` builds a
task (`metaworld/<task>`); `evaluate(policy, task)` runs closed-loop episodes through a chunk
executor and gives the success rate with its 95% Wilson interval. Names load on first use.
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

try:
    __version__ = _version("polymimic-sim")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

_WHERE = {
    "MissingExtraError": "task_types",
    "Outcome": "episodes",
    "RenderingError": "rendering",
    "SimTask": "task_types",
    "UnknownTaskError": "task_types",
    "evaluate": "rollouts",
    "make_task": "tasks",
    "record": "recording",
    "rollout": "rollouts",
    "wilson_interval": "episodes",
}
__all__ = [
    "MissingExtraError",
    "Outcome",
    "RenderingError",
    "SimTask",
    "UnknownTaskError",
    "evaluate",
    "make_task",
    "record",
    "rollout",
    "wilson_interval",
]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"polymimic_sim.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'polymimic_sim' has no attribute {name!r}")


if TYPE_CHECKING:
    from polymimic_sim.episodes import Outcome, wilson_interval
    from polymimic_sim.recording import record
    from polymimic_sim.rendering import RenderingError
    from polymimic_sim.rollouts import evaluate, rollout
    from polymimic_sim.task_types import MissingExtraError, SimTask, UnknownTaskError
    from polymimic_sim.tasks import make_task
