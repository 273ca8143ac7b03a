"""`import-lerobot` on LeRobot v3 datasets written as lerobot writes them (testing.lerobot_format):
video (AV1 and h264, episodes sharing one mp4) and image modes, lerobot 0.4 and 0.6 and
datasets converted from v2.1. State and action come out bit-exact, frames within the
codecs' tolerance and at the right index; an interrupted import resumes; bad input is
refused, naming the file and key, before anything is written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import simplejpeg

from polymimic_data.cli import main as cli
from polymimic_data.episodes.resolver import resolve_episodes
from polymimic_data.lerobot.importer import import_lerobot
from polymimic_data.lerobot.source import LeRobotFormatError, LeRobotSource
from polymimic_data.samples.dataset import EpisodeDataset
from polymimic_data.samples.normalization import compute_norm_stats
from polymimic_data.store.episode_store import INCOMPLETE_PREFIX, EpisodeReader
from polymimic_data.testing import write_lerobot_dataset

LENGTHS = [20, 26]


def _frames(reader: EpisodeReader, camera: str) -> np.ndarray:
    return np.stack(
        [
            simplejpeg.decode_jpeg(reader.read_jpeg(camera, f), colorspace="RGB")
            for f in range(reader.total_frames)
        ]
    ).astype(np.int16)


def _check(dest: Path, truths, *, tolerance: float, embodiment: str = "lerobot/aloha") -> None:
    """Every episode against its truth: bit-exact vectors; each frame closest to its own."""
    for truth in truths:
        path = next(dest.glob(f"*-ep{truth.episode_index:06d}.zarr"))
        reader = EpisodeReader(path)
        assert reader.embodiment == embodiment
        assert reader.total_frames == truth.length
        for key, values in (("observation.state", truth.state), ("action", truth.action)):
            ours = reader.read_numeric(key)
            assert ours.dtype == np.float32
            assert ours.tobytes() == values.astype(np.float32).tobytes(), key
        for key, frames in truth.frames.items():
            camera = key.removeprefix("observation.images.")
            ours, true = _frames(reader, camera), frames.astype(np.int16)
            error = np.abs(ours - true).mean(axis=(1, 2, 3))
            assert error.max() < tolerance, (camera, error.max())
            # off by one frame would be closer to a neighbour: each frame is nearest its own
            to_next = np.abs(ours[:-1] - true[1:]).mean(axis=(1, 2, 3))
            assert (error[:-1] < to_next).all(), camera
        spans = [(a["text"], a["start_idx"], a["end_idx"]) for a in reader.read_annotations()]
        assert spans == [(truth.tasks[0], 0, truth.length)]
        source = reader.attrs["source"]
        assert source["format"] == "lerobot" and source["codebase_version"] == "v3.0"
        assert source["robot_type"] == "aloha" and source["episode_index"] == truth.episode_index


@pytest.mark.parametrize(
    ("vcodec", "flavor"),
    [("libsvtav1", "lerobot-0.4"), ("h264", "lerobot-0.6"), ("libsvtav1", "converted-v2.1")],
)
def test_video_episodes_sharing_one_mp4_come_out_exact_and_in_step(
    tmp_path: Path, vcodec: str, flavor: str
) -> None:
    src = tmp_path / "src"
    truths = write_lerobot_dataset(
        src,
        episodes=2,
        frames=LENGTHS,
        vcodec=vcodec,
        flavor=flavor,  # type: ignore[arg-type]
    )
    assert len(list((src / "videos" / "observation.images.top").rglob("*.mp4"))) == 1
    report = import_lerobot(src, tmp_path / "dest", progress=False)
    assert len(report.written) == 2 and report.frames == sum(LENGTHS)
    _check(tmp_path / "dest", truths, tolerance=12.0)


@pytest.mark.parametrize("image_format", ["png", "jpeg"])
def test_image_mode_frames_are_stored_as_jpeg(tmp_path: Path, image_format: str) -> None:
    src = tmp_path / "src"
    truths = write_lerobot_dataset(
        src,
        episodes=2,
        frames=LENGTHS,
        video=False,
        image_format=image_format,  # type: ignore[arg-type]
    )
    import_lerobot(src, tmp_path / "dest", progress=False)
    _check(tmp_path / "dest", truths, tolerance=6.0)


def test_converted_episodes_declare_a_joint_embodiment_the_loader_serves(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_lerobot_dataset(src, episodes=2, frames=LENGTHS)
    import_lerobot(src, tmp_path / "dest", progress=False)
    episodes = resolve_episodes(tmp_path / "dest")
    dataset = EpisodeDataset(
        episodes, embodiment="lerobot/aloha", cameras=("top", "wrist"), history=2, horizon=8
    )
    groups = [(g.name, g.kind, g.width) for g in dataset.layout.groups]
    assert groups == [
        ("left_joints", "joint", 6),
        ("left_gripper", "gripper", 1),
        ("right_joints", "joint", 6),
        ("right_gripper", "gripper", 1),
    ]
    sample = dataset[3]
    assert np.asarray(sample["state"]).shape == (2, 14)
    assert np.asarray(sample["actions"]).shape == (8, 14)
    assert sample["images.top"].shape == (3, 48, 64)
    assert sample["prompt"] in ("pick up the cube", "put it in the bowl")
    stats = compute_norm_stats(dataset, num_samples=20, seed=0)
    assert np.all(np.asarray(stats.actions.std) > 0)


def test_an_interrupted_import_resumes_and_leaves_nothing_half_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    truths = write_lerobot_dataset(src, episodes=3, frames=[12, 14, 16])
    real = LeRobotSource.video_frames

    def dies_in_episode_1(self, episode, camera):
        for i, frame in enumerate(real(self, episode, camera)):
            if episode.index == 1 and i == 5:
                raise KeyboardInterrupt  # the user's Ctrl-C, mid-episode
            yield frame

    monkeypatch.setattr(LeRobotSource, "video_frames", dies_in_episode_1)
    with pytest.raises(KeyboardInterrupt):
        import_lerobot(src, dest, progress=False)
    assert [p.name.split("-ep")[1] for p in sorted(dest.iterdir())] == ["000000.zarr"]
    first = next(dest.iterdir())
    stamp = os.stat(first / "zarr.json").st_mtime_ns
    monkeypatch.undo()
    report = import_lerobot(src, dest, progress=False)
    assert [p.name for p in report.skipped] == [first.name]
    assert [p.name.split("-ep")[1] for p in report.written] == ["000001.zarr", "000002.zarr"]
    assert os.stat(first / "zarr.json").st_mtime_ns == stamp  # untouched
    assert not [p for p in dest.iterdir() if p.name.startswith(INCOMPLETE_PREFIX)]
    _check(dest, truths, tolerance=12.0)
    again = import_lerobot(src, dest, progress=False)  # idempotent
    assert len(again.skipped) == 3 and not again.written


def _edit_info(src: Path, edit) -> None:
    path = src / "meta" / "info.json"
    info = json.loads(path.read_text())
    edit(info)
    path.write_text(json.dumps(info))


def test_unsupported_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    src = tmp_path / "src"
    write_lerobot_dataset(src, episodes=2, frames=LENGTHS)
    dest = tmp_path / "dest"

    def refused(match: str) -> None:
        with pytest.raises(LeRobotFormatError, match=match):
            import_lerobot(src, dest, progress=False)
        assert not dest.exists() or not any(dest.iterdir())

    _edit_info(src, lambda info: info.update(codebase_version="v2.1"))
    refused(r"info\.json: codebase_version 'v2\.1'.*convert_dataset_v21_to_v30")
    _edit_info(src, lambda info: info.update(codebase_version="v3.0"))

    def narrower(info) -> None:
        for key in ("observation.state", "action"):
            info["features"][key]["shape"] = [13]

    _edit_info(src, narrower)
    refused(r"file-000\.parquet: column 'action' holds 14 values.*declares shape \[13\]")

    def wider(info) -> None:
        for key in ("observation.state", "action"):
            info["features"][key]["shape"] = [14]

    _edit_info(src, wider)
    video = next((src / "videos" / "observation.images.wrist").rglob("*.mp4"))
    video.rename(video.with_suffix(".bak"))
    refused(r"episode 0: .*observation\.images\.wrist.*file-000\.mp4 is missing")


def test_a_v2_dataset_is_named_as_such(tmp_path: Path) -> None:
    (tmp_path / "meta").mkdir(parents=True)
    (tmp_path / "meta" / "episodes.jsonl").write_text("{}\n")
    with pytest.raises(LeRobotFormatError, match=r"LeRobot v2 dataset.*convert"):
        LeRobotSource(tmp_path)


def test_the_command_takes_episodes_and_cameras(tmp_path: Path, capsys) -> None:
    src, dest = tmp_path / "src", tmp_path / "dest"
    write_lerobot_dataset(src, episodes=3, frames=[10, 11, 12], robot_type="so100")
    code = cli(["import-lerobot", str(src), str(dest), "--episodes", "1-2", "--cameras", "top"])
    assert code == 0
    assert "2 episodes written (23 frames" in capsys.readouterr().out
    readers = [EpisodeReader(p) for p in sorted(dest.iterdir())]
    assert [r.attrs["source"]["episode_index"] for r in readers] == [1, 2]
    assert readers[0].embodiment == "lerobot/so100"
    cameras = [k for k in readers[0].keys() if k.startswith("images.")]  # noqa: SIM118
    assert cameras == ["images.top"]
    assert cli(["import-lerobot", str(src), str(dest), "--episodes", "7"]) == 2
    assert "episodes [7] are not in meta/episodes" in capsys.readouterr().err
    assert cli(["import-lerobot", str(src), str(dest), "--cameras", "side"]) == 2
    assert "cameras ['side'] not in the dataset" in capsys.readouterr().err


def test_without_the_extra_the_error_says_what_to_install() -> None:
    from polymimic_data.lerobot.source import lerobot_extra

    missing = pytest.raises(ImportError, match=r"needs no_such_codec.*polymimic-data\[lerobot\]")
    with missing, lerobot_extra():
        import no_such_codec  # noqa: F401
