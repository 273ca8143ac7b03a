"""Chunk executors: a policy predicts T steps, a robot runs one action per control tick.

An executor decides when to ask for a new chunk and how chunks join. It drives any policy
with openpi's client interface (`infer(observation) -> {"actions": (T, A)}`,
`get_server_metadata()`): a `PolicyClient` over the wire or a `LocalPolicy` in process.

- `chunk`: run `n_action_steps` of each chunk, then ask again (openpi's ActionChunkBroker).
- `temporal_ensemble`: ask every tick; the action is the average of every prediction made
  for this tick, weighted exp(-coefficient * i) with i = 0 the oldest (ACT).
- `rtc`: real-time chunking (Black, Galliker, Levine 2025): as `chunk`, but each new chunk
  is sampled as a continuation of the steps of the current one it overlaps (the first
  `delay` frozen, the rest followed with decaying weight), so chunks join smoothly even
  though the robot kept moving while the next was computed. Flow-matching policies only.

Inference takes time: `delay` ticks pass between asking and having the answer. Every
executor models it the same way, so they can be compared in a simulated loop: a chunk
asked for at tick R (with that tick's observation) is aligned with it (its step 0 is tick
R) and takes over at tick R + delay; until then the previous chunk goes on. The very first
chunk of an episode is waited for. With delay 0, `chunk` is openpi's broker exactly.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import numpy as np


class ChunkPolicy(Protocol):
    """What an executor drives: openpi's client interface."""

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        """The reply to one observation, with `actions` (T, A)."""
        ...

    def get_server_metadata(self) -> dict[str, Any]:
        """The policy's metadata (`chunk_length`, `can_inpaint`, ...)."""
        ...

    def reset(self) -> None:
        """A new episode."""
        ...


@dataclass
class _Chunk:
    start: int  # the tick of its step 0
    actions: np.ndarray  # (T, A)
    ready: int  # the first tick it may be executed at


class ChunkExecutor:
    """The shared loop: `act(observation)` once per tick returns that tick's action (A,)."""

    name: ClassVar[str] = ""

    def __init__(self, policy: ChunkPolicy, *, delay: int = 0) -> None:
        self.policy = policy
        self.metadata = policy.get_server_metadata()
        self.horizon = int(self.metadata["chunk_length"])
        if delay < 0 or delay >= self.horizon:
            raise ValueError(f"delay: 0..{self.horizon - 1} ticks (under the chunk), got {delay}")
        self.delay = delay
        self.tick = 0
        self.switches: list[int] = []  # ticks at which a new chunk took over
        self.requests = 0  # chunks asked for

    def reset(self) -> None:
        """A new episode: nothing held, the policy's history restarts."""
        self.tick = 0
        self.switches = []
        self.policy.reset()

    def _infer(self, observation: Mapping[str, Any], **extra: Any) -> np.ndarray:
        self.requests += 1
        reply = self.policy.infer({**observation, **extra})
        actions = np.asarray(reply["actions"], dtype=np.float32)
        if actions.ndim != 2 or actions.shape[0] != self.horizon:
            raise ValueError(
                f"the policy answered actions {actions.shape}; expected ({self.horizon}, A)"
            )
        return actions

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The action (A,) float32 to execute at this tick."""
        action = self._act(observation)
        self.tick += 1
        return action

    def _act(self, observation: Mapping[str, Any]) -> np.ndarray:
        raise NotImplementedError


class ChunkBroker(ChunkExecutor):
    """`chunk`: run n_action_steps of each chunk, then ask again (see the module docstring)."""

    name: ClassVar[str] = "chunk"

    def __init__(
        self, policy: ChunkPolicy, *, n_action_steps: int | None = None, delay: int = 0
    ) -> None:
        super().__init__(policy, delay=delay)
        steps = self.horizon // 2 if n_action_steps is None else n_action_steps
        if steps < 1 or steps + delay > self.horizon:
            raise ValueError(
                f"n_action_steps: 1..{self.horizon - delay} (the chunk's {self.horizon} steps "
                f"less the delay {delay}), got {steps}"
            )
        self.n_action_steps = steps
        self.current: _Chunk | None = None
        self.pending: _Chunk | None = None

    def reset(self) -> None:
        super().reset()
        self.current = self.pending = None

    def _next_chunk(self, observation: Mapping[str, Any], remaining: np.ndarray) -> np.ndarray:
        """The chunk asked for now; `remaining`: the current chunk's steps from this tick."""
        return self._infer(observation)

    def _act(self, observation: Mapping[str, Any]) -> np.ndarray:
        t = self.tick
        if self.current is None:  # an episode's first tick: wait for the chunk
            self.current = _Chunk(t, self._infer(observation), t)
        elif t == self.current.start + self.n_action_steps and self.pending is None:
            remaining = self.current.actions[t - self.current.start :]
            self.pending = _Chunk(t, self._next_chunk(observation, remaining), t + self.delay)
        if self.pending is not None and t >= self.pending.ready:
            self.current, self.pending = self.pending, None
            self.switches.append(t)
        return self.current.actions[t - self.current.start].copy()


