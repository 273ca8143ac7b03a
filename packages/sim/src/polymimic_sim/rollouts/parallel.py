"""Rollouts in parallel: one simulator per worker process, the policy batched across them.

`evaluate_parallel(trained, task_name, RolloutSettings(workers=N))` runs the episodes N at a
time, in lockstep: every tick, each running episode's executor acts on its observation (on a
thread of its own), and the chunks they ask for in that tick are sampled as one batch;
then every simulator steps at once, each in its own process. A slot whose episode ends
starts the next seed. Each episode draws its noise from a generator seeded by its own
seed, so what an episode does depends on its seed, not on which slot ran it or what it
was batched with (up to the float rounding of different batch sizes).

Through the websocket server (`via_server=True`) each slot is a `PolicyClient`, and the
server batches what arrives together (its `max_batch` is the number of workers).

The simulators run in polymimic_sim.rollouts.task_workers' processes.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from polymimic_serve import (
    ChunkPolicy,
    ObservationReader,
    PolicyRunner,
    Request,
    StateHistory,
    TrainedPolicy,
    make_executor,
)
from polymimic_sim.rollouts.episodes import (
    EpisodeTally,
    Outcome,
    boundary_jerk,
    expert_steps_to_success,
    summarise,
    write_episode_video,
)
from polymimic_sim.rollouts.rollout_recording import ChunkTap, RolloutRecorder
from polymimic_sim.rollouts.task_workers import TaskWorkers
from polymimic_sim.settings import RolloutSettings

# -- the policy, batched over the slots of one tick ----------------------------------------------


class TickBatcher:
    """Gathers the chunk requests of one tick's slots and samples them as one batch.

    `begin(slots)` opens a tick; each slot's thread either asks (`infer`, which blocks) or
    says it is `done`. When every slot of the tick has done one or the other, the last to
    arrive runs the batch (slots in order, each with its own generator) and wakes the rest.
    """

    def __init__(self, policy: TrainedPolicy, slots: int) -> None:
        self.reader = ObservationReader(policy, {}, "state")
        self.runner = PolicyRunner(policy)
        self.histories = [StateHistory(policy.history) for _ in range(slots)]
        self.generators = [torch.Generator() for _ in range(slots)]
        self.cond = threading.Condition()
        self.expected: set[int] = set()
        self.settled: set[int] = set()
        self.waiting: dict[int, Request] = {}
        self.results: dict[int, np.ndarray | BaseException] = {}
        self.batch_sizes: list[int] = []

    def begin(self, slots: Sequence[int]) -> None:
        with self.cond:
            self.expected, self.settled = set(slots), set()

    def _run_if_complete(self) -> None:
        """Under the lock: run the waiting requests once every slot has asked or finished."""
        if not self.waiting or set(self.waiting) | self.settled != self.expected:
            return
        order = sorted(self.waiting)
        requests = [self.waiting.pop(slot) for slot in order]
        self.batch_sizes.append(len(order))
        try:  # the others wait on the condition; nobody else can arrive meanwhile
            chunks, _ = self.runner.run(requests, [self.generators[s] for s in order])
            self.results.update(zip(order, chunks, strict=True))
        except BaseException as exc:
            self.results.update(dict.fromkeys(order, exc))
        self.cond.notify_all()

    def infer(self, slot: int, observation: Mapping[str, Any]) -> np.ndarray:
        request = self.reader.read(observation, self.histories[slot])
        with self.cond:
            self.waiting[slot] = request
            self._run_if_complete()
            while slot not in self.results:
                self.cond.wait()
            result = self.results.pop(slot)
        if isinstance(result, BaseException):
            raise result
        return result

    def done(self, slot: int) -> None:
        with self.cond:
            self.settled.add(slot)
            self._run_if_complete()


class BatchedSlot:
    """One slot's view of a TickBatcher: openpi's client interface, for an executor."""

    def __init__(self, batcher: TickBatcher, slot: int) -> None:
        self.batcher, self.slot = batcher, slot

    def get_server_metadata(self) -> dict[str, Any]:
        return self.batcher.reader.metadata()

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        return {"actions": self.batcher.infer(self.slot, observation)}

    def reset(self) -> None:
        self.batcher.histories[self.slot].reset()

    def begin_episode(self, seed: int) -> None:
        """The episode's noise comes from its own seed."""
        self.batcher.generators[self.slot].manual_seed(int(seed))


# -- the lockstep loop -----------------------------------------------------------------------------


