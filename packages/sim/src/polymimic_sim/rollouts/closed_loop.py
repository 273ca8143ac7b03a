"""Closed-loop rollouts: a policy acts in a simulated task, one action per tick.

`evaluate(policy, task, RolloutSettings(episodes=50, seed=1000))` runs one episode per seed
(seed, seed+1, ...: keep them disjoint from the demonstrations' seeds, which start at 0)
through a chunk executor of polymimic-serve, over any policy with openpi's client interface
(a `LocalPolicy` in process, or a `PolicyClient` to a server: the robot's path);
`evaluate_policy(trained, task_name, settings)` evaluates a loaded policy in a task or a
suite, in process or in simulator workers (the one evaluation every command runs). An episode
succeeds when the task says so; one whose simulator gives up (unstable physics) is a
failure, never a crash. The summary holds the success rate with its 95% Wilson interval,
the strict success rate, the rate at the task's registered step limit, the mean steps to
success beside the scripted expert's on the same seeds (`expert_steps_to_success`), the mean
return, the mean jerk at chunk boundaries and every seed's outcome.

With `realtime`, the simulator is stepped at wall-clock rate (the task's fps) by
polymimic-serve's `RealTimeRunner`: inference runs on a worker thread while the episode
goes on, each chunk's delay in ticks is measured (and reported: p50/p99, stale and starved
ticks), so success is measured under the delay a robot would see. `inference_slowdown` k
sleeps (k - 1) times each inference's own time inside it: a model k times slower.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Mapping, MutableMapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from tqdm import tqdm

from polymimic_serve import ChunkExecutor, ChunkPolicy, RealTimeRunner, make_executor
from polymimic_sim.rollouts.episodes import (
    EpisodeTally,
    Outcome,
    boundary_jerk,
    expert_steps_to_success,
    rate,
    summarise,
    wilson_interval,
    write_episode_video,
)
from polymimic_sim.rollouts.rollout_recording import ChunkTap, EpisodeRecording, RolloutRecorder
from polymimic_sim.settings import RolloutSettings
from polymimic_sim.tasks.task_types import SimTask

if TYPE_CHECKING:
    from polymimic_serve import TrainedPolicy

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
    recording: EpisodeRecording | None = None,
) -> tuple[Outcome, EpisodeTally]:
    """One episode of `executor` in `task` from `seed`: its outcome, and its tally (frames).

    With a RealTimeRunner the episode runs at wall-clock rate (see the module docstring);
    with a `recording`, the episode goes to rerun too (rollout_recording).
    """
    observation = task.reset(seed)
    realtime = isinstance(executor, RealTimeRunner)
    if not realtime:
        executor.reset()
    tally = EpisodeTally(seed, max_steps or task.max_steps, frames, recording)
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
    settings: RolloutSettings | None = None,
    *,
    video_dir: Path | None = None,
    recorder: RolloutRecorder | None = None,
) -> dict[str, Any]:
    """Closed-loop episodes of `policy` in `task`, one after another, in this process.

    `policy` is any object with openpi's client interface (a LocalPolicy, a PolicyClient);
    `settings.workers` and `via_server` are `evaluate_policy`'s (they need a TrainedPolicy).
    The summary (see summarise); with `video_dir`, mp4s of the first `settings.videos`
    episodes. With `settings.realtime` (see the module docstring) it also holds the
    runner's report. With a `recorder`, every episode goes to its rerun recording.
    """
    settings = settings or RolloutSettings()
    if settings.inference_slowdown != 1:
        policy = SlowedPolicy(policy, settings.inference_slowdown)
    tap = ChunkTap(policy) if recorder is not None else None
    policy = tap or policy
    chunks = make_executor(settings.executor, policy, **settings.executor_options)
    runner = RealTimeRunner(chunks, fps=task.fps) if settings.realtime else chunks
    start, outcomes, written = time.perf_counter(), [], []
    try:
        for index, seed in enumerate(
            tqdm(settings.seeds, desc=f"rollouts {task.name}", disable=not settings.progress)
        ):
            filmed = video_dir is not None and index < settings.videos
            recording = recorder.episode(task.name, seed, task.fps) if recorder else None
            if tap is not None:
                tap.recording = recording
            outcome, tally = rollout(
                task, runner, seed, settings.max_steps, frames=filmed, recording=recording
            )
            outcomes.append(outcome)
            if filmed and tally.frames and video_dir is not None:
                written.append(write_episode_video(video_dir, outcome, tally.frames, task.fps))
    finally:
        if isinstance(runner, RealTimeRunner):
            runner.close()
    limit = settings.max_steps or task.max_steps
    summary = summarise(
        task.name, settings.executor, outcomes, time.perf_counter() - start, limit=limit,
        registered_steps=task.registered_steps,
        expert_steps=expert_steps_to_success(task, settings.expert_seeds, limit),
        expert=task.expert_variant,
    )  # fmt: skip
    summary |= {"workers": 1, "videos": [str(p) for p in written]}
    summary |= {"realtime": settings.realtime, "inference_slowdown": settings.inference_slowdown}
    if isinstance(runner, RealTimeRunner):
        summary["realtime_report"] = runner.report()
        logger.info("%s in real time: %s", task.name, runner.report())
    return summary


def evaluate_policy(
    trained: TrainedPolicy,
    task_name: str,
    settings: RolloutSettings | None = None,
    *,
    video_dir: Path | None = None,
    tasks: MutableMapping[str, SimTask] | None = None,
    recorder: RolloutRecorder | None = None,
) -> dict[str, Any]:
    """Rollouts of a loaded policy in a task, or in each task of a suite, combined.

    The one evaluation that the command line, `evaluate sim=` and the training callback
    run. The task renders the policy's cameras at its image size. With `settings.workers`
    > 1 the episodes run in that many simulator processes, the policy batched across them
    (polymimic_sim.rollouts.parallel); with `via_server` the policy is served on loopback and
    driven through `PolicyClient` (the robot's path, wire and all); with `realtime` one
    simulator runs at wall-clock rate (`workers` is then 1). With `video_dir`, mp4s of
    the first `settings.videos` episodes (a suite's in a folder per task). `tasks`:
    simulators made before, by name, used and added to rather than made and closed here
    (a caller that evaluates again and again keeps them, and closes them). With a
    `recorder`, every episode of every task goes to its rerun recording.
    """
    from polymimic_sim.tasks.registry import suite_tasks

    settings = settings or RolloutSettings()
    if settings.realtime and settings.workers > 1:
        logger.warning(
            "realtime: one simulator at wall-clock rate (workers %d -> 1)", settings.workers
        )
        settings = dataclasses.replace(settings, workers=1)
    names = suite_tasks(task_name)
    parts = {}
    for name in names:
        videos = video_dir / name.replace("/", "_") if video_dir and len(names) > 1 else video_dir
        parts[name] = _evaluate_task(
            trained, name, settings, video_dir=videos, tasks=tasks, recorder=recorder
        )
    summary = parts[task_name] if names == [task_name] else summarise_suite(task_name, parts)
    return summary | {
        "weights_step": trained.step,
        "via_server": settings.via_server,
        "executor_options": dict(settings.executor_options),
    }


def evaluate_checkpoint(
    checkpoint: str | Path,
    task_name: str,
    settings: RolloutSettings | None = None,
    *,
    out: str | Path | None = None,
    device: str = "cpu",
    weights_dir: str | Path | None = None,
) -> dict[str, Any]:
    """`evaluate_policy` of a checkpoint or export; `out/summary.json` and `out/videos/`.

    With `settings.rerun`, also `out/rollouts.rrd` (rollout_recording).

    A policy trained on several embodiments (a robot cotrained with hands) acts as the
    task's (`task_embodiment`).

    An unknown task or suite, or a missing extra, fails before the policy loads.
    `weights_dir`: where a Pi policy's PaliGemma folder is, when not inside the
    checkpoint's (see load_policy).
    """
    from polymimic_data.store import write_json_atomic
    from polymimic_serve import load_policy
    from polymimic_sim.tasks.registry import suite_tasks, task_embodiment

    tasks = suite_tasks(task_name)
    recorder = None  # made first: a missing extra fails before the policy loads
    if settings is not None and settings.rerun:
        if out is None:
            raise ValueError("rerun: a recording goes beside summary.json; give an out folder")
        recorder = RolloutRecorder(Path(out) / "rollouts.rrd")
    video_dir = Path(out) / "videos" if out is not None else None
    try:
        trained = load_policy(
            checkpoint, device=device, weights_dir=weights_dir, prefer=task_embodiment(tasks[0])
        )
        summary = evaluate_policy(
            trained, task_name, settings, video_dir=video_dir, recorder=recorder
        )
    except BaseException:
        if recorder is not None:
            recorder.abort()
        raise
    if recorder is not None:
        summary["rerun"] = str(recorder.close())
    summary["checkpoint"] = str(Path(checkpoint).resolve())
    if out is not None:
        write_json_atomic(Path(out) / "summary.json", summary)
    return summary


def _evaluate_task(
    trained: TrainedPolicy,
    task_name: str,
    settings: RolloutSettings,
    *,
    video_dir: Path | None,
    tasks: MutableMapping[str, SimTask] | None,
    recorder: RolloutRecorder | None = None,
) -> dict[str, Any]:
    """One task's rollouts of a loaded policy: in process, or in `workers` processes."""
    from polymimic_serve import LocalPolicy, PolicyClient, PolicyServer, RunningServer
    from polymimic_sim.rollouts.parallel import evaluate_parallel
    from polymimic_sim.tasks.registry import make_task

    if settings.workers > 1:
        return evaluate_parallel(
            trained, task_name, settings, video_dir=video_dir, recorder=recorder
        )
    made = {} if tasks is None else tasks
    if task_name not in made:
        made[task_name] = make_task(
            task_name, image_size=trained.image_size, cameras=trained.cameras
        )
    task = made[task_name]
    try:
        if settings.via_server:
            with (
                RunningServer(PolicyServer(trained, port=0, seed=settings.seed)) as running,
                PolicyClient(running.url) as client,
            ):
                return evaluate(client, task, settings, video_dir=video_dir, recorder=recorder)
        policy = LocalPolicy(trained, seed=settings.seed)
        return evaluate(policy, task, settings, video_dir=video_dir, recorder=recorder)
    finally:
        if tasks is None:
            task.close()


def summarise_suite(suite: str, parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """One summary of a suite's tasks: pooled counts, the mean rate over tasks, and each task's."""
    episodes = sum(p["episodes"] for p in parts.values())
    successes = sum(p["successes"] for p in parts.values())
    low, high = wilson_interval(successes, episodes)
    strict = sum(p["strict_success"]["successes"] for p in parts.values())
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
        "strict_success_rate": sum(p["strict_success_rate"] for p in parts.values()) / len(parts),
        "strict_success": rate(strict, episodes),  # of the pooled episodes
        "mean_return": sum(p["mean_return"] for p in parts.values()) / len(parts),
        "success_rate_per_task": {name: p["success_rate"] for name, p in parts.items()},
        "strict_success_rate_per_task": {
            name: p["strict_success_rate"] for name, p in parts.items()
        },
        "experts": {name: p.get("expert") for name, p in parts.items()},  # each task's expert
        "env_steps": steps,
        "seconds": seconds,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "videos": [v for p in parts.values() for v in p["videos"]],
        "tasks": {name: dict(p) for name, p in parts.items()},
    }


def describe(summary: Mapping[str, Any]) -> str:
    """One line: successes, rate and its 95% interval.

    Then, where the summary has them: strict successes, successes within the registered
    limit, steps to success against the expert's, how many episodes stopped at each stage.
    """
    low, high = summary["success_rate_wilson95"]
    line = (
        f"{summary['task']}: {summary['successes']}/{summary['episodes']} succeeded "
        f"({summary['success_rate']:.0%}, 95% interval {low:.0%}-{high:.0%})"
    )
    strict = summary.get("strict_success")
    if strict is not None:
        s_low, s_high = strict["wilson95"]
        line += f"; strict {strict['successes']} ({s_low:.0%}-{s_high:.0%})"
    at_steps = summary.get("success_at_steps") or {}
    registered = str(summary.get("registered_steps"))
    if registered in at_steps and registered != str(summary.get("step_limit")):
        line += f"; {at_steps[registered]['successes']} within {registered} steps"
    if summary.get("mean_steps_to_success") is not None:
        line += f"; {summary['mean_steps_to_success']:.0f} steps to success"
        if summary.get("expert_mean_steps_to_success") is not None:
            line += f" (the expert {summary['expert_mean_steps_to_success']:.0f})"
    stages = summary.get("stages_reached")
    if stages:
        line += "; furthest stage " + ", ".join(f"{k}: {n}" for k, n in stages.items())
    return line
