"""A LeRobot dataset, imported, trains through `train data=lerobot`: the embodiment and its
cameras come from the episodes, the loss falls, validation reports error per joint group,
the overlay video holds the frames, and `evaluate` and `load_policy` replay it."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polymimic_data.lerobot import import_lerobot
from polymimic_data.testing import write_lerobot_dataset
from polymimic_eval import read_video_frames

STEPS = 30
SETTINGS = [
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=30",
    "trainer.log_every_n_steps=5",
    "data.batch_size=8",
    "model.d_model=64",
]


@pytest.fixture(scope="module")
def lerobot_run(tmp_path_factory: pytest.TempPathFactory, train_app):
    tmp = tmp_path_factory.mktemp("lerobot")
    write_lerobot_dataset(tmp / "src", episodes=6, frames=40, robot_type="koch")
    import_lerobot(tmp / "src", tmp / "episodes", progress=False)
    run_dir = tmp / "run"
    result = train_app(tmp, run_dir, "data=lerobot", f"data.roots=[{tmp / 'episodes'}]", *SETTINGS)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp, run_dir


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def test_the_imported_embodiment_trains_and_its_loss_falls(lerobot_run) -> None:
    _, run_dir = lerobot_run
    losses = [float(r["train/loss"]) for r in _rows(run_dir) if r.get("train/loss")]
    assert len(losses) >= 4
    assert np.mean(losses[-2:]) < 0.8 * np.mean(losses[:2]), losses  # seeded: 1.10 -> 0.75
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["val_action_error"] < summary["baseline_action_error"]
    config = (run_dir / "config.yaml").read_text()
    assert "embodiment: lerobot/koch" in config  # resolved from the episodes, as recorded
    assert "embodiment: auto" not in config and "cameras: auto" not in config
    # `auto` named from the same one resolve the data module trains on (it used to take three)
    resolves = [
        line for line in (run_dir / "app.log").read_text().splitlines() if "resolved " in line
    ]
    assert len(resolves) == 1, resolves


def test_validation_reports_error_per_joint_group_and_videos_show_the_frames(lerobot_run) -> None:
    _, run_dir = lerobot_run
    validated = next(r for r in _rows(run_dir) if r.get("val_action_error"))
    for group in ("left_joints", "left_gripper", "right_joints", "right_gripper"):
        assert float(validated[f"val/lerobot/koch/{group}_error"]) > 0
    frames = read_video_frames(run_dir / "videos" / "lerobot" / "koch" / f"step{STEPS:06d}-val.mp4")
    assert len(frames) == 6 and frames[0].shape == (48, 64, 3)  # the episode at its own size


def test_evaluate_and_load_policy_replay_the_run(lerobot_run, train_environment) -> None:
    tmp, run_dir = lerobot_run
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train.evaluate", f"checkpoint={checkpoint}"],
        env=train_environment(tmp),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (evaluated,) = (run_dir / "eval").glob("*/summary.json")
    theirs = json.loads((run_dir / "summary.json").read_text())
    ours = json.loads(evaluated.read_text())
    assert ours["val_action_error"] == pytest.approx(theirs["val_action_error"], rel=1e-6)
    # A fresh process with the checkpoint alone: nothing registers lerobot/koch but it.
    script = (
        "import json, numpy as np\n"
        "from polymimic_train.trained_policy import load_policy\n"
        f"policy = load_policy({str(checkpoint)!r})\n"
        "frame = np.zeros((96, 128, 3), np.uint8)\n"
        "out = policy.predict({'images': {'top': frame, 'wrist': frame},\n"
        "    'state': np.zeros((2, 14), np.float32), 'prompt': 'pick up the cube'})\n"
        "print(json.dumps({'shape': list(out['actions'].shape), 'channels': out['channels']}))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["shape"] == [16, 14]
    assert out["channels"][:2] == ["left_joints.0", "left_joints.1"]
