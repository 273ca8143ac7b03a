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

Inference takes time: `delay` ticks pass between asking and having the answer. A chunk
asked for at tick R (with that tick's observation) is aligned with it (its step 0 is tick
R) and takes over at the first tick its answer is there; until then the previous chunk
goes on. The very first chunk of an episode is waited for. In `act`'s synchronous loop the
delay is a fixed number of ticks (`delay`; with 0, `chunk` is openpi's broker exactly); a
`RealTimeRunner` (realtime) runs the same executors against a clock, asks on a worker
thread and measures each delay. Each executor is four steps the two loops share:
`wants_chunk(tick)`, `ask(observation, tick, delay)` (the executor's `request`, counted),
`accept(actions, asked_at, ready_at)` and `action(tick)`.

The state history (K steps at the data's rate, the metadata's `history`) is kept here, from
every tick's observation, and sent whole as the state (K, S) with each request: a client
that asks once per chunk would otherwise hand the server states `n_action_steps` ticks
apart, while training saw consecutive frames. The first tick's state fills the history
until there are K, as the data loader pads an episode's start.
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
        self.history = max(1, int(self.metadata.get("history", 1)))
        self.state_key = str(self.metadata.get("state_key", "state"))
        self.states: deque[np.ndarray] = deque(maxlen=self.history)
        self.tick = 0
        self.switches: list[int] = []  # ticks at which a new chunk took over
        self.requests = 0  # chunks asked for
        self.received = 0  # chunks accepted this episode
        self.starved = 0  # ticks with no chunk step left: the last action was held
        self.last: np.ndarray | None = None

    def reset(self) -> None:
        """A new episode: nothing held, the policy's history restarts."""
        self.tick = self.received = 0
        self.switches = []
        self.states.clear()
        self.last = None
        self.policy.reset()

    # the four steps both loops share

    def observe(self, observation: Mapping[str, Any]) -> dict[str, Any]:
        """The observation of this tick as it is sent: its state replaced by the history (K, S)."""
        sent = dict(observation)
        if self.history == 1 or self.state_key not in sent:
            return sent
        state = np.array(sent[self.state_key], dtype=np.float64)
        if state.ndim != 1:
            return sent  # the caller keeps the history itself
        if not self.states:
            self.states.extend([state] * self.history)
        self.states.append(state)
        sent[self.state_key] = np.stack(self.states)
        return sent

    def wants_chunk(self, tick: int) -> bool:
        """Whether to ask for a chunk at `tick` (none being asked for already)."""
        raise NotImplementedError

    def request(self, observation: Mapping[str, Any], tick: int, delay: int) -> dict[str, Any]:
        """What to send for a chunk asked for at `tick`, expected after `delay` ticks."""
        return dict(observation)

    def ask(self, observation: Mapping[str, Any], tick: int, delay: int) -> dict[str, Any]:
        """`request`, counted: what both loops send when `wants_chunk` says so."""
        self.requests += 1
        return self.request(observation, tick, delay)

    def accept(self, actions: np.ndarray, asked_at: int, ready_at: int) -> None:
        """A chunk asked for at `asked_at` arrived; it may run from `ready_at` on."""
        raise NotImplementedError

    def action(self, tick: int) -> np.ndarray:
        """The action (A,) float32 to execute at `tick`."""
        raise NotImplementedError

    def check(self, reply: Mapping[str, Any]) -> np.ndarray:
        """The reply's actions (T, A) float32; ValueError if they are not a chunk."""
        actions = np.asarray(reply["actions"], dtype=np.float32)
        if actions.ndim != 2 or actions.shape[0] != self.horizon:
            raise ValueError(
                f"the policy answered actions {actions.shape}; expected ({self.horizon}, A)"
            )
        return actions

    def hold(self) -> np.ndarray:
        """No step of any chunk is left for this tick: the last action again."""
        if self.last is None:
            raise RuntimeError("no chunk has arrived yet: the first chunk must be waited for")
        self.starved += 1
        return self.last.copy()

    def act(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The action (A,) float32 to execute at this tick (the synchronous loop)."""
        t = self.tick
        sent = self.observe(observation)
        if self.wants_chunk(t):
            actions = self.check(self.policy.infer(self.ask(sent, t, self.delay)))
            self.accept(actions, t, t if self.received == 0 else t + self.delay)
        action = self.action(t)
        self.tick += 1
        return action


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

    def _promote(self, tick: int) -> None:
        """The pending chunk takes over once it may run (before asking or acting at `tick`)."""
        if self.pending is not None and tick >= self.pending.ready:
            self.current, self.pending = self.pending, None
            self.switches.append(tick)

    def wants_chunk(self, tick: int) -> bool:
        self._promote(tick)  # a chunk that takes over now counts its steps from now
        if self.current is None:
            return True
        return self.pending is None and tick >= self.current.start + self.n_action_steps

    def accept(self, actions: np.ndarray, asked_at: int, ready_at: int) -> None:
        self.received += 1
        chunk = _Chunk(asked_at, actions, ready_at)
        if self.current is None:
            self.current = chunk
        else:
            self.pending = chunk

    def action(self, tick: int) -> np.ndarray:
        self._promote(tick)
        if self.current is None:
            return self.hold()
        step = tick - self.current.start
        if step >= self.horizon:
            return self.hold()
        self.last = action = self.current.actions[step].copy()
        return action.copy()


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

    def request(self, observation: Mapping[str, Any], tick: int, delay: int) -> dict[str, Any]:
        if self.current is None:
            return dict(observation)
        remaining = self.current.actions[tick - self.current.start :]
        if not len(remaining):
            return dict(observation)  # nothing overlaps: a fresh chunk
        if len(remaining) < delay:  # the chunk runs out before the answer: its last step is held
            held = np.repeat(remaining[-1:], delay - len(remaining), axis=0)
            remaining = np.concatenate([remaining, held])
        return {**observation, "rtc": {"actions": remaining, "delay": delay}}


class TemporalEnsemble(ChunkExecutor):
    """`temporal_ensemble`: ACT's exponentially weighted average (see the module docstring).

    It asks at every tick it can: every tick in the synchronous loop, whenever the last
    request has been answered in real time.
    """

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

    def wants_chunk(self, tick: int) -> bool:
        return True

    def accept(self, actions: np.ndarray, asked_at: int, ready_at: int) -> None:
        self.received += 1
        self.chunks.append(_Chunk(asked_at, actions, ready_at))
        if self.received > 1:
            self.switches.append(ready_at)  # the blend changes there

    def action(self, tick: int) -> np.ndarray:
        while self.chunks and tick - self.chunks[0].start >= self.horizon:
            self.chunks.popleft()
        ready = [c for c in self.chunks if c.ready <= tick]  # oldest first
        if not ready:
            return self.hold()
        weights = np.exp(-self.coefficient * np.arange(len(ready)))
        steps = np.stack([c.actions[tick - c.start] for c in ready])
        self.last = action = (weights @ steps / weights.sum()).astype(np.float32)
        return action.copy()


EXECUTORS: dict[str, type[ChunkExecutor]] = {
    cls.name: cls for cls in (ChunkBroker, TemporalEnsemble, RealTimeChunking)
}
DEFAULT_EXECUTOR = ChunkBroker.name  # the one an evaluation runs unless told another


def make_executor(name: str, policy: ChunkPolicy, **options: Any) -> ChunkExecutor:
    """The executor registered as `name` (chunk, temporal_ensemble, rtc) over `policy`."""
    if name not in EXECUTORS:
        raise ValueError(f"executor: {name!r} is not one of {sorted(EXECUTORS)}")
    return EXECUTORS[name](policy, **options)
