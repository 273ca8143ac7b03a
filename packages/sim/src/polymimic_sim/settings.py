"""RolloutSettings: how a policy is evaluated in closed loop, in one object with one default.

The command line (`polymimic-sim evaluate`), `evaluate checkpoint=... sim=...` and the
training callback (`callbacks.sim_eval`) all build one of these and hand it to
`evaluate_policy`; `RolloutSettings.parse` reads the flat options they are given (strings
from a command line too). Checked when made: a ValueError names the option.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from polymimic_serve import DEFAULT_EXECUTOR, EXECUTORS

# The executors' own options (polymimic_serve.make_executor), given flat beside the rest.
EXECUTOR_OPTIONS: dict[str, type] = {"n_action_steps": int, "delay": int, "coefficient": float}
_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


@dataclass(frozen=True)
class RolloutSettings:
    """Which episodes, through which executor, in how many simulators, recorded how.

    `episodes` from seeds `seed`, `seed`+1, ... (keep them apart from the demonstrations',
    which start at 0); `executor` (chunk, temporal_ensemble, rtc) with `executor_options`
    (`n_action_steps`, `delay`, `coefficient`); `max_steps` ticks per episode at most (None:
    the task's limit); `workers` simulator processes with the policy batched across them;
    `via_server`: through the websocket server, as a robot would; mp4s of the first
    `videos` episodes where a folder is given; `realtime`: one simulator at wall-clock rate,
    inference beside it, `inference_slowdown` times slower; `expert_episodes`: on the first
    that many seeds the scripted expert runs too, its ticks to success the summary's
    yardstick (0: none; measured once per task, seed and limit in a process); `rerun`: every
    episode into one rerun recording beside the summary (`rollouts.rrd`; the `viz` extra).
    """

    episodes: int = 50
    seed: int = 1000
    executor: str = DEFAULT_EXECUTOR
    executor_options: Mapping[str, Any] = field(default_factory=dict)
    max_steps: int | None = None
    workers: int = 2
    via_server: bool = False
    videos: int = 3
    progress: bool = True
    realtime: bool = False
    inference_slowdown: float = 1.0
    expert_episodes: int = 3
    rerun: bool = False

    def __post_init__(self) -> None:
        """ValueError naming the first option that cannot work."""
        for name, lowest in (("episodes", 1), ("workers", 1), ("videos", 0), ("seed", 0),
                             ("expert_episodes", 0)):  # fmt: skip
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
                raise ValueError(f"{name}: an integer >= {lowest}, got {value!r}")
        if self.max_steps is not None and (
            isinstance(self.max_steps, bool) or not isinstance(self.max_steps, int)
            or self.max_steps < 1
        ):  # fmt: skip
            raise ValueError(f"max_steps: a positive integer or None, got {self.max_steps!r}")
        if self.executor not in EXECUTORS:  # before a checkpoint is loaded or a worker starts
            raise ValueError(f"executor: {self.executor!r} is not one of {sorted(EXECUTORS)}")
        unknown = sorted(set(self.executor_options) - set(EXECUTOR_OPTIONS))
        if unknown:
            raise ValueError(
                f"executor_options: {unknown} are not executor options; "
                f"use {sorted(EXECUTOR_OPTIONS)}"
            )
        object.__setattr__(self, "executor_options", dict(self.executor_options))
        slowdown = self.inference_slowdown
        if not isinstance(slowdown, int | float) or not math.isfinite(slowdown) or slowdown < 1:
            raise ValueError(f"inference_slowdown: a factor of at least 1, got {slowdown!r}")
        if slowdown != 1 and not self.realtime:
            raise ValueError(
                "inference_slowdown: only with realtime (a slower model changes nothing when "
                "the simulator waits for it)"
            )
        if self.realtime and self.executor_options.get("delay"):
            raise ValueError(
                "delay: a fixed delay is the synchronous loop's model; in real time the delay "
                "is measured (make inference slower with inference_slowdown instead)"
            )

    @property
    def seeds(self) -> list[int]:
        """The episodes' seeds: seed, seed+1, ..."""
        return [self.seed + i for i in range(self.episodes)]

    @property
    def expert_seeds(self) -> list[int]:
        """The seeds the scripted expert runs on too: the first `expert_episodes`."""
        return self.seeds[: self.expert_episodes]

    @classmethod
    def names(cls) -> list[str]:
        """Every option `parse` takes: the fields, and the executor options flat."""
        fields = [f.name for f in dataclasses.fields(cls) if f.name != "executor_options"]
        return fields + list(EXECUTOR_OPTIONS)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> RolloutSettings:
        """Settings from flat options (`n_action_steps=8` beside `episodes=10`).

        A string is converted to its option's type (`"true"` to True, `"10"` to 10,
        `"none"` to None where None is allowed); None leaves an option at its default (an
        executor option unset); an unknown name is a ValueError listing the names.
        """
        hints = typing.get_type_hints(cls)
        given: dict[str, Any] = {}
        executor_options: dict[str, Any] = dict(options.get("executor_options") or {})
        for name, value in options.items():
            if name not in cls.names():
                if name == "executor_options":
                    continue
                raise ValueError(f"{name}: not a rollout option; the options are {cls.names()}")
            if value is None:
                continue
            if name in EXECUTOR_OPTIONS:
                executor_options[name] = _typed(name, value, EXECUTOR_OPTIONS[name])
            else:
                given[name] = _typed(name, value, hints[name])
        return cls(**given, executor_options=executor_options)


def _typed(name: str, value: Any, hint: Any) -> Any:
    """`value` as `hint` (int, float, bool, str, or X | None), converting strings."""
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None or (isinstance(value, str) and value.lower() in ("none", "null")):
            return None
        hint = next(a for a in args if a is not type(None))
    if not isinstance(value, str) or hint is str:
        return value
    try:
        if hint is bool:
            if value.lower() not in _TRUE + _FALSE:
                raise ValueError(value)
            return value.lower() in _TRUE
        return hint(value)
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not {getattr(hint, '__name__', hint)}") from None
