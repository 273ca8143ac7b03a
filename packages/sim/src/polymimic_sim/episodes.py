"""One closed-loop episode and a set of them: the types both rollout loops share.

`EpisodeTally` counts an episode as it runs and gives its `Outcome` (with the jerk where
chunks join, `boundary_jerk`); `summarise` turns outcomes into the plain-data summary
(success rate with its 95% Wilson interval, mean return, steps to success, jerk);
`write_episode_video` frames an episode green or red. `rollouts` (one simulator) and
`parallel` (several in lockstep) both build on these.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polymimic_sim.task_types import Step

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval
SUCCESS_COLOUR, FAILURE_COLOUR, BORDER = (0, 200, 0), (220, 0, 0), 3  # the videos' frames


def wilson_interval(successes: int, trials: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a success rate (95% by default)."""
    if trials <= 0:
        raise ValueError(f"trials: a positive number, got {trials}")
    if not 0 <= successes <= trials:
        raise ValueError(f"successes: 0..{trials}, got {successes}")
    rate = successes / trials
    denominator = 1 + z * z / trials
    centre = (rate + z * z / (2 * trials)) / denominator
    half = z * math.sqrt(rate * (1 - rate) / trials + z * z / (4 * trials * trials)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class Outcome:
    """One closed-loop episode."""

    seed: int
    success: bool
    steps: int  # ticks run (to success, or to the end)
    total_return: float
    error: str | None = None  # what the simulator raised, when it gave up
    boundary_jerk: float | None = None  # mean |third difference| of actions at chunk joins


def boundary_jerk(actions: np.ndarray, switches: list[int]) -> float | None:
    """Mean L2 norm of the actions' third difference over windows that span a chunk boundary.

    A new chunk first executed at tick s: the differences ending at s..s+2, in the data's
    units per tick cubed; None without a boundary three ticks clear of the ends.
    """
    if len(actions) < 4:
        return None  # e.g. a simulator that gave up at once
    jerk = np.linalg.norm(np.diff(actions, n=3, axis=0), axis=1)  # jerk[i] ends at tick i + 3
    windows = [jerk[t - 3] for s in switches for t in range(s, s + 3) if 3 <= t < len(actions)]
    return float(np.mean(windows)) if windows else None


class EpisodeTally:
    """One episode as it runs: ticks, return and (for a video) frames; then its Outcome."""

    def __init__(self, seed: int, limit: int, frames: bool = False) -> None:
        self.seed, self.limit, self.ticks, self.total = seed, limit, 0, 0.0
        self.frames: list[np.ndarray] | None = [] if frames else None
        self.actions: list[np.ndarray] = []

    def observe(self, observation: Mapping[str, Any]) -> None:
        """Keep the frame of this tick (every camera, side by side) when a video is due."""
        if self.frames is not None:
            images = observation["images"]
            self.frames.append(np.concatenate([images[c] for c in sorted(images)], axis=1))

    def add(self, step: Step, action: np.ndarray | None = None) -> Outcome | None:
        """Count one step (of `action`); the Outcome once the episode is over, else None."""
        self.ticks += 1
        if action is not None:
            self.actions.append(action)
        self.total += step.reward
        if step.success or step.done or self.ticks >= self.limit:
            return Outcome(self.seed, step.success, self.ticks, self.total)
        return None

    def crashed(self, error: str) -> Outcome:
        """The simulator gave up during this tick's step: a failure."""
        self.ticks += 1
        return Outcome(self.seed, False, self.ticks, self.total, error)


def write_episode_video(
    folder: Path, outcome: Outcome, frames: list[np.ndarray], fps: float
) -> Path:
    """`folder/seed<N>-success.mp4` (or -failure): the frames, framed green or red."""
    from polymimic_eval import write_video

    colour = np.array(SUCCESS_COLOUR if outcome.success else FAILURE_COLOUR, np.uint8)
    framed = []
    for frame in frames:
        out = frame.copy()
        out[:BORDER], out[-BORDER:], out[:, :BORDER], out[:, -BORDER:] = (
            colour,
            colour,
            colour,
            colour,
        )
        framed.append(out)
    name = f"seed{outcome.seed:06d}-{'success' if outcome.success else 'failure'}.mp4"
    return write_video(folder / name, framed, fps)


def summarise(task_name: str, executor: str, outcomes: list[Outcome], seconds: float) -> dict:
    """The plain-data summary of a set of rollouts (see the module docstring)."""
    outcomes = sorted(outcomes, key=lambda o: o.seed)
    successes = sum(o.success for o in outcomes)
    low, high = wilson_interval(successes, len(outcomes))
    to_success = [o.steps for o in outcomes if o.success]
    steps = sum(o.steps for o in outcomes)
    jerks = [o.boundary_jerk for o in outcomes if o.boundary_jerk is not None]
    return {
        "task": task_name,
        "executor": executor,
        "episodes": len(outcomes),
        "successes": successes,
        "success_rate": successes / len(outcomes),
        "success_rate_wilson95": [low, high],
        "mean_return": sum(o.total_return for o in outcomes) / len(outcomes),
        "mean_steps_to_success": sum(to_success) / len(to_success) if to_success else None,
        "mean_boundary_jerk": float(np.mean(jerks)) if jerks else None,
        "env_steps": steps,
        "seconds": seconds,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "outcomes": [asdict(o) for o in outcomes],
    }
