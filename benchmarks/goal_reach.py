"""Does a MetaWorld policy read its goal, and how near does it bring the fingers (issue 30)?

    python benchmarks/goal_reach.py CHECKPOINT [--task metaworld/reach-v3] [--episodes 40]
                                    [--seed 1000] [--max-steps 150]

Runs the checkpoint closed loop on held-out seeds (the chunk executor, one process) and
follows, at every step, the point MetaWorld's success is judged at (the fingertips' middle,
`tcp_center`) against the task's goal. Prints one JSON line per figure:

- `closest_approach`: the fingertips' nearest distance to the goal, quartiles (m); reach's
  success is within 0.05;
- `error_at_closest`: fingertips minus goal there, per axis (x, y, z), mean and mean of
  absolute values (m): a bias names the axis it is on;
- `goal_correlation`: per axis, the correlation over episodes of where the fingertips came
  nearest with where the goal was. A policy blind to the goal scores about 0; one that
  reads it, near 1.

A goal the policy does not see and one it sees but misses by a few centimetres fail alike
in the success rate; these tell them apart.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_serve import LocalPolicy, load_policy
from polymimic_sim import RolloutSettings, evaluate, make_task

emit = figure_printer("goal_reach")


class Followed:
    """A MetaWorld task whose fingertips and goal are written down at every step."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.episodes: list[dict[str, Any]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.task, name)

    def reset(self, seed: int) -> dict[str, Any]:
        observation = self.task.reset(seed)
        goal = np.array(self.task.sim._target_pos, dtype=float)
        self.episodes.append({"seed": seed, "goal": goal, "fingers": []})
        return observation

    def step(self, action: np.ndarray) -> Any:
        step = self.task.step(action)
        self.episodes[-1]["fingers"].append(np.array(self.task.sim.tcp_center, dtype=float))
        return step


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--task", default="metaworld/reach-v3")
    parser.add_argument("--episodes", type=int, default=40)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--max-steps", type=int, default=150)
    opts = parser.parse_args()
    if not opts.task.startswith("metaworld/"):
        parser.error(f"--task: a MetaWorld task (metaworld/<name>), got {opts.task!r}")
    trained = load_policy(opts.checkpoint, prefer="sim/metaworld_sawyer")
    simulated = make_task(opts.task, image_size=trained.image_size, cameras=trained.cameras)
    task = Followed(simulated)
    settings = RolloutSettings(
        episodes=opts.episodes, seed=opts.seed, max_steps=opts.max_steps, workers=1,
        videos=0, expert_episodes=0, progress=True,  # no expert: it would step `task` too
    )  # fmt: skip
    try:
        summary = evaluate(LocalPolicy(trained), task, settings)  # type: ignore[arg-type]
    finally:
        simulated.close()
    if len(task.episodes) != opts.episodes:
        raise SystemExit(f"followed {len(task.episodes)} episodes, not {opts.episodes}")
    goals = np.array([e["goal"] for e in task.episodes])
    nearest = []
    for episode in task.episodes:
        fingers = np.array(episode["fingers"])
        nearest.append(fingers[np.linalg.norm(fingers - episode["goal"], axis=1).argmin()])
    errors = np.array(nearest) - goals
    where = {
        "checkpoint": str(opts.checkpoint), "task": opts.task, "cameras": trained.cameras,
        "seeds": [opts.seed, opts.seed + opts.episodes - 1], "max_steps": opts.max_steps,
    }  # fmt: skip
    emit("success_rate", summary["success_rate"], "fraction", **where)
    quartiles = np.percentile(np.linalg.norm(errors, axis=1), [25, 50, 75])
    emit("closest_approach", float(quartiles[1]), "m", quartiles=quartiles.round(4).tolist(),
         **where)  # fmt: skip
    emit("error_at_closest", float(np.abs(errors).mean()), "m",
         mean_xyz=errors.mean(0).round(4).tolist(),
         abs_mean_xyz=np.abs(errors).mean(0).round(4).tolist(), **where)  # fmt: skip
    correlation = [float(np.corrcoef(goals[:, a], np.array(nearest)[:, a])[0, 1]) for a in range(3)]
    emit("goal_correlation", min(correlation), "r", xyz=np.round(correlation, 3).tolist(), **where)


if __name__ == "__main__":
    main()
