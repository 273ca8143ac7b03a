from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from polymimic_data.embodiments import get_embodiment
from polymimic_eval import read_video_frames, video_rate

SMALL_SYNTHETIC = ["data.synthetic.episodes=6", "data.synthetic.frames=30"]
RERUN = ["callbacks.rerun.every_n_validations=1", "callbacks.rerun.max_frames=5"]


@pytest.fixture(scope="module")
def trained(
    tmp_path_factory: pytest.TempPathFactory, train_app
) -> tuple[Path, Path, subprocess.CompletedProcess[str]]:
    tmp = tmp_path_factory.mktemp("train")
    run_dir = tmp / "run"
    result = train_app(tmp, run_dir, *SMALL_SYNTHETIC, *RERUN)
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp, run_dir, result


def test_run_dir_holds_everything_a_run_records(trained) -> None:
    _, run_dir, result = trained
    assert f"run dir: {run_dir.resolve()}" in result.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4
    assert summary["val_action_error"] > 0 and summary["baseline_action_error"] > 0
    assert (run_dir / "config.yaml").read_text().count("max_steps: 4") == 1
    assert (run_dir / "git_commit.txt").read_text().strip()
    assert "eva_bimanual" in json.loads((run_dir / "norm_stats.json").read_text())
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert any(r.get("val_action_error") for r in rows)
    validated = next(r for r in rows if r.get("val_action_error"))
    for metric in (
        "left_position_error",
        "left_position_final_error",
        "left_rotation_angle_deg",
        "right_gripper_error",
        "right_rotation_final_mse",
        "step_error/000",
        "step_error/015",
    ):
        assert float(validated[f"val/eva_bimanual/{metric}"]) >= 0, metric
    logged = [r for r in rows if r.get("grad_norm/median")]  # diagnosis, logged every step here
    assert logged and all(float(r["grad_norm/median"]) > 0 for r in logged)
    assert {r["grad_norm/spikes"] for r in logged} <= {"0.0", "1.0", "2.0", "3.0"}
    plots = sorted(p.name for p in (run_dir / "plots" / "step_error").iterdir())
    assert plots == ["step000002.png", "step000004.png"]
    resolves = [
        line for line in (run_dir / "app.log").read_text().splitlines() if "resolved " in line
    ]
    assert len(resolves) == 1, resolves  # one resolve per dataset per run


def test_tensorboard_holds_the_clips_and_the_horizon_plot(trained) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir, _ = trained
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    tags = events.Tags()["images"]
    assert {"videos/eva_bimanual/val", "videos/eva_bimanual/train", "val/step_error"} <= set(tags)
    clip = events.Images("videos/eva_bimanual/val")[-1]
    assert clip.step == 4 and clip.encoded_image_string[:6] == b"GIF89a"
    assert "grad_norm/median" in events.Tags()["scalars"]


def test_last_checkpoint_links_the_newest_and_carries_the_normalizer(trained) -> None:
    _, run_dir, _ = trained
    last = run_dir / "checkpoints" / "last.ckpt"
    assert last.is_symlink() and last.resolve().name == "step000004.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)["state_dict"]
    assert "normalizer.per_embodiment.eva_bimanual.action_center" in state


def test_overlay_videos_of_a_validation_and_a_training_episode_play_at_their_fps(
    trained,
) -> None:
    _, run_dir, _ = trained
    videos = sorted(p.relative_to(run_dir / "videos") for p in (run_dir / "videos").rglob("*"))
    assert [str(v) for v in videos] == [
        "eva_bimanual",
        "eva_bimanual/step000002-train.mp4",
        "eva_bimanual/step000002-val.mp4",
        "eva_bimanual/step000004-train.mp4",
        "eva_bimanual/step000004-val.mp4",
    ]
    for video in ("step000004-val.mp4", "step000004-train.mp4"):
        path = run_dir / "videos" / "eva_bimanual" / video
        frames = read_video_frames(path)
        assert len(frames) == 6 and frames[0].shape == (128, 160, 3)
        assert video_rate(path) == get_embodiment("eva_bimanual").fps  # the episode's own
    val = read_video_frames(run_dir / "videos" / "eva_bimanual" / "step000004-val.mp4")
    train = read_video_frames(run_dir / "videos" / "eva_bimanual" / "step000004-train.mp4")
    assert np.abs(val[0].astype(int) - train[0].astype(int)).mean() > 1  # two episodes


