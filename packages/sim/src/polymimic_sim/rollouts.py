"""Closed-loop rollouts: a policy acts in a simulated task, one action per tick.

`evaluate(policy, task, episodes=50, seed=1000)` runs one episode per seed (seed, seed+1,
...: keep them disjoint from the demonstrations' seeds, which start at 0) through a chunk
executor of polymimic-serve, over any policy with openpi's client interface (a
`LocalPolicy` in process, or a `PolicyClient` to a server: the robot's path). An episode
succeeds when the task says so; one whose simulator gives up (unstable physics) is a
failure, never a crash. The summary holds the success rate with its 95% Wilson interval,
the mean return, the mean steps to success, the mean jerk at chunk boundaries and every
seed's outcome.

With `realtime`, the simulator is stepped at wall-clock rate (the task's fps) by
polymimic-serve's `RealTimeRunner`: inference runs on a worker thread while the episode
goes on, each chunk's delay in ticks is measured (and reported: p50/p99, stale and starved
ticks), so success is measured under the delay a robot would see. `inference_slowdown` k
sleeps (k - 1) times each inference's own time inside it: a model k times slower.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from polymimic_serve import make_executor
from polymimic_serve.executors import ChunkExecutor, ChunkPolicy
from polymimic_serve.realtime import RealTimeRunner
from polymimic_sim.episodes import (
    EpisodeTally,
    Outcome,
    boundary_jerk,
    seeds_of,
    summarise,
    wilson_interval,
    write_episode_video,
)
from polymimic_sim.task_types import SimTask

if TYPE_CHECKING:
    from polymimic_serve.trained_policy import TrainedPolicy

logger = logging.getLogger("polymimic_sim")


class SlowedPolicy:
    """`policy` made `factor` times slower (emulates a bigger model in real time).

    Each inference sleeps (factor - 1) times its own duration inside it.
    """

    def __init__(self, policy: ChunkPolicy, factor: float) -> None:
        if not math.isfinite(factor) or factor < 1:
            raise ValueError(f"inference_slowdown: a factor of at least 1, got {factor}")
        self.policy, self.factor = policy, factor

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        start = time.perf_counter()
        reply = self.policy.infer(observation)
        time.sleep((self.factor - 1) * (time.perf_counter() - start))
        return reply

    def get_server_metadata(self) -> dict[str, Any]:
        return self.policy.get_server_metadata()

    def reset(self) -> None:
        self.policy.reset()


def rollout(
    task: SimTask,
    executor: ChunkExecutor | RealTimeRunner,
    seed: int,
    max_steps: int | None = None,
    *,
    frames: bool = False,
) -> tuple[Outcome, EpisodeTally]:
    """One episode of `executor` in `task` from `seed`: its outcome, and its tally (frames).

    With a RealTimeRunner the episode runs at wall-clock rate (see the module docstring).
    """
    observation = task.reset(seed)
    realtime = isinstance(executor, RealTimeRunner)
    if not realtime:
        executor.reset()
    tally = EpisodeTally(seed, max_steps or task.max_steps, frames)
    outcome: Outcome | None = None
    while outcome is None:
        tally.observe(observation)
        if isinstance(executor, RealTimeRunner):
            action = executor.start(observation) if tally.ticks == 0 else executor.step(observation)
        else:
            action = executor.act(observation)
        try:
            step = task.step(action)
        except ValueError:
            raise  # a malformed action is a bug to see, not an outcome
        except Exception as exc:  # the simulator gave up (e.g. unstable physics)
            outcome = tally.crashed(f"{type(exc).__name__}: {exc}")
            break
        outcome = tally.add(step, action)
        observation = step.observation
        if realtime and outcome is None:
            executor.wait()  # type: ignore[union-attr]
    switches = (executor.executor if isinstance(executor, RealTimeRunner) else executor).switches
    outcome.boundary_jerk = boundary_jerk(np.asarray(tally.actions), switches)
    return outcome, tally


def evaluate(
    policy: ChunkPolicy,
    task: SimTask,
    *,
    episodes: int = 50,
    seed: int = 1000,
    executor: str = "chunk",
    executor_options: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    video_dir: Path | None = None,
    videos: int = 3,
    progress: bool = True,
    realtime: bool = False,
    inference_slowdown: float = 1.0,
) -> dict[str, Any]:
    """Closed-loop episodes from seeds seed..seed+episodes-1, one after another, in `task`.

    The summary (see summarise); with `video_dir`, mp4s of the first `videos` episodes.
    With `realtime` (see the module docstring) it also holds the runner's report.
    """
    seeds = seeds_of(episodes, seed)
    options = dict(executor_options or {})
    if realtime and options.get("delay"):
        raise ValueError(
            "delay: a fixed delay is the synchronous loop's model; in real time the delay is "
            "measured (make inference slower with inference_slowdown instead)"
        )
    if inference_slowdown != 1:
        policy = SlowedPolicy(policy, inference_slowdown)
    chunks = make_executor(executor, policy, **options)
    runner = RealTimeRunner(chunks, fps=task.fps) if realtime else chunks
    start, outcomes, written = time.perf_counter(), [], []
    try:
        for index in tqdm(range(episodes), desc=f"rollouts {task.name}", disable=not progress):
            filmed = video_dir is not None and index < videos
            outcome, tally = rollout(task, runner, seeds[index], max_steps, frames=filmed)
            outcomes.append(outcome)
            if filmed and tally.frames and video_dir is not None:
                written.append(write_episode_video(video_dir, outcome, tally.frames, task.fps))
    finally:
        if isinstance(runner, RealTimeRunner):
            runner.close()
    summary = summarise(task.name, executor, outcomes, time.perf_counter() - start)
    summary |= {"workers": 1, "videos": [str(p) for p in written]}
    summary |= {"realtime": realtime, "inference_slowdown": inference_slowdown}
    if isinstance(runner, RealTimeRunner):
        summary["realtime_report"] = runner.report()
        logger.info("%s in real time: %s", task.name, runner.report())
    return summary


def evaluate_checkpoint(
    checkpoint: str | Path,
    task_name: str,
    *,
    episodes: int = 50,
    seed: int = 1000,
    executor: str = "chunk",
    executor_options: Mapping[str, Any] | None = None,
    workers: int = 2,
    via_server: bool = False,
    out: str | Path | None = None,
    videos: int = 3,
    max_steps: int | None = None,
    device: str = "cpu",
    progress: bool = True,
    realtime: bool = False,
    inference_slowdown: float = 1.0,
    weights_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Rollouts of a checkpoint or export in `task_name`; `out/summary.json` if `out`.

    The task renders the policy's cameras at its image size. With `workers` > 1 the
    episodes run in that many simulator processes, the policy batched across them
    (polymimic_sim.parallel). With `via_server`, the policy is served on loopback and
    driven through `PolicyClient`: the robot's path, wire and all. With `out`, mp4s of the
    first `videos` episodes go to `out/videos/`. With `realtime`, one simulator runs at
    wall-clock rate (see the module docstring; `workers` is then 1). `weights_dir`: where
    a Pi policy's PaliGemma folder is, when not inside the checkpoint's (see load_policy).
    """
    from polymimic_data.store import write_json_atomic
    from polymimic_serve import load_policy
    from polymimic_sim.tasks import suite_tasks

    if workers < 1:
        raise ValueError(f"workers: a positive number of simulator processes, got {workers}")
    if inference_slowdown != 1 and not realtime:
        raise ValueError(
            "inference_slowdown: only with realtime (a slower model changes nothing when the "
            "simulator waits for it)"
        )
    if realtime and workers > 1:
        logger.warning("realtime: one simulator at wall-clock rate (workers %d -> 1)", workers)
        workers = 1
    names = suite_tasks(task_name)  # an unknown suite or a missing extra fails before loading
    trained = load_policy(checkpoint, device=device, weights_dir=weights_dir)
    options = {"episodes": episodes, "seed": seed, "executor": executor, "videos": videos,
               "executor_options": executor_options, "progress": progress,
               "workers": workers, "via_server": via_server, "max_steps": max_steps,
               "realtime": realtime, "inference_slowdown": inference_slowdown}  # fmt: skip
    videos_root = Path(out) / "videos" if out is not None else None
    if names == [task_name]:
        summary = _evaluate_trained(trained, task_name, video_dir=videos_root, **options)
    else:
        parts = {
            name: _evaluate_trained(
                trained,
                name,
                video_dir=videos_root / name.replace("/", "_") if videos_root else None,
                **options,
            )
            for name in names
        }
        summary = combine(task_name, parts)
    summary |= {
        "checkpoint": str(Path(checkpoint).resolve()),
        "weights_step": trained.step,
        "via_server": via_server,
        "executor_options": dict(executor_options or {}),
    }
    if out is not None:
        write_json_atomic(Path(out) / "summary.json", summary)
    return summary


