"""One closed-loop episode and a set of them: the types both rollout loops share.

`EpisodeTally` counts an episode as it runs and gives its `Outcome` (with the jerk where
chunks join, `boundary_jerk`); `summarise` turns outcomes into the plain-data summary;
`write_episode_video` frames an episode green or red. `closed_loop` (one simulator) and
`parallel` (several in lockstep) both build on these.

An episode runs until the task's strict success (which comes with or after its standard
one), its end, or the step limit: so one evaluation gives both rates, and the standard rate
at any shorter limit (the task's registered one) from the tick each success came at.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from polymimic_sim.tasks.registry import expert_variant, make_task, staged_reward
from polymimic_sim.tasks.task_types import SimTask, Step

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
    success: bool  # the task's standard success, at some tick
    steps: int  # ticks run (to strict success, or to the end)
    total_return: float
    error: str | None = None  # what the simulator raised, when it gave up
    boundary_jerk: float | None = None  # mean |third difference| of actions at chunk joins
    success_step: int | None = None  # the tick (1-based) of the first standard success
    strict_success: bool = False
    strict_success_step: int | None = None  # the tick its strict success was complete
    max_reward: float | None = None  # the highest reward of a tick: a staged task's stage


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

    def __init__(self, seed: int, limit: int, frames: bool = False, recording: Any = None) -> None:
        """`recording`: an EpisodeRecording (rollout_recording) the episode also goes to."""
        self.seed, self.limit, self.ticks, self.total = seed, limit, 0, 0.0
        self.recording = recording
        self.frames: list[np.ndarray] | None = [] if frames else None
        self.actions: list[np.ndarray] = []
        self.success_step: int | None = None
        self.max_reward: float | None = None

    def observe(self, observation: Mapping[str, Any]) -> None:
        """Keep the frame of this tick (every camera, side by side) when a video is due."""
        if self.recording is not None:
            self.recording.observe(observation)
        if self.frames is not None:
            images = observation["images"]
            self.frames.append(np.concatenate([images[c] for c in sorted(images)], axis=1))

    def add(self, step: Step, action: np.ndarray | None = None) -> Outcome | None:
        """Count one step (of `action`); the Outcome once the episode is over, else None."""
        self.ticks += 1
        if action is not None:
            self.actions.append(action)
        if self.recording is not None:
            self.recording.act(action, step.reward)
        self.total += step.reward
        if self.max_reward is None or step.reward > self.max_reward:
            self.max_reward = float(step.reward)
        if step.success and self.success_step is None:
            self.success_step = self.ticks  # a task's strict success comes with or after it
        if step.strict_success or step.done or self.ticks >= self.limit:
            return self._outcome(strict=step.strict_success)
        return None

    def crashed(self, error: str) -> Outcome:
        """The simulator gave up during this tick's step (a standard success before counts)."""
        self.ticks += 1
        return self._outcome(strict=False, error=error)

    def _outcome(self, *, strict: bool, error: str | None = None) -> Outcome:
        outcome = Outcome(
            self.seed,
            self.success_step is not None,
            self.ticks,
            self.total,
            error,
            success_step=self.success_step,
            strict_success=strict,
            strict_success_step=self.ticks if strict else None,
            max_reward=self.max_reward,
        )
        if self.recording is not None:
            self.recording.end(outcome)
        return outcome


# (task, its expert's variant, seed, limit): measured
_EXPERT_STEPS: dict[tuple[str, str, int, int], int | None] = {}


def expert_steps_to_success(task: SimTask | str, seeds: list[int], limit: int) -> list[int]:
    """The scripted expert's ticks to (standard) success from each of `seeds`, within `limit`.

    `task`: a task (its expert), or its name (its default expert; made here only when a seed
    is not measured yet). A seed the expert fails is left out. Measured once per task,
    expert, seed and limit in a process (a training callback evaluates again and again).
    """
    name = task if isinstance(task, str) else task.name
    variant = expert_variant(name) if isinstance(task, str) else task.expert_variant
    missing = [seed for seed in seeds if (name, variant, seed, limit) not in _EXPERT_STEPS]
    if missing:
        made = make_task(task) if isinstance(task, str) else task
        try:
            for seed in missing:
                made.reset(seed)
                tally, outcome = EpisodeTally(seed, limit), None
                while outcome is None:
                    outcome = tally.add(made.step(made.expert_action()))
                _EXPERT_STEPS[(name, variant, seed, limit)] = outcome.success_step
        finally:
            if made is not task:
                made.close()
    measured = (_EXPERT_STEPS[(name, variant, seed, limit)] for seed in seeds)
    return [steps for steps in measured if steps is not None]


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


