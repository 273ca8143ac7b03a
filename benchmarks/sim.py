"""Simulation figures: the scripted expert's ceiling, recording speed, rollout overhead.

    python benchmarks/sim.py [--task metaworld/button-press-v3] [--episodes 10]

Prints one JSON line per figure (DESIGN.md):
- the expert's own success rate over `--episodes` seeds and the recording throughput
  (frames written per second, JPEG encoding included);
- a frame's rendering time with MuJoCo's defaults against shadows and multisampling off;
- the bare task's step rate (the expert acting, one camera rendered) against a closed-loop
  rollout's (an untrained small HPT through the `chunk` executor, inference included), in
  the same run: the evaluation's overhead as a ratio.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_data.embodiments import declare
from polymimic_serve import LocalPolicy, load_policy, write_untrained_export
from polymimic_sim import evaluate, make_task, record

emit = figure_printer("sim")


def render_ms(task_name: str, size: tuple[int, int], cheap: bool, frames: int = 50) -> float:
    """Milliseconds per observation (one camera rendered), MuJoCo's defaults or cheap."""
    from polymimic_sim.metaworld_tasks import MetaWorldTask

    task = MetaWorldTask(task_name.removeprefix("metaworld/"), image_size=size,
                         cheap_rendering=cheap)  # fmt: skip
    try:
        task.reset(0)
        start = time.perf_counter()
        for _ in range(frames):
            task._observation()
        return (time.perf_counter() - start) / frames * 1e3
    finally:
        task.close()


def bare_steps_per_s(task_name: str, size: tuple[int, int], steps: int) -> float:
    task = make_task(task_name, image_size=size)
    try:
        task.reset(0)
        start = time.perf_counter()
        for _ in range(steps):
            if task.step(task.expert_action()).done:
                task.reset(1)
        return steps / (time.perf_counter() - start)
    finally:
        task.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--task", default="metaworld/button-press-v3")
    parser.add_argument("--episodes", type=int, default=10)
    parser.add_argument("--steps", type=int, default=300, help="bare steps to time")
    args = parser.parse_args()
    size = (96, 128)
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        report = record(args.task, Path(tmp) / "demos", episodes=args.episodes, progress=False)
        seconds = time.perf_counter() - start
        frames = sum(_frames(p) for p in report.written)
        emit("expert_success_rate", report.success_rate, "ratio", task=args.task,
             episodes=args.episodes)  # fmt: skip
        emit("record_frames_per_s", frames / seconds, "1/s", task=args.task, image_size=size)
        default, cheap = (render_ms(args.task, size, c) for c in (False, True))
        emit("render_ms_default", default, "ms", task=args.task, image_size=size)
        emit("render_ms_cheap", cheap, "ms", task=args.task, shadows=False, multisampling=False)
        emit("render_default_over_cheap", default / cheap, "ratio", task=args.task)
        bare = bare_steps_per_s(args.task, size, args.steps)
        emit("bare_steps_per_s", bare, "1/s", task=args.task)
        task = make_task(args.task, image_size=size)
        declare(task.declaration())
        export = write_untrained_export(
            Path(tmp) / "untrained", embodiment=task.embodiment, cameras=task.cameras,
            image_size=size, horizon=16,
        )  # fmt: skip
        policy = LocalPolicy(load_policy(export))
        summary = evaluate(policy, task, episodes=2, seed=1000, max_steps=args.steps // 2,
                           executor_options={"n_action_steps": 8}, progress=False)  # fmt: skip
        task.close()
        rollout = summary["env_steps_per_s"]
        emit("rollout_steps_per_s", rollout, "1/s", task=args.task, executor="chunk",
             n_action_steps=8)  # fmt: skip
        emit("rollout_over_bare_step_rate", rollout / bare, "ratio", task=args.task)


def _frames(path: Path) -> int:
    from polymimic_data import EpisodeReader

    return int(EpisodeReader(path).attrs["total_frames"])


if __name__ == "__main__":
    main()
