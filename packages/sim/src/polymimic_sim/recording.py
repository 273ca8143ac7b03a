"""Scripted demonstrations recorded as episodes: `record(task, dest, episodes=50)`.

Each episode runs the task's scripted expert from its own seed (`seed + i`) until its
strict success (then `LINGER` more frames, the task held: the demonstrations show the task
finished, e.g. the hand-over's release, not only its first touch) or its time runs out.
Only episodes with a (standard) success are written, through polymimic-data's
EpisodeWriter (atomic: an episode appears whole or not at all), declaring the task's
embodiment, with the task as the prompt, the simulator's fps, the episode's seed, the
expert that recorded it (`expert`: registry.expert_variant) and the ticks of its two successes
in its attributes. An episode already there (a rerun after an interruption) is kept, not
redone: recording resumes, and refuses a folder recorded with other cameras or by another
expert.

With `workers` > 1 the episodes are shared among that many simulator processes (spawned,
each making its tasks once): an episode depends on its seed alone, so what is written is
the same, in about 1/workers of the time on as many free cores.
"""

from __future__ import annotations

import atexit
import multiprocessing as mp
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
from tqdm import tqdm

from polymimic_data.embodiments import DECLARATION, check_declaration, declared_cameras
from polymimic_data.store import EpisodeReader, EpisodeWriter
from polymimic_sim.tasks.registry import default_cameras, expert_variant, make_task, suite_tasks
from polymimic_sim.tasks.task_types import STOCK_EXPERT, SimTask

LINGER = 10  # frames recorded after success: the policy learns to hold, not to leave
EXPERT = "expert"  # an episode's attribute: the expert that recorded it (registry.expert_variant)


@dataclass
class RecordReport:
    """What `record` did: per task and seed, whether the expert succeeded; what was written."""

    task: str
    succeeded: dict[tuple[str, int], bool] = field(default_factory=dict)  # (task, seed)
    written: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # already there from an earlier run

    @property
    def success_rate(self) -> float:
        """The expert's share of successful episodes (kept ones count as successes)."""
        outcomes = list(self.succeeded.values())
        return sum(outcomes) / len(outcomes) if outcomes else 0.0

    def per_task(self) -> dict[str, float]:
        """The expert's success rate per task (one entry unless a suite was recorded)."""
        tasks: dict[str, list[bool]] = {}
        for (name, _), ok in self.succeeded.items():
            tasks.setdefault(name, []).append(ok)
        return {name: sum(oks) / len(oks) for name, oks in tasks.items()}


def _episode_name(task_name: str, seed: str) -> str:
    """An episode's folder name: its task's, then its seed (a glob's `*` for every seed)."""
    return f"{task_name.replace('/', '_')}_seed{seed}.zarr"


def _episode_path(dest: Path, task_name: str, seed: int) -> Path:
    return dest / _episode_name(task_name, f"{seed:06d}")


def _episodes_of(task_name: str) -> str:
    """The glob pattern of `task_name`'s episodes in a folder, every seed's."""
    return _episode_name(task_name, "*")