def rate(successes: int, episodes: int) -> dict[str, Any]:
    """Successes of episodes: the count, the rate and its 95% Wilson interval."""
    low, high = wilson_interval(successes, episodes)
    return {"successes": successes, "rate": successes / episodes, "wilson95": [low, high]}


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def stages_reached(task_name: str, outcomes: list[Outcome]) -> dict[str, int] | None:
    """How many episodes got no further than each reward, for a task whose reward is a stage.

    ALOHA's rewards count stages (insertion: 1 both touched, 2 both lifted, 3 peg meets
    socket, 4 inserted), so the highest reward an episode reached says where it stopped
    (one that ended before its first reward, at 0). None for a task whose reward is shaped
    (MetaWorld's: see registry.staged_reward).
    """
    if not outcomes or not staged_reward(task_name):
        return None
    tops = [int(o.max_reward or 0) for o in outcomes]
    return {str(top): tops.count(top) for top in sorted(set(tops))}


def summarise(
    task_name: str,
    executor: str,
    outcomes: list[Outcome],
    seconds: float,
    *,
    limit: int,
    registered_steps: int,
    expert_steps: list[int] | None = None,
    expert: str | None = None,
) -> dict:
    """The plain-data summary of a set of rollouts run to `limit` ticks at most.

    The standard success rate with its 95% Wilson interval (`success_rate`,
    `success_rate_wilson95`); the strict one (`strict_success_rate`, `strict_success`); the
    standard rate at each of the task's registered limit and `limit` (`success_at_steps`,
    by limit); mean ticks to success, standard and strict; `expert_steps`, the scripted
    expert's ticks to success on some of the same seeds, their mean beside the policy's
    (`steps_to_success_vs_expert`: the ratio), and which expert (`expert`: its variant, None
    for the task's default, registry.expert_variant); for a staged reward, how many episodes
    stopped at each stage (`stages_reached`); mean return, jerk, rates, every outcome.
    """
    outcomes = sorted(outcomes, key=lambda o: o.seed)
    episodes = len(outcomes)
    standard = rate(sum(o.success for o in outcomes), episodes)
    strict = rate(sum(o.strict_success for o in outcomes), episodes)
    at_steps = {
        str(n): rate(sum(o.success_step is not None and o.success_step <= n for o in outcomes),
                      episodes)
        for n in sorted({min(registered_steps, limit), limit})
    }  # fmt: skip
    to_success = _mean([o.success_step for o in outcomes if o.success_step is not None])
    expert_mean = _mean(expert_steps or [])
    steps = sum(o.steps for o in outcomes)
    jerks = [o.boundary_jerk for o in outcomes if o.boundary_jerk is not None]
    return {
        "task": task_name,
        "executor": executor,
        "episodes": episodes,
        "successes": standard["successes"],
        "success_rate": standard["rate"],
        "success_rate_wilson95": standard["wilson95"],
        "strict_success_rate": strict["rate"],
        "strict_success": strict,
        "step_limit": limit,
        "registered_steps": registered_steps,
        "success_at_steps": at_steps,
        "mean_return": sum(o.total_return for o in outcomes) / episodes,
        "stages_reached": stages_reached(task_name, outcomes),
        "mean_steps_to_success": to_success,
        "mean_steps_to_strict_success": _mean(
            [o.strict_success_step for o in outcomes if o.strict_success_step is not None]
        ),
        "expert": expert or expert_variant(task_name),
        "expert_steps_to_success": expert_steps,
        "expert_mean_steps_to_success": expert_mean,
        "steps_to_success_vs_expert": (
            to_success / expert_mean if to_success and expert_mean else None
        ),
        "mean_boundary_jerk": float(np.mean(jerks)) if jerks else None,
        "env_steps": steps,
        "seconds": seconds,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "outcomes": [asdict(o) for o in outcomes],
    }