def test_rerun_files_hold_each_validations_predictions_against_the_truth(trained) -> None:
    """callbacks.rerun: one file per validation, read back through rerun's dataframe query."""
    from rerun.chunk import RrdReader

    _, run_dir, _ = trained
    folder = run_dir / "rerun" / "eva_bimanual"
    assert sorted(p.name for p in folder.iterdir()) == ["step000002-val.rrd", "step000004-val.rrd"]
    lines: dict[int, dict[str, np.ndarray]] = {}
    ids = set()
    for step in (2, 4):
        reader = RrdReader(folder / f"step{step:06d}-val.rrd")
        ids |= {entry.recording_id for entry in reader.recordings()}
        store = reader.store().stream().collect()
        root = "/eva_bimanual/val"
        images = store.reader(index="frame", contents=f"{root}/image").to_pandas()
        assert images["frame"].tolist() == [0, 1, 2, 3, 4]
        for series in ("true", f"step{step:06d}"):
            entity = f"{root}/{series}/left_position/x"
            table = store.reader(index="frame", contents=entity).to_pandas()
            assert table["frame"].tolist() == [0, 1, 2, 3, 4]
            strips = [np.asarray(list(row[0])) for row in table[f"{entity}:LineStrips2D:strips"]]
            # each frame's chunk, as the future from that frame on: 16 steps, a frame apart
            for frame, strip in enumerate(strips):
                assert strip.shape == (16, 2)
                np.testing.assert_array_equal(strip[:, 0], frame + np.arange(16))
            lines.setdefault(step, {})[series] = np.stack([s[:, 1] for s in strips])
        error = store.reader(index="step", contents=f"{root}/mean_abs_error").to_pandas()
        assert error["step"].tolist() == [step]
        assert float(error[f"{root}/mean_abs_error:Scalars:scalars"].iloc[0][0]) > 0
    assert len(ids) == 1  # one recording when the files are opened together
    # the same pinned episode's truth each time; the predictions move as the policy trains
    np.testing.assert_array_equal(lines[2]["true"], lines[4]["true"])
    assert not np.array_equal(lines[2]["step000002"], lines[4]["step000004"])
    assert not np.array_equal(lines[4]["true"], lines[4]["step000004"])


