"""A control loop in real time: ticks at the policy's rate, inference on a worker thread.

`RealTimeRunner` runs any chunk executor (executors) the way a robot needs it: the loop
ticks at `fps` on its own clock and never waits for the model (only for an episode's first
chunk, before its clock starts). When the executor wants a chunk, the tick's observation
goes to a worker thread (`infer` of a `LocalPolicy`, or of a `PolicyClient` over the wire)
and the loop goes on with the chunk it has. A chunk is used from the first tick after its
answer is there: the delay in ticks is measured, not assumed, and the next request tells
`rtc` how many of its steps to freeze from the delays measured so far (the most of the last
few). A tick is never skipped and never repeated: when no chunk has a step for a tick, the
last action is held, and the tick is counted as starved.

    runner = RealTimeRunner(make_executor("rtc", PolicyClient(url)), fps=50)
    runner.run(robot.observe, robot.execute, ticks=2000)   # or, with a loop of your own:
    runner.start(robot.observe())                          # waits for the first chunk
    while running:
        robot.execute(runner.step(robot.observe()))        # returns at once
        runner.wait()                                      # sleeps until the next tick
    print(runner.report())   # delays p50/p99 in ticks, stale and starved ticks, overruns

The report's `stale_ticks` are ticks run on a chunk while a newer one was being computed
(the delay, summed); `starved_ticks` those with no step left; `overruns` ticks whose work
took longer than a tick, so that the loop started the next late.
"""

from __future__ import annotations

import logging
import math
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from polymimic_serve.executors import ChunkExecutor

logger = logging.getLogger("polymimic_serve")


def _owned(value: Any) -> Any:
    """`value` with its arrays copied (a robot may reuse its camera buffers meanwhile)."""
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, Mapping):
        return {k: _owned(v) for k, v in value.items()}
    return value


@dataclass
class _InFlight:
    asked_at: int
    future: Future[dict[str, Any]]


@dataclass
class RealTimeReport:
    """What one runner measured (over every episode since it was made)."""

    ticks: int = 0
    delays: list[int] = field(default_factory=list)  # ticks from asking to using, per chunk
    latencies_ms: list[float] = field(default_factory=list)  # wall time of each inference
    stale_ticks: int = 0
    starved_ticks: int = 0
    overruns: int = 0

    def summary(self) -> dict[str, Any]:
        """Plain numbers: ticks, chunks, delay p50/p99/max in ticks, latency p50/p99 in ms."""
        delays = np.asarray(self.delays or [0])
        latencies = np.asarray(self.latencies_ms or [0.0])
        return {
            "ticks": self.ticks,
            "chunks": len(self.delays),
            "delay_p50": float(np.percentile(delays, 50)),
            "delay_p99": float(np.percentile(delays, 99)),
            "delay_max": int(delays.max()),
            "latency_ms_p50": round(float(np.percentile(latencies, 50)), 2),
            "latency_ms_p99": round(float(np.percentile(latencies, 99)), 2),
            "stale_ticks": self.stale_ticks,
            "starved_ticks": self.starved_ticks,
            "overruns": self.overruns,
        }