class RealTimeChunking(ChunkBroker):
    """`rtc`: each chunk continues the overlap of the last (see the module docstring)."""

    name: ClassVar[str] = "rtc"

    def __init__(
        self, policy: ChunkPolicy, *, n_action_steps: int | None = None, delay: int = 0
    ) -> None:
        super().__init__(policy, n_action_steps=n_action_steps, delay=delay)
        if not self.metadata.get("can_inpaint", False):
            raise ValueError(
                f"rtc: the {self.metadata.get('policy', 'served')!r} policy cannot continue a "
                "chunk (real-time chunking needs a flow-matching policy: HPT with head: flow, "
                "or Pi); choose the chunk or temporal_ensemble executor"
            )

    def _next_chunk(self, observation: Mapping[str, Any], remaining: np.ndarray) -> np.ndarray:
        if not len(remaining):
            return self._infer(observation)  # nothing overlaps: a fresh chunk
        return self._infer(observation, rtc={"actions": remaining, "delay": self.delay})


class TemporalEnsemble(ChunkExecutor):
    """`temporal_ensemble`: ACT's exponentially weighted average (see the module docstring)."""

    name: ClassVar[str] = "temporal_ensemble"

    def __init__(self, policy: ChunkPolicy, *, coefficient: float = 0.01, delay: int = 0) -> None:
        super().__init__(policy, delay=delay)
        if not math.isfinite(coefficient):
            raise ValueError(f"coefficient: a finite number, got {coefficient}")
        self.coefficient = coefficient
        self.chunks: deque[_Chunk] = deque()

    def reset(self) -> None:
        super().reset()
        self.chunks.clear()

    def _act(self, observation: Mapping[str, Any]) -> np.ndarray:
        t = self.tick
        first = not self.chunks
        self.chunks.append(_Chunk(t, self._infer(observation), t if first else t + self.delay))
        while t - self.chunks[0].start >= self.horizon:
            self.chunks.popleft()
        ready = [c for c in self.chunks if c.ready <= t]  # oldest first
        weights = np.exp(-self.coefficient * np.arange(len(ready)))
        steps = np.stack([c.actions[t - c.start] for c in ready])
        return (weights @ steps / weights.sum()).astype(np.float32)


EXECUTORS: dict[str, type[ChunkExecutor]] = {
    cls.name: cls for cls in (ChunkBroker, TemporalEnsemble, RealTimeChunking)
}


def make_executor(name: str, policy: ChunkPolicy, **options: Any) -> ChunkExecutor:
    """The executor registered as `name` (chunk, temporal_ensemble, rtc) over `policy`."""
    if name not in EXECUTORS:
        raise ValueError(f"executor: {name!r} is not one of {sorted(EXECUTORS)}")
    return EXECUTORS[name](policy, **options)
