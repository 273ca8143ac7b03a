"""Closed-loop rollouts: a policy acts in a simulated task, one action per tick.

`evaluate(policy, task, episodes=50, seed=1000)` runs one episode per seed (seed, seed+1,
...: keep them disjoint from the demonstrations' seeds, which start at 0) through a chunk
executor of polymimic-serve, over any policy with openpi's client interface (a
`LocalPolicy` in process, or a `PolicyClient` to a server: the robot's path). An episode
succeeds when the task says so; one whose simulator gives up (unstable physics) is a
failure, never a crash. The summary holds the success rate with its 95% Wilson interval,
the mean return, the mean steps to success and every seed's outcome.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from polymimic_serve import make_executor
from polymimic_serve.executors import ChunkExecutor, ChunkPolicy
from polymimic_sim.tasks import SimTask

Z95 = 1.959963984540054  # the normal quantile of a two-sided 95% interval


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


def rollout(
    task: SimTask, executor: ChunkExecutor, seed: int, max_steps: int | None = None
) -> Outcome:
    """One episode of `executor` in `task` from `seed`."""
    observation = task.reset(seed)
    executor.reset()
    total, limit = 0.0, max_steps or task.max_steps
    for tick in range(limit):
        action = executor.act(observation)
        try:
            step = task.step(action)
        except ValueError:
            raise  # a malformed action is a bug to see, not an outcome
        except Exception as exc:  # the simulator gave up (e.g. unstable physics)
            return Outcome(seed, False, tick + 1, total, f"{type(exc).__name__}: {exc}")
        total += step.reward
        if step.success:
            return Outcome(seed, True, tick + 1, total)
        if step.done:
            return Outcome(seed, False, tick + 1, total)
        observation = step.observation
    return Outcome(seed, False, limit, total)


def summarise(task: SimTask, executor: str, outcomes: list[Outcome], seconds: float) -> dict:
    """The plain-data summary of a set of rollouts (see the module docstring)."""
    successes = sum(o.success for o in outcomes)
    low, high = wilson_interval(successes, len(outcomes))
    to_success = [o.steps for o in outcomes if o.success]
    steps = sum(o.steps for o in outcomes)
    return {
        "task": task.name,
        "executor": executor,
        "episodes": len(outcomes),
        "successes": successes,
        "success_rate": successes / len(outcomes),
        "success_rate_wilson95": [low, high],
        "mean_return": sum(o.total_return for o in outcomes) / len(outcomes),
        "mean_steps_to_success": sum(to_success) / len(to_success) if to_success else None,
        "env_steps_per_s": steps / seconds if seconds > 0 else None,
        "outcomes": [asdict(o) for o in outcomes],
    }


def evaluate(
    policy: ChunkPolicy,
    task: SimTask,
    *,
    episodes: int = 50,
    seed: int = 1000,
    executor: str = "chunk",
    executor_options: Mapping[str, Any] | None = None,
    max_steps: int | None = None,
    progress: bool = True,
) -> dict[str, Any]:
    """Closed-loop episodes from seeds seed..seed+episodes-1; the summary (see summarise)."""
    if episodes < 1:
        raise ValueError(f"episodes: a positive number, got {episodes}")
    runner = make_executor(executor, policy, **dict(executor_options or {}))
    start, outcomes = time.perf_counter(), []
    for index in tqdm(range(episodes), desc=f"rollouts {task.name}", disable=not progress):
        outcomes.append(rollout(task, runner, seed + index, max_steps))
    return summarise(task, executor, outcomes, time.perf_counter() - start)


def evaluate_checkpoint(
    checkpoint: str | Path,
    task_name: str,
    *,
    episodes: int = 50,
    seed: int = 1000,
    executor: str = "chunk",
    executor_options: Mapping[str, Any] | None = None,
    via_server: bool = False,
    out: str | Path | None = None,
    device: str = "cpu",
    progress: bool = True,
) -> dict[str, Any]:
    """Rollouts of a checkpoint or export in `task_name`; `out/summary.json` if `out`.

    The task renders the policy's cameras at its image size. With `via_server`, the policy
    is served on loopback and driven through `PolicyClient`: the robot's path, wire and all.
    """
    from polymimic_data.store import write_json_atomic
    from polymimic_serve import LocalPolicy, PolicyClient, PolicyServer, RunningServer, load_policy
    from polymimic_sim.tasks import make_task

    trained = load_policy(checkpoint, device=device)
    task = make_task(task_name, image_size=trained.image_size, cameras=trained.cameras)
    options = {"episodes": episodes, "seed": seed, "executor": executor,
               "executor_options": executor_options, "progress": progress}  # fmt: skip
    try:
        if via_server:
            with (
                RunningServer(PolicyServer(trained, port=0, seed=seed)) as running,
                PolicyClient(running.url) as client,
            ):
                summary = evaluate(client, task, **options)
        else:
            summary = evaluate(LocalPolicy(trained, seed=seed), task, **options)
    finally:
        task.close()
    summary |= {
        "checkpoint": str(Path(checkpoint).resolve()),
        "weights_step": trained.step,
        "via_server": via_server,
        "executor_options": dict(executor_options or {}),
    }
    if out is not None:
        write_json_atomic(Path(out) / "summary.json", summary)
    return summary


def describe(summary: Mapping[str, Any]) -> str:
    """One line: successes, rate and its 95% interval."""
    low, high = summary["success_rate_wilson95"]
    return (
        f"{summary['task']}: {summary['successes']}/{summary['episodes']} succeeded "
        f"({summary['success_rate']:.0%}, 95% interval {low:.0%}-{high:.0%})"
    )
