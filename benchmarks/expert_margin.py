"""How far inside its success radius each scripted expert ends (issue 30): stock or corrected.

    python benchmarks/expert_margin.py [--tasks reach-v3,pick-place-v3] [--episodes 20]
        [--seed 1000]

MetaWorld's reach and pick-place policies steer the hand to the goal, while success is
judged at the fingertips' middle (reach, within 5 cm) or at the puck they hold (pick-place,
within 7 cm), 4.5 cm below the hand. polymimic's expert for those tasks is given the goal
raised by that much (polymimic_sim.metaworld_tasks.FINGERTIP_GOAL_TASKS). Each expert runs
on held-out seeds until its success and `LINGER` ticks on, where a recording stops, and one
JSON line per task and expert gives the distance from the goal of what success judges there
(median and largest over the episodes it succeeded in), its successes and mean ticks to
success. Nothing is rendered but the observations' frames, at 48x64.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_sim import LINGER, make_task

emit = figure_printer("expert_margin")
RADIUS = {"reach-v3": 0.05, "pick-place-v3": 0.07}  # MetaWorld's success radius, metres


def judged_point(task: Any) -> np.ndarray:
    """Where the task's success is judged: the fingertips' middle (reach), else the object."""
    sim = task.sim
    if task.name.endswith("reach-v3"):
        return np.asarray(sim.tcp_center, float)
    return np.asarray(sim._get_pos_objects(), float)[:3]


def run(task: Any, seed: int) -> tuple[int | None, float]:
    """The expert's tick of success (None if it failed) and the judged point's distance from
    the goal `LINGER` ticks after it (or at the end)."""
    task.reset(seed)
    success_at = None
    for tick in range(task.max_steps):
        step = task.step(task.expert_action())
        if step.success and success_at is None:
            success_at = tick
        if step.done or (success_at is not None and tick >= success_at + LINGER):
            break
    return success_at, float(np.linalg.norm(judged_point(task) - task.sim._target_pos))


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", default="reach-v3,pick-place-v3")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args()
    for name in args.tasks.split(","):
        for expert in ("stock", None):
            task = make_task(f"metaworld/{name}", image_size=(48, 64), expert=expert)
            try:
                runs = [run(task, seed) for seed in range(args.seed, args.seed + args.episodes)]
                variant = task.expert_variant
            finally:
                task.close()
            ticks = [tick for tick, _ in runs if tick is not None]
            ends = [distance * 100 for tick, distance in runs if tick is not None]
            emit(
                "judged_distance_cm",
                float(np.median(ends)) if ends else float("nan"),
                "cm",
                task=name,
                expert=variant,
                largest_cm=max(ends, default=None),
                radius_cm=round(RADIUS[name] * 100, 1) if name in RADIUS else None,
                successes=len(ticks),
                episodes=len(runs),
                mean_ticks_to_success=float(np.mean(ticks)) if ticks else None,
                seeds=[args.seed, args.seed + args.episodes - 1],
                at=f"success + {LINGER} ticks",
            )


if __name__ == "__main__":
    main()