class RealTimeRunner:
    """Runs `executor` at `fps` with inference off the loop (see the module docstring).

    `clock` and `sleep` are the loop's time (monotonic seconds); `estimate_from`: how many
    of the latest measured delays the next request's expected delay is the most of.
    """

    def __init__(
        self,
        executor: ChunkExecutor,
        *,
        fps: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        estimate_from: int = 5,
    ) -> None:
        rate = fps if fps is not None else executor.metadata.get("fps")
        if rate is None or not math.isfinite(float(rate)) or float(rate) <= 0:
            raise ValueError(
                f"fps: a positive control rate, got {rate!r} (the policy's metadata has none)"
            )
        self.executor, self.fps, self.period = executor, float(rate), 1.0 / float(rate)
        self.clock, self.sleep = clock, sleep
        self.recent: deque[int] = deque(maxlen=estimate_from)
        self.report_ = RealTimeReport()
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="polymimic-infer")
        self.in_flight: _InFlight | None = None
        self.deadline = 0.0

    def _infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        reply = self.executor.policy.infer(observation)
        self.report_.latencies_ms.append((time.perf_counter() - start) * 1e3)
        return reply

    def expected_delay(self) -> int:
        """The delay the next request is planned for: the most of the latest measured."""
        limit = self.executor.horizon - 1
        return min(max(max(self.recent, default=1), 1), limit)  # a chunk is never used at once

    def start(self, observation: Mapping[str, Any]) -> np.ndarray:
        """A new episode: waits for its first chunk, starts the clock; tick 0's action."""
        self._drain()
        self.executor.reset()
        executor, t = self.executor, 0
        sent = executor.observe(observation)
        started = self.clock()
        reply = self._infer(executor.ask(sent, t, 0))
        executor.accept(executor.check(reply), t, t)
        # the first wait, in ticks, is what the second request expects until it is measured
        self.recent.append(math.ceil((self.clock() - started) * self.fps))
        self.deadline = self.clock() + self.period
        return self._finish(t)

    def step(self, observation: Mapping[str, Any]) -> np.ndarray:
        """The next tick's action; asks for a chunk on the worker if one is due. Never waits."""
        executor = self.executor
        t = executor.tick
        if t == 0:
            raise RuntimeError("start(observation) begins an episode (it waits for a chunk)")
        self._collect(t)
        sent = executor.observe(observation)
        if self.in_flight is None and executor.wants_chunk(t):
            request = _owned(executor.ask(sent, t, self.expected_delay()))
            self.in_flight = _InFlight(t, self.pool.submit(self._infer, request))
        return self._finish(t)

    def _collect(self, t: int) -> None:
        """Hand a finished chunk to the executor: it may run from this tick on."""
        if self.in_flight is None:
            return
        if not self.in_flight.future.done():
            self.report_.stale_ticks += 1
            return
        flight, self.in_flight = self.in_flight, None
        actions = self.executor.check(flight.future.result())  # an inference error is raised
        delay = t - flight.asked_at
        self.recent.append(delay)
        self.report_.delays.append(delay)
        self.executor.accept(actions, flight.asked_at, t)

    def _finish(self, t: int) -> np.ndarray:
        starved = self.executor.starved
        action = self.executor.action(t)
        self.report_.starved_ticks += self.executor.starved - starved
        self.executor.tick = t + 1
        self.report_.ticks += 1
        return action

    def wait(self) -> None:
        """Sleep until the next tick is due (at once, counted as an overrun, if it is late)."""
        now = self.clock()
        if now < self.deadline:
            self.sleep(self.deadline - now)
            self.deadline += self.period
        else:
            self.report_.overruns += 1
            self.deadline = now + self.period  # start again from now: never catch up in a burst

    def run(
        self,
        observe: Callable[[], Mapping[str, Any]],
        execute: Callable[[np.ndarray], Any],
        ticks: int,
    ) -> RealTimeReport:
        """One episode of `ticks` ticks: observe, act, execute, wait; the report so far."""
        execute(self.start(observe()))
        for _ in range(ticks - 1):
            self.wait()
            execute(self.step(observe()))
        self._drain()
        return self.report_

    def report(self) -> dict[str, Any]:
        """`RealTimeReport.summary()` of everything run so far."""
        return self.report_.summary()

    def _drain(self) -> None:
        """Let a request still running finish (its answer is for an episode that is over)."""
        if self.in_flight is not None:
            try:
                self.in_flight.future.result()
            except Exception:  # an episode's last request failing does not end the next
                logger.warning("the last request of an episode failed", exc_info=True)
            self.in_flight = None

    def close(self) -> None:
        """Finish the worker thread."""
        self._drain()
        self.pool.shutdown(wait=True)

    def __enter__(self) -> RealTimeRunner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
