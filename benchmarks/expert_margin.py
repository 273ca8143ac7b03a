"""How far inside its success radius each scripted expert ends (issue 30): stock or corrected.

    python benchmarks/expert_margin.py [--tasks reach-v3,pick-place-v3] [--episodes 20]
        [--seed 1000] [--after 10,20,40]

MetaWorld's reach and pick-place policies steer the hand to the goal, while success is
judged at the fingertips' middle (reach, within 5 cm) or at the puck they hold (pick-place,
within 7 cm), 4.5 cm below the hand. polymimic's expert for those tasks is given the goal
raised by that much (polymimic_sim.tasks.metaworld_tasks.FINGERTIP_GOAL_TASKS). Each expert runs
on held-out seeds until its success and `LINGER` ticks on, where a recording stops, then on
to each tick of `--after` (ticks after its success; `LINGER` alone by default): one JSON line
per task, expert and tick gives the distance from the goal of what success judges there
(median and largest over the episodes it succeeded in, and the mean offset along x, y, z: a
negative one is short of the goal), its successes and mean ticks to success. Nothing is
rendered but the observations' frames, at 48x64.
"""

from __future__ import annotations

import argparse

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_sim import LINGER, STOCK_EXPERT, distances_to_goal, make_task, run_expert

emit = figure_printer("expert_margin")
RADIUS = {"reach-v3": 0.05, "pick-place-v3": 0.07}  # MetaWorld's success radius, metres


def ticks_after(text: str) -> list[int]:
    """`--after`: ticks after success, each at least `LINGER` (where run_expert stops)."""
    try:
        ticks = sorted({int(part) for part in text.split(",")})
    except ValueError:
        raise argparse.ArgumentTypeError(f"comma-separated whole ticks, got {text!r}") from None
    if ticks[0] < LINGER:
        raise argparse.ArgumentTypeError(f"each at least {LINGER} (LINGER), got {text!r}")
    return ticks


def ends(task, seed: int, after: list[int]) -> tuple[int | None, dict[int, dict[str, float]]]:
    """The expert's tick of success from `seed`, and what distances_to_goal gives at each
    tick of `after` past it (missing where the episode ended before: the task's step limit)."""
    run = run_expert(task, seed)  # stops LINGER ticks past success (MetaWorld's is strict)
    at: dict[int, dict[str, float]] = {}
    if run.success_at is None:
        return None, at
    for wanted in after:
        while task.steps - (run.success_at + 1) < wanted:  # ticks stepped past success
            if task.steps >= task.max_steps:
                return run.success_at, at
            task.step(task.expert_action())
        at[wanted] = distances_to_goal(task)
    return run.success_at, at


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", default="reach-v3,pick-place-v3")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--after", type=ticks_after, default=[LINGER])
    args = parser.parse_args()
    for name in args.tasks.split(","):
        for expert in (STOCK_EXPERT, None):
            task = make_task(f"metaworld/{name}", image_size=(48, 64), expert=expert)
            try:
                seeds = range(args.seed, args.seed + args.episodes)
                runs = [ends(task, seed, args.after) for seed in seeds]
                variant = task.expert_variant
            finally:
                task.close()
            ticks = [tick for tick, _ in runs if tick is not None]
            for wanted in args.after:
                there = [at[wanted] for tick, at in runs if tick is not None and wanted in at]
                cm = [d["judged"] * 100 for d in there]
                offset = [[d[f"judged_{axis}"] * 100 for axis in "xyz"] for d in there]
                emit(
                    "judged_distance_cm",
                    float(np.median(cm)) if cm else float("nan"),
                    "cm",
                    task=name,
                    expert=variant,
                    largest_cm=max(cm, default=None),
                    mean_offset_xyz_cm=np.mean(offset, 0).round(2).tolist() if offset else None,
                    radius_cm=round(RADIUS[name] * 100, 1) if name in RADIUS else None,
                    successes=len(ticks),
                    measured=len(there),
                    episodes=len(runs),
                    mean_ticks_to_success=float(np.mean(ticks)) if ticks else None,
                    seeds=[args.seed, args.seed + args.episodes - 1],
                    at=f"success + {wanted} ticks",
                )


if __name__ == "__main__":
    main()
