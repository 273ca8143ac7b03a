"""Rollouts in worker processes, the policy batched across them; videos of the first episodes."""

from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest

from polymimic_serve import load_policy
from polymimic_sim import RolloutSettings, UnknownTaskError
from polymimic_sim.rollouts.closed_loop import evaluate_checkpoint
from polymimic_sim.rollouts.episodes import FAILURE_COLOUR
from polymimic_sim.rollouts.parallel import evaluate_parallel
from polymimic_sim.rollouts.task_workers import TaskWorkers

TASK, SIZE = "metaworld/reach-v3", (48, 64)
OPTIONS = {"n_action_steps": 4}


def _returns(summary: dict) -> dict[int, float]:
    return {o["seed"]: o["total_return"] for o in summary["outcomes"]}


def test_workers_batch_the_policy_and_an_episode_depends_on_its_seed_alone(
    untrained_sawyer: Path,
) -> None:
    trained = load_policy(untrained_sawyer)
    run = {"episodes": 3, "seed": 1000, "executor_options": OPTIONS, "max_steps": 10,
           "progress": False}  # fmt: skip
    two = evaluate_parallel(trained, TASK, RolloutSettings(workers=2, **run))
    again = evaluate_parallel(trained, TASK, RolloutSettings(workers=2, **run))
    one = evaluate_parallel(trained, TASK, RolloutSettings(workers=1, **run))
    assert two["workers"] == 2 and [o["seed"] for o in two["outcomes"]] == [1000, 1001, 1002]
    assert all(o["steps"] == 10 for o in two["outcomes"])
    assert two["mean_batch"] > 1.0 and one["mean_batch"] == 1.0
    assert _returns(two) == _returns(again)  # the same seeds, the same outcomes
    # other slots and other batch-mates: the same episodes, up to float rounding
    assert _returns(one) == pytest.approx(_returns(two), rel=1e-4)
    # how chunks join is measured in lockstep as in one simulator (it was missing: None)
    jerks = [o["boundary_jerk"] for o in two["outcomes"]]
    assert None not in jerks and two["mean_boundary_jerk"] is not None
    assert jerks == pytest.approx([o["boundary_jerk"] for o in one["outcomes"]], rel=1e-3)


def test_workers_drive_the_policy_through_its_server(untrained_sawyer: Path) -> None:
    run = {"episodes": 2, "max_steps": 6, "executor_options": OPTIONS, "progress": False}
    settings = RolloutSettings(workers=2, via_server=True, **run)
    summary = evaluate_parallel(load_policy(untrained_sawyer), TASK, settings)
    assert [o["steps"] for o in summary["outcomes"]] == [6, 6] and summary["workers"] == 2


def test_a_worker_refuses_a_bad_action_and_a_bad_task_is_named() -> None:
    with TaskWorkers(TASK, 1, image_size=SIZE, cameras=["corner2"]) as tasks:
        tasks.reset(0, 5)
        with pytest.raises(ValueError, match=r"an action is \(4,\) finite"):
            tasks.step({0: np.zeros(3, np.float32)})
        assert tasks.reset(0, 6)["state"].shape == (4,)  # the worker is still there
    with pytest.raises(UnknownTaskError, match="MetaWorld has no such task"):
        TaskWorkers("metaworld/fly-v3", 1, image_size=SIZE, cameras=["corner2"])


def test_the_first_episodes_are_filmed_and_marked(untrained_sawyer: Path, tmp_path: Path) -> None:
    run = {"episodes": 3, "max_steps": 12, "executor_options": OPTIONS, "progress": False}
    settings = RolloutSettings(workers=2, videos=2, **run)
    summary = evaluate_checkpoint(untrained_sawyer, TASK, settings, out=tmp_path)
    names = sorted(Path(v).name for v in summary["videos"])
    assert names == ["seed001000-failure.mp4", "seed001001-failure.mp4"]  # an untrained policy
    steps = {o["seed"]: o["steps"] for o in summary["outcomes"]}
    with av.open(str(tmp_path / "videos" / names[0])) as container:
        frames = [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]
    assert len(frames) == steps[1000] and frames[0].shape == (*SIZE, 3)
    corner = frames[0][:2, :2].reshape(-1, 3).mean(axis=0)  # the frame: red for a failure
    assert np.abs(corner - FAILURE_COLOUR).max() < 40, corner
