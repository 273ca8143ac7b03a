"""A run that rolls its policy out in simulation as it trains (callbacks.sim_eval)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

import polymimic_train.configs
from polymimic_sim import record

TASK = "metaworld/button-press-v3"
# two steps of a tiny model on a few samples, validated once: a run end to end, fast
TINY_RUN = [
    "data.num_workers=0", "data.batch_size=4", "data.norm.num_samples=20",
    "data.video_episodes=0", "trainer.max_steps=2", "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false", "model.d_model=32", "model.num_heads=2",
]  # fmt: skip
CONSTANT_GRIPPER = r"ignore:.*are \(nearly\) constant:UserWarning"  # a button needs no gripper


@pytest.mark.filterwarnings(CONSTANT_GRIPPER)
def test_a_run_logs_its_success_rate_after_each_due_validation(tmp_path: Path, compose_train):
    demos = tmp_path / "demos"
    record(TASK, demos, episodes=2, image_size=(48, 64), progress=False)
    cfg = compose_train(
        tmp_path,
        "name=sim_eval",
        "data=sim_metaworld",
        f"data.roots=[{demos}]",
        "data.image_size=[48,64]",
        "data.num_workers=0",
        "data.batch_size=4",
        "data.norm.num_samples=20",
        "trainer.max_steps=6",
        "trainer.val_check_interval=2",
        "trainer.enable_progress_bar=false",
        "callbacks.trajectory_video.max_frames=4",
        "callbacks.sim_eval.every_n_validations=2",
        f"callbacks.sim_eval.task={TASK}",
        "callbacks.sim_eval.episodes=2",
        "callbacks.sim_eval.max_steps=8",
        "model.d_model=32",
        "model.num_heads=2",
    )
    summary = polymimic_train.run(cfg)
    assert summary["steps"] == 6
    run_dir = Path(cfg.paths.run_dir)
    # validations at steps 2, 4 and 6: the second is due (every 2nd)
    written = sorted(p.name for p in (run_dir / "sim" / TASK).iterdir())
    assert written == ["step000004.json"]
    rollouts = json.loads((run_dir / "sim" / TASK / "step000004.json").read_text())
    assert [o["seed"] for o in rollouts["outcomes"]] == [1000, 1001]
    assert all(o["steps"] == 8 for o in rollouts["outcomes"]) and rollouts["weights_step"] == 4
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if r.get(f"sim/{TASK}/success_rate")]
    assert [(r["step"], float(r[f"sim/{TASK}/success_rate"])) for r in rows] == [("4", 0.0)]


def test_a_due_sim_eval_without_a_task_is_refused_before_training() -> None:
    from polymimic_train.callbacks import SimEval

    with pytest.raises(ValueError, match=r"callbacks.sim_eval.task: which simulated task"):
        SimEval(every_n_validations=1)


@pytest.mark.filterwarnings(CONSTANT_GRIPPER)  # one short episode: some channels stay put
@pytest.mark.parametrize("robot", ["aloha_ee", "aloha"])
def test_a_robot_cotrained_with_hands_trains_and_acts_as_the_robot(
    tmp_path: Path, compose_train, robot: str
):
    """data=sim_cotrain_transfer_cube: both embodiments train; the robot's acts in its task.
    The robot is driven by poses as the hands are (aloha_ee), or by joints (aloha: the robot
    dataset filtered to its task, its own head, the trunk and image stem shared)."""
    from polymimic_sim import RolloutSettings, evaluate_checkpoint

    task = f"{robot}/transfer_cube"
    roots = []
    for family in (robot, "hands"):
        report = record(f"{family}/transfer_cube", tmp_path / family, episodes=2,
                        image_size=(48, 64), progress=False)  # fmt: skip
        assert report.success_rate == 1.0
        roots.append(str(tmp_path / family))
    cfg = compose_train(
        tmp_path,
        "name=h2r",
        "data=sim_cotrain_transfer_cube",
        f"data.roots=[{','.join(roots)}]",
        f"data.sim_task={task}",
        f"data.datasets.robot.filters.sim_task={task}",
        "data.image_size=[48,64]",
        "data.horizon=8",
        "data.datasets.hands.action_window=5",
        *TINY_RUN,
        "+model.shared_stems.top=image",
        "+model.shared_stems.front_1=image",
        "callbacks.rerun.every_n_validations=1",
        "callbacks.rerun.max_frames=3",
    )
    summary = polymimic_train.run(cfg)
    assert summary["steps"] == 2
    # each embodiment's predictions in rerun, under its name (sim/<family>: a folder each)
    recordings = Path(cfg.paths.run_dir) / "rerun" / "sim"
    assert sorted(str(p.relative_to(recordings)) for p in recordings.rglob("*.rrd")) == [
        f"{robot}/step000002-val.rrd",
        "hands/step000002-val.rrd",
    ]
    checkpoint = Path(cfg.paths.run_dir) / "checkpoints" / "last.ckpt"
    settings = RolloutSettings(episodes=1, max_steps=6, workers=1, videos=0, progress=False)
    rollouts = evaluate_checkpoint(checkpoint, task, settings)
    (outcome,) = rollouts["outcomes"]
    assert outcome["steps"] == 6 and outcome["error"] is None, outcome  # no simulator gave up


def test_a_policy_trained_on_hands_alone_acts_on_the_robot_in_the_hands_layout(
    tmp_path: Path, compose_train
):
    """h2r's N = 0 control end to end: trained on hands/transfer_cube only, the policy drives
    aloha_as_hands/transfer_cube (the masked robot, observed and commanded as hands)."""
    from polymimic_sim import RolloutSettings, evaluate_checkpoint

    report = record("hands/transfer_cube", tmp_path / "hands", episodes=2, image_size=(48, 64),
                    progress=False)  # fmt: skip
    assert report.success_rate == 1.0
    cfg = compose_train(
        tmp_path,
        "name=hands_alone",
        "data=sim_hands_transfer_cube",
        f"data.roots=[{tmp_path / 'hands'}]",
        "data.image_size=[48,64]",
        "data.horizon=8",
        *TINY_RUN,
    )
    assert polymimic_train.run(cfg)["steps"] == 2
    checkpoint = Path(cfg.paths.run_dir) / "checkpoints" / "last.ckpt"
    settings = RolloutSettings(episodes=1, max_steps=6, workers=1, videos=0, progress=False)
    rollouts = evaluate_checkpoint(checkpoint, "aloha_as_hands/transfer_cube", settings)
    (outcome,) = rollouts["outcomes"]
    assert outcome["steps"] == 6 and outcome["error"] is None, outcome
    assert rollouts["task"] == "aloha_as_hands/transfer_cube"