def _evaluate_trained(
    trained: TrainedPolicy,
    task_name: str,
    *,
    workers: int,
    via_server: bool,
    seed: int,
    **options: Any,
) -> dict[str, Any]:
    """One task's rollouts of a loaded policy: in process, or in `workers` processes."""
    from polymimic_serve import LocalPolicy, PolicyClient, PolicyServer, RunningServer
    from polymimic_sim.parallel import evaluate_parallel
    from polymimic_sim.tasks import make_task

    if workers > 1:
        options = {k: v for k, v in options.items() if k not in ("realtime", "inference_slowdown")}
        return evaluate_parallel(
            trained, task_name, workers=workers, via_server=via_server, seed=seed, **options
        )
    task = make_task(task_name, image_size=trained.image_size, cameras=trained.cameras)
    try:
        if via_server:
            with (
                RunningServer(PolicyServer(trained, port=0, seed=seed)) as running,
                PolicyClient(running.url) as client,
            ):
                return evaluate(client, task, seed=seed, **options)
        return evaluate(LocalPolicy(trained, seed=seed), task, seed=seed, **options)
    finally:
        task.close()


def combine(suite: str, parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One summary of a suite's tasks: pooled counts, the mean rate over tasks, and each task's."""
    episodes = sum(p["episodes"] for p in parts.values())
    successes = sum(p["successes"] for p in parts.values())
    low, high = wilson_interval(successes, episodes)
    seconds = sum(p["seconds"] for p in parts.values())
    steps = sum(p["env_steps"] for p in parts.values())
    first = next(iter(parts.values()))
    return {
        "task": suite,
        "executor": first["executor"],
        "workers": first["workers"],
        "episodes": episodes,
        "successes": successes,
        "success_rate": sum(p["success_rate"] for p in parts.values()) / len(parts),
        "success_rate_wilson95": [low, high],  # of the pooled episodes
        "mean_return": sum(p["mean_return"] for p in parts.values()) / len(parts),
        "success_rate_per_task": {name: p["success_rate"] for name, p in parts.items()},
        "env_steps": steps,
        "seconds": seconds,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "videos": [v for p in parts.values() for v in p["videos"]],
        "tasks": {name: dict(p) for name, p in parts.items()},
    }


def describe(summary: Mapping[str, Any]) -> str:
    """One line: successes, rate and its 95% interval."""
    low, high = summary["success_rate_wilson95"]
    return (
        f"{summary['task']}: {summary['successes']}/{summary['episodes']} succeeded "
        f"({summary['success_rate']:.0%}, 95% interval {low:.0%}-{high:.0%})"
    )