def test_resume_continues_from_the_checkpoint(trained, train_app) -> None:
    tmp, run_dir, _ = trained
    resumed = tmp / "resumed"
    result = train_app(
        tmp,
        resumed,
        *SMALL_SYNTHETIC,
        f"resume={run_dir / 'checkpoints' / 'last.ckpt'}",
        "trainer.max_steps=6",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert json.loads((resumed / "summary.json").read_text())["steps"] == 6
    assert not (resumed / "checkpoints" / "step000002.ckpt").exists()


def test_bad_data_root_fails_before_training_with_the_path(tmp_path: Path, train_app) -> None:
    result = train_app(
        tmp_path, tmp_path / "run", "data=episodes", f"data.roots=[{tmp_path / 'missing'}]"
    )
    assert result.returncode != 0
    assert str(tmp_path / "missing") in result.stderr


def test_a_requeued_run_resumes_from_its_own_last_checkpoint(trained, train_app) -> None:
    tmp, run_dir, _ = trained
    again = tmp / "requeued"
    shutil.copytree(run_dir, again, symlinks=True)
    # resume: auto. 5 is off the validation interval (2): the summary must still be of step 5.
    result = train_app(tmp, again, *SMALL_SYNTHETIC, "trainer.max_steps=5")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resuming from" in result.stderr + result.stdout
    summary = json.loads((again / "summary.json").read_text())
    assert summary["steps"] == 5
    with (again / "metrics" / "metrics.csv").open() as f:
        validated = [r for r in csv.DictReader(f) if r.get("val_action_error")]
    assert validated[-1]["step"] == "5"
    assert float(validated[-1]["val_action_error"]) == pytest.approx(summary["val_action_error"])


_PREDICT = """
import json, sys
import numpy as np, simplejpeg, torch
from polymimic_train import load_policy
from polymimic_data import EpisodeDataset, EpisodeReader, collate_samples, resolve_episodes

checkpoint, episodes = sys.argv[1], sys.argv[2]
policy = load_policy(checkpoint)
assert "lightning" not in sys.modules and "hydra" not in sys.modules
dataset = EpisodeDataset(
    resolve_episodes(episodes), embodiment=policy.embodiment, cameras=policy.cameras,
    image_size=policy.image_size, history=policy.history, horizon=policy.horizon,
    layout=policy.layout.name,
)
sample = dataset[7]
raw = EpisodeReader(dataset.episodes[0].path).read_jpeg("front_1", sample["frame"])
observation = {
    "images": {"front_1": simplejpeg.decode_jpeg(raw, colorspace="RGB")},  # full resolution
    "state": sample["state"].numpy(),
    "prompt": sample["prompt"],
}
generator = torch.Generator().manual_seed(3)
noise = torch.randn(1, policy.horizon, policy.layout.dim, generator=generator)
ours = policy.predict(observation, noise=noise)
batch = policy.normalizer.normalize_batch(collate_samples([sample]))
validation = policy.normalizer.denormalize_actions(
    policy.embodiment, policy.policy.sample_actions(batch, noise=noise)
)[0].numpy()
try:
    policy.predict(observation | {"images": {"left_wrist": observation["images"]["front_1"]}})
except ValueError as error:
    wrong_camera = str(error)
print(json.dumps({
    "ours": ours["actions"].tolist(), "validation": validation.tolist(),
    "channels": ours["channels"], "dtype": str(ours["actions"].dtype), "wrong_camera": wrong_camera,
}))
"""


def _predict_elsewhere(path: Path, episodes: Path) -> dict:
    result = subprocess.run(
        [sys.executable, "-c", _PREDICT, str(path), str(episodes)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_a_checkpoint_alone_drives_the_policy_on_a_raw_frame(trained, tmp_path: Path) -> None:
    tmp, run_dir, _ = trained
    last = (run_dir / "checkpoints" / "last.ckpt").resolve()
    record = torch.load(last, map_location="cpu", weights_only=True)["polymimic"]
    assert record["layouts"]["eva_bimanual"]["name"] == "eva_cartesian_quat"
    alone = tmp_path / "elsewhere" / "policy.ckpt"  # no run dir, no config, no data beside it
    alone.parent.mkdir()
    shutil.copy(last, alone)
    (episodes,) = (tmp / "data" / "synthetic").glob("eva_bimanual-*")
    out = _predict_elsewhere(alone, episodes)
    ours, validation = np.array(out["ours"]), np.array(out["validation"])
    assert ours.shape == (16, 16) and out["dtype"] == "float32"
    assert out["channels"][:4] == [
        "left_position.0",
        "left_position.1",
        "left_position.2",
        "left_rotation.0",
    ]
    # Only the resize differs: a full-resolution frame resized here, DCT-scaled in the loader.
    np.testing.assert_allclose(ours, validation, atol=0.02)
    assert "cameras ['left_wrist'], this policy needs ['front_1']" in out["wrong_camera"]


def test_an_export_is_safetensors_and_json_and_predicts_as_the_checkpoint(
    trained, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    from polymimic_train.export import main as export_main

    tmp, run_dir, _ = trained
    last = run_dir / "checkpoints" / "last.ckpt"
    export_main([f"checkpoint={last}"])
    out = run_dir / "export" / "step000004"  # the default: beside the run's checkpoints
    assert f"to {out}" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    config = json.loads((out / "config.json").read_text())
    assert config["step"] == 4 and config["record"]["policy"]["name"] == "hpt"
    assert config["record"]["policy"]["config"]["d_model"] == 32  # the run's model.d_model
    tensors = load_file(out / "model.safetensors")
    assert all(k.startswith(("policy.", "normalizer.")) for k in tensors)
    state = torch.load(last, map_location="cpu", weights_only=True)["state_dict"]
    for key, value in tensors.items():
        torch.testing.assert_close(value, state[key], rtol=0, atol=0)
    with pytest.raises(SystemExit):  # never over a folder the user has, unless asked
        export_main([f"checkpoint={last}", f"out={out}"])
    assert "exists and is not empty" in capsys.readouterr().err
    export_main([f"checkpoint={last}", f"out={out}", "overwrite=true"])
    moved = tmp_path / "deploy"  # only the export, elsewhere
    shutil.copytree(out, moved)
    (episodes,) = (tmp / "data" / "synthetic").glob("eva_bimanual-*")
    from_export = _predict_elsewhere(moved, episodes)
    alone = tmp_path / "policy.ckpt"
    shutil.copy(last.resolve(), alone)
    assert from_export["ours"] == _predict_elsewhere(alone, episodes)["ours"]


def test_evaluate_reproduces_the_runs_final_validation(trained) -> None:
    tmp, run_dir, _ = trained
    env = os.environ | {
        "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
        "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
    }
    checkpoint = run_dir / "checkpoints" / "last.ckpt"
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train.evaluate", f"checkpoint={checkpoint}"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (summary_path,) = (run_dir / "eval").glob("*/summary.json")
    ours = json.loads(summary_path.read_text())
    theirs = json.loads((run_dir / "summary.json").read_text())
    assert ours["val_action_error"] == pytest.approx(theirs["val_action_error"], rel=1e-6)
    assert ours["baseline_action_error"] == pytest.approx(theirs["baseline_action_error"], rel=1e-6)
    out = summary_path.parent
    assert ours["steps"] == 4  # named by the weights' step
    assert sorted(p.name for p in (out / "videos" / "eva_bimanual").iterdir()) == [
        "step000004-train.mp4",
        "step000004-val.mp4",
    ]
    assert [p.name for p in (out / "plots" / "step_error").iterdir()] == ["step000004.png"]
    missing = subprocess.run(
        [sys.executable, "-m", "polymimic_train.evaluate", "checkpoint=/no/such.ckpt"],
        capture_output=True,
        text=True,
    )
    assert missing.returncode == 2 and "checkpoint=/no/such.ckpt: no such file" in missing.stderr
