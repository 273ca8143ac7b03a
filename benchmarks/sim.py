"""Simulation figures: the scripted experts' ceiling, recording speed, rollout overhead.

    python benchmarks/sim.py [--tasks metaworld/button-press-v3,aloha/transfer_cube]
                             [--episodes 10] [--steps 300] [--workers 2]

Prints one JSON line per figure (DESIGN.md), for each task:
- the expert's own success rate over `--episodes` seeds and the recording throughput
  (frames written per second, JPEG encoding included), in one process and in `--workers`
  (the same episodes again), and their ratio;
- a frame's rendering time with MuJoCo's defaults against shadows and multisampling off;
- the bare task's step rate (the expert acting, one camera rendered) against closed-loop
  rollouts' (an untrained small HPT through the `chunk` executor, inference included), one
  simulator in process and `--workers` simulator processes with the policy batched across
  them, in the same run: the evaluation's overhead and the workers' gain as ratios.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_data.embodiments import declare
from polymimic_serve import LocalPolicy, load_policy, write_untrained_export
from polymimic_sim import RolloutSettings, evaluate, evaluate_parallel, make_task, record

emit = figure_printer("sim")
SIZE = (96, 128)


def render_ms(task_name: str, cheap: bool, frames: int = 50) -> float:
    """Milliseconds per frame (one camera), MuJoCo's defaults or cheap."""
    task = make_task(task_name, image_size=SIZE, cheap_rendering=cheap)
    try:
        task.reset(0)
        start = time.perf_counter()
        for _ in range(frames):
            task.render()
        return (time.perf_counter() - start) / frames * 1e3
    finally:
        task.close()


def bare_steps_per_s(task_name: str, steps: int) -> float:
    task = make_task(task_name, image_size=SIZE)
    try:
        task.reset(0)
        task.expert_action()  # a plan made at the first tick (ALOHA's) is not stepping
        start = time.perf_counter()
        for _ in range(steps):
            if task.step(task.expert_action()).done:
                task.reset(1)
        return steps / (time.perf_counter() - start)
    finally:
        task.close()


def rollout_figures(task_name: str, tmp: Path, steps: int, workers: int) -> None:
    bare = bare_steps_per_s(task_name, steps)
    emit("bare_steps_per_s", bare, "1/s", task=task_name)
    task = make_task(task_name, image_size=SIZE)
    declare(task.declaration())
    export = write_untrained_export(
        tmp / task_name.replace("/", "_"), embodiment=task.embodiment, cameras=task.cameras,
        image_size=SIZE, horizon=16,
    )  # fmt: skip
    trained = load_policy(export)
    run = {"seed": 1000, "max_steps": steps // 2, "executor_options": {"n_action_steps": 8},
           "progress": False}  # fmt: skip
    try:
        one = evaluate(LocalPolicy(trained), task, RolloutSettings(episodes=2, **run))
        one = one["env_steps_per_s"]
    finally:
        task.close()
    emit("rollout_steps_per_s", one, "1/s", task=task_name, workers=1, n_action_steps=8)
    emit("rollout_over_bare_step_rate", one / bare, "ratio", task=task_name, workers=1)
    settings = RolloutSettings(workers=workers, episodes=2 * workers, **run)
    summary = evaluate_parallel(trained, task_name, settings)
    many = summary["env_steps_per_s"]  # the workers' start-up apart, as one task's in process
    emit("rollout_steps_per_s", many, "1/s", task=task_name, workers=workers,
         mean_batch=summary["mean_batch"])  # fmt: skip
    emit("workers_startup_s", summary["startup_s"], "s", task=task_name, workers=workers)
    emit("rollout_over_bare_step_rate", many / bare, "ratio", task=task_name, workers=workers)
    emit("workers_over_one_step_rate", many / one, "ratio", task=task_name, workers=workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--tasks", default="metaworld/button-press-v3,aloha/transfer_cube")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300, help="bare steps to time")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for task_name in args.tasks.split(","):
            start = time.perf_counter()
            report = record(task_name, Path(tmp) / "demos", episodes=args.episodes,
                            progress=False)  # fmt: skip
            seconds = time.perf_counter() - start
            frames = sum(_frames(p) for p in report.written)
            emit("expert_success_rate", report.success_rate, "ratio", task=task_name,
                 episodes=args.episodes)  # fmt: skip
            emit("record_frames_per_s", frames / seconds, "1/s", task=task_name, image_size=SIZE)
            start = time.perf_counter()  # the same episodes in --workers processes
            record(task_name, Path(tmp) / "demos-workers", episodes=args.episodes,
                   progress=False, workers=args.workers)  # fmt: skip
            many = frames / (time.perf_counter() - start)
            emit("record_frames_per_s", many, "1/s", task=task_name, workers=args.workers)
            emit("record_workers_over_one", many / (frames / seconds), "ratio", task=task_name,
                 workers=args.workers, note="the workers' start included")  # fmt: skip
            default, cheap = (render_ms(task_name, c) for c in (False, True))
            emit("render_ms_default", default, "ms", task=task_name, image_size=SIZE)
            emit("render_ms_cheap", cheap, "ms", task=task_name, shadows=False,
                 multisampling=False)  # fmt: skip
            emit("render_default_over_cheap", default / cheap, "ratio", task=task_name)
            rollout_figures(task_name, Path(tmp), args.steps, args.workers)


def _frames(path: Path) -> int:
    from polymimic_data import EpisodeReader

    return int(EpisodeReader(path).attrs["total_frames"])


if __name__ == "__main__":
    main()
