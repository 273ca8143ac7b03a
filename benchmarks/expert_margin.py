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

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_sim import LINGER, STOCK_EXPERT, distances_to_goal, make_task, run_expert

emit = figure_printer("expert_margin")
RADIUS = {"reach-v3": 0.05, "pick-place-v3": 0.07}  # MetaWorld's success radius, metres


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--tasks", default="reach-v3,pick-place-v3")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    args = parser.parse_args()
    for name in args.tasks.split(","):
        for expert in (STOCK_EXPERT, None):
            task = make_task(f"metaworld/{name}", image_size=(48, 64), expert=expert)
            try:
                runs = []
                for seed in range(args.seed, args.seed + args.episodes):
                    success_at = run_expert(task, seed).success_at
                    runs.append((success_at, distances_to_goal(task)["judged"]))
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