def evaluate_parallel(
    trained: TrainedPolicy,
    task_name: str,
    settings: RolloutSettings | None = None,
    *,
    video_dir: Path | None = None,
    recorder: RolloutRecorder | None = None,
) -> dict[str, Any]:
    """Closed-loop episodes of `trained` in `task_name`, `settings.workers` at a time.

    See the module docstring; `settings.realtime` does not apply (one simulator keeps the
    wall clock: `evaluate_policy` runs it).
    """
    from polymimic_serve import PolicyClient, PolicyServer, RunningServer

    settings = settings or RolloutSettings()
    slots = min(settings.workers, settings.episodes)
    begun = time.perf_counter()
    with TaskWorkers(
        task_name, slots, image_size=trained.image_size, cameras=trained.cameras
    ) as tasks:
        start = time.perf_counter()  # the rate counts the rollouts, not the workers' start
        batcher: TickBatcher | None = None
        if not settings.via_server:
            batcher = TickBatcher(trained, slots)
            policies: list[Any] = [BatchedSlot(batcher, s) for s in range(slots)]
            outcomes, written = _lockstep(
                tasks, policies, batcher, settings, video_dir, task_name, recorder
            )
        else:
            server = PolicyServer(trained, port=0, seed=settings.seed, max_batch=slots)
            with RunningServer(server) as running:
                policies = [PolicyClient(running.url) for _ in range(slots)]
                try:
                    outcomes, written = _lockstep(
                        tasks, policies, None, settings, video_dir, task_name, recorder
                    )
                finally:
                    for client in policies:
                        client.close()
        seconds = time.perf_counter() - start
        limit, registered_steps = settings.max_steps or tasks.max_steps, tasks.registered_steps
    expert = expert_steps_to_success(task_name, settings.expert_seeds, limit)
    summary = summarise(task_name, settings.executor, outcomes, seconds, limit=limit,
                        registered_steps=registered_steps, expert_steps=expert)  # fmt: skip
    sizes = batcher.batch_sizes if batcher is not None else []
    return summary | {
        "workers": slots,
        "startup_s": start - begun,
        "videos": [str(p) for p in written],
        "mean_batch": sum(sizes) / len(sizes) if sizes else None,  # requests per inference
    }


def _lockstep(
    tasks: TaskWorkers,
    policies: Sequence[ChunkPolicy],
    batcher: TickBatcher | None,
    settings: RolloutSettings,
    video_dir: Path | None,
    task_name: str,
    recorder: RolloutRecorder | None = None,
) -> tuple[list[Outcome], list[Path]]:
    taps = [ChunkTap(policy) for policy in policies] if recorder is not None else []
    executors = [
        make_executor(settings.executor, taps[slot] if taps else policy,
                      **settings.executor_options)
        for slot, policy in enumerate(policies)
    ]  # fmt: skip
    seeds = settings.seeds
    filmed = set(seeds[: settings.videos]) if video_dir is not None else set()
    queue = deque(seeds)
    running: dict[int, tuple[EpisodeTally, dict[str, Any]]] = {}
    outcomes: list[Outcome] = []
    written: list[Path] = []
    limit = settings.max_steps or tasks.max_steps

    def start(slot: int) -> None:
        episode_seed = queue.popleft()
        policy = policies[slot]
        if isinstance(policy, BatchedSlot):
            policy.begin_episode(episode_seed)
        observation = tasks.reset(slot, episode_seed)
        executors[slot].reset()
        recording = recorder.episode(task_name, episode_seed, tasks.fps) if recorder else None
        if taps:
            taps[slot].recording = recording
        tally = EpisodeTally(episode_seed, limit, episode_seed in filmed, recording)
        running[slot] = (tally, observation)

    def act(slot: int) -> np.ndarray:
        tally, observation = running[slot]
        try:
            tally.observe(observation)
            return executors[slot].act(observation)
        finally:
            if batcher is not None:
                batcher.done(slot)

    for slot in range(len(policies)):
        if queue:
            start(slot)
    bar = tqdm(total=len(seeds), desc=f"rollouts {task_name}", disable=not settings.progress)
    with ThreadPoolExecutor(len(policies), thread_name_prefix="polymimic-rollout") as pool:
        while running:
            order = sorted(running)
            if batcher is not None:
                batcher.begin(order)
            actions = dict(zip(order, pool.map(act, order), strict=True))
            for slot, result in tasks.step(actions).items():
                tally, _ = running[slot]
                if isinstance(result, tuple):  # ("crashed", why)
                    outcome: Outcome | None = tally.crashed(result[1])
                else:
                    outcome = tally.add(result, actions[slot])
                    running[slot] = (tally, result.observation)
                if outcome is None:
                    continue
                outcome.boundary_jerk = boundary_jerk(
                    np.asarray(tally.actions), executors[slot].switches
                )
                outcomes.append(outcome)
                bar.update()
                if tally.frames and video_dir is not None:
                    written.append(write_episode_video(video_dir, outcome, tally.frames, tasks.fps))
                del running[slot]
                if queue:
                    start(slot)
    bar.close()
    return outcomes, written