def episode_arrays(task: SimTask, states: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
    """The arrays an episode stores.

    The task's own keys where it names them (its `episode_arrays`, e.g. eva-style pose
    keys), else `observation.state` and `action`.
    """
    own = getattr(task, "episode_arrays", None)
    if own is not None:
        return own(states, actions)
    return {"observation.state": states, "action": actions}


@dataclass(frozen=True)
class ExpertRun:
    """When the scripted expert of one episode succeeded (tick; None: it did not)."""

    success_at: int | None  # the task's standard success
    strict_at: int | None  # its strict success


def run_expert(
    task: SimTask, seed: int, keep: Callable[[dict[str, Any], np.ndarray], None] | None = None
) -> ExpertRun:
    """Run task's scripted expert from `seed` as a recording does; the ticks of its successes.

    It stops `LINGER` ticks after its strict success, or when the simulator ends the episode.
    `keep(observation, action)` is called at each tick (what a recording stores), before the
    action is applied. The task is left where the run ended (to measure it there).
    """
    observation = task.reset(seed)
    success_at: int | None = None
    strict_at: int | None = None
    for tick in range(task.max_steps):
        action = task.expert_action()
        if keep is not None:
            keep(observation, action)
        step = task.step(action)
        observation = step.observation
        if step.success and success_at is None:
            success_at = tick
        if step.strict_success and strict_at is None:
            strict_at = tick
        if step.done or (strict_at is not None and tick >= strict_at + LINGER):
            break
    return ExpertRun(success_at, strict_at)


def record_episode(task: SimTask, seed: int, path: Path, *, jpeg_quality: int = 90) -> bool:
    """Run the expert from `seed` (run_expert); write the episode to `path` if it succeeded."""
    states, actions, frames = [], [], {c: [] for c in task.cameras}

    def keep(observation: dict[str, Any], action: np.ndarray) -> None:
        states.append(observation["state"])
        actions.append(action)
        for camera in task.cameras:
            frames[camera].append(
                simplejpeg.encode_jpeg(observation["images"][camera], jpeg_quality)
            )

    run = run_expert(task, seed, keep)
    success_at, strict_at = run.success_at, run.strict_at
    if success_at is None:
        return False
    declaration = task.declaration()
    check_declaration(declaration, source=str(path))
    metadata = {DECLARATION: declaration, "seed": int(seed), "sim_task": task.name,
                EXPERT: task.expert_variant, "success_step": int(success_at),
                "strict_success_step": None if strict_at is None else int(strict_at)}  # fmt: skip
    with EpisodeWriter(
        path,
        embodiment=declaration["name"],
        fps=task.fps,
        task_name=task.prompt,
        task_description=task.prompt,
        metadata=metadata,
    ) as writer:
        writer.extend(episode_arrays(task, np.stack(states), np.stack(actions)), frames)
        writer.annotate(task.prompt, 0, len(states))
    return True


def record(
    task_name: str,
    dest: str | os.PathLike[str],
    *,
    episodes: int = 50,
    seed: int = 0,
    image_size: Sequence[int] = (96, 128),
    cameras: Sequence[str] | None = None,
    progress: bool = True,
    workers: int = 1,
    expert: str | None = None,
) -> RecordReport:
    """Record `episodes` scripted demonstrations of `task_name` under `dest`.

    A suite (`metaworld/mt10`) records `episodes` of each of its tasks, from the same seeds.
    `workers`: simulator processes sharing the episodes (see the module docstring).
    `expert`: the scripted expert of every task (registry.expert_variant; None: each its
    default), e.g. `stock` for MetaWorld's policies as written.
    """
    if episodes < 1:
        raise ValueError(f"episodes: a positive number, got {episodes}")
    if workers < 1:
        raise ValueError(f"workers: a positive number, got {workers}")
    dest = Path(dest)
    every = [(name, episode_seed, _episode_path(dest, name, episode_seed))
             for name in suite_tasks(task_name)
             for episode_seed in range(seed, seed + episodes)]  # fmt: skip
    todo = [job for job in every if not job[2].exists()]  # an episode there is kept
    experts = {name: expert_variant(name, expert) for name in suite_tasks(task_name)}
    # every episode of these tasks already there, of these seeds or others: one folder, one mix
    there = [(name, path) for name in experts for path in sorted(dest.glob(_episodes_of(name)))]
    asked = tuple(cameras) if cameras else default_cameras(task_name)  # [] too: a task's own
    if there and asked is not None:  # an unknown task is refused below, by make_task
        _check_kept(there, asked, experts, given=bool(cameras))
    setup = (tuple(image_size), tuple(cameras) if cameras else None, expert)
    bar = tqdm(total=len(todo), desc=f"record {task_name}", disable=not progress)
    with bar:
        if workers == 1 or len(todo) < 2:
            done = _record_in_turn(todo, setup, bar)
        else:
            done = _record_in_processes(todo, setup, min(workers, len(todo)), bar)
    report = RecordReport(task_name)
    for name, episode_seed, path in every:  # in order, task by task, however they finished
        succeeded = done.get((name, episode_seed))
        report.succeeded[(name, episode_seed)] = succeeded is not False
        if succeeded is None:
            report.kept.append(path)
        elif succeeded:
            report.written.append(path)
    return report


def _check_kept(
    kept: list[tuple[str, Path]],
    cameras: tuple[str, ...],
    experts: dict[str, str],
    *,
    given: bool = True,
) -> None:
    """Episodes kept from an earlier recording match this one, else ValueError naming the first.

    Each (task, path) holds the cameras asked for now and was recorded by the expert its task
    records with now (`experts`; an episode naming none, by the stock expert): a
    folder recorded with another view or expert, resumed, would train on a mix. `given`: the
    cameras were asked for; else they are the task's default.
    """
    whose = "" if given else " (the task's default: name its cameras to resume that view)"
    again = ("an episode already there is kept, not recorded again: record into another "
             "folder, or remove the old episodes")  # fmt: skip
    for name, path in kept:
        attrs = EpisodeReader(path).attrs
        held = declared_cameras(attrs) or ()
        if held != cameras:
            raise ValueError(
                f"{path}: recorded with cameras {list(held)}, not {list(cameras)}{whose}; {again}"
            )
        expert = attrs.get(EXPERT, STOCK_EXPERT)
        if expert != (now := experts[name]):
            raise ValueError(
                f"{path}: recorded by the {expert!r} expert of {name}, which records with the "
                f"{now!r} one now (ask for {expert!r} to resume them: --expert {expert}); {again}"
            )


Setup = tuple[tuple[int, ...], tuple[str, ...] | None, str | None]  # image size, cameras, expert


def _record_in_turn(
    todo: list[tuple[str, int, Path]], setup: Setup, bar: tqdm
) -> dict[tuple[str, int], bool]:
    """Each episode in this process, a task made once for the episodes of each."""
    done: dict[tuple[str, int], bool] = {}
    task: SimTask | None = None
    try:
        for name, episode_seed, path in todo:
            if task is None or task.name != name:
                if task is not None:
                    task.close()
                task = None
                task = _make_checked(name, setup)
            done[(name, episode_seed)] = record_episode(task, episode_seed, path)
            bar.update()
    finally:
        if task is not None:
            task.close()
    return done


def _record_in_processes(
    todo: list[tuple[str, int, Path]], setup: Setup, workers: int, bar: tqdm
) -> dict[tuple[str, int], bool]:
    """The episodes shared among `workers` spawned processes.

    Spawned: a GL context is made in the process that renders, and the parent's threads
    stay out of them.
    """
    from polymimic_sim.tasks.rendering import ensure_headless_rendering, never_loads_torch

    ensure_headless_rendering()  # probed once here; the workers inherit MUJOCO_GL
    done: dict[tuple[str, int], bool] = {}
    context = mp.get_context("spawn")
    pool = ProcessPoolExecutor(workers, mp_context=context, initializer=never_loads_torch)
    try:
        futures = {pool.submit(_record_in_worker, name, seed, path, setup): (name, seed)
                   for name, seed, path in todo}  # fmt: skip
        for future in as_completed(futures):
            done[futures[future]] = future.result()  # a worker's error is raised here
            bar.update()
    except BaseException:  # the episodes not begun are dropped, not waited for
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return done


_WORKER_TASKS: dict[tuple[str, Setup], SimTask] = {}  # a recording worker's current task


def _record_in_worker(name: str, episode_seed: int, path: Path, setup: Setup) -> bool:
    """One episode in a worker, its task kept for the next.

    The episodes come task by task, so a suite's worker holds one simulator at a time.
    """
    task = _WORKER_TASKS.get((name, setup))
    if task is None:
        _close_worker_tasks()
        task = _WORKER_TASKS[(name, setup)] = _make_checked(name, setup)
        # registered after the task's renderer: at exit the last registered runs first, and
        # mujoco's EGL module ends its display at exit (a context freed after: EGLError)
        atexit.unregister(_close_worker_tasks)
        atexit.register(_close_worker_tasks)
    return record_episode(task, episode_seed, path)


def _close_worker_tasks() -> None:
    for task in _WORKER_TASKS.values():
        task.close()
    _WORKER_TASKS.clear()


def _make_checked(name: str, setup: Setup) -> SimTask:
    """The task, its declaration checked: a task that records nothing says so at once."""
    image_size, cameras, expert = setup
    task = make_task(name, image_size=image_size, cameras=cameras, expert=expert)
    try:
        task.declaration()
    except BaseException:
        task.close()
        raise
    return task
