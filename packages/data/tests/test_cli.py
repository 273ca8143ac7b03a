from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import zarr

from polymimic_data import EpisodeReader
from polymimic_data.cli import main
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.episodes.checks import deep_problems
from polymimic_data.episodes.resolver import scan_episodes
from polymimic_data.synthetic.episodes import generate_episode


def test_inspect_lists_episodes_and_totals(eva_root: Path, aria_root: Path, capsys) -> None:
    assert main(["inspect", str(eva_root), str(aria_root)]) == 0
    out = capsys.readouterr().out
    assert out.count("eva_bimanual") >= 7 and "front_1,left_wrist,right_wrist" in out
    assert "aria_bimanual  3         60" in out  # 3 episodes of 20 frames
    assert "synthetic_reach" in out


def test_validate_passes_good_data_and_lists_every_bad_episode(
    eva_root: Path, tmp_path: Path, capsys
) -> None:
    assert main(["validate", str(eva_root), "--embodiment", "eva_bimanual", "--deep"]) == 0
    assert "ok: 6 episodes, 144 frames" in capsys.readouterr().out
    root = tmp_path / "root"
    shutil.copytree(eva_root, root)
    episodes = sorted(root.glob("*.zarr"))
    shutil.rmtree(episodes[0] / "left.cmd_ee_pose")
    assert main(["validate", str(root)]) == 1
    err = capsys.readouterr().err
    assert "1 bad episode" in err and "left.cmd_ee_pose" in err
    shutil.rmtree(episodes[0])
    zarr.open_array(episodes[1] / "right.gripper", mode="r+")[4:6] = np.nan
    assert main(["validate", str(root), "--deep"]) == 1
    assert "right.gripper frames 4-5: NaN or inf" in capsys.readouterr().err


def test_validate_deep_lists_undetected_hands_without_failing(
    aria_root: Path, tmp_path: Path, capsys
) -> None:
    """A hand out of view (the 1e9 sentinel) is part of the format: listed, not a failure;
    a NaN beside it still fails."""
    root = tmp_path / "root"
    shutil.copytree(aria_root, root)
    first, second, _ = sorted(root.glob("*.zarr"))
    zarr.open_array(first / "left.obs_keypoints", mode="r+")[3:6] = 1e9
    assert main(["validate", str(root), "--deep"]) == 0
    captured = capsys.readouterr()
    assert f"not detected: {first}: left.obs_keypoints frames 3-5:" in captured.err
    assert "ok: 3 episodes, 60 frames (values and JPEGs checked); 1 with frames" in captured.out
    zarr.open_array(second / "right.obs_wrist_pose", mode="r+")[7] = np.nan
    assert main(["validate", str(root), "--deep"]) == 1
    captured = capsys.readouterr()
    assert f"{second}: right.obs_wrist_pose frame 7: NaN or inf" in captured.err
    assert "1 bad of 3 episodes" in captured.out  # the undetected hand is not counted bad


def test_validate_filters_and_explicit_episodes(eva_root: Path, capsys) -> None:
    assert main(["validate", str(eva_root), "--filter", "task=synthetic_reach,other"]) == 0
    assert main(["validate", str(eva_root), "--episodes", "nope"]) == 1
    assert "nope: listed but not found" in capsys.readouterr().err


@pytest.fixture(scope="module")
def broken_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Nine episodes, seven of them broken in a different way each, and a stray file."""
    root = tmp_path_factory.mktemp("broken")
    spec = get_embodiment("eva_bimanual")
    names = ["good", "truncated", "overwritten", "ego_truncated", "half_meta"]
    names += ["missing_key", "emptied", "nan", "ego_good"]
    paths = {
        name: generate_episode(
            root / name,
            spec,
            frames=20,
            height=48,
            width=64,
            seed=i,
            layout="egoverse" if name.startswith("ego") else "polymimic",
        )
        for i, name in enumerate(names)
    }
    for name in ("truncated", "ego_truncated"):
        shard = paths[name] / "images.front_1" / "c" / "0"
        shard.write_bytes(shard.read_bytes()[:-600])
    shard = paths["overwritten"] / "images.front_1" / "c" / "0"
    data = bytearray(shard.read_bytes())
    middle = len(data) // 2
    data[middle : middle + 2000] = np.random.default_rng(0).bytes(2000)
    shard.write_bytes(bytes(data))
    meta = paths["half_meta"] / "zarr.json"
    meta.write_text(meta.read_text()[: len(meta.read_text()) // 2])
    shutil.rmtree(paths["missing_key"] / "right.gripper")
    for child in paths["emptied"].iterdir():
        shutil.rmtree(child) if child.is_dir() else child.unlink()
    zarr.open_array(paths["nan"] / "right.gripper", mode="r+")[4:6] = np.nan
    (root / "notes.txt").write_text("not an episode")
    return root


def test_validate_deep_reports_every_bad_frame_of_every_episode_in_one_pass(
    broken_root: Path, capsys
) -> None:
    assert main(["validate", str(broken_root), "--deep", "--workers", "2"]) == 1
    captured = capsys.readouterr()
    lines = captured.err.splitlines()

    def reported(episode: str) -> list[str]:
        return [line for line in lines if f"{broken_root / episode}:" in line]

    assert not reported("good") and not reported("ego_good")
    (truncated,) = reported("truncated")
    assert "images.front_1 frames 0-19:" in truncated and "c/0" in truncated
    (ego_truncated,) = reported("ego_truncated")
    assert "images.front_1 frames 0-19:" in ego_truncated and "crc32c" in ego_truncated
    assert reported("overwritten") and all(
        "images.front_1 frame" in r for r in reported("overwritten")
    )
    assert "cannot read group metadata" in reported("half_meta")[0]
    assert "right.gripper" in reported("missing_key")[0]
    assert "empty folder" in reported("emptied")[0]
    assert "right.gripper frames 4-5: NaN or inf" in reported("nan")[0]
    assert f"warning: {broken_root / 'notes.txt'}" in captured.err
    assert "7 bad of 9 episodes (values and JPEGs checked)" in captured.out


def test_overwritten_jpeg_bytes_are_pinned_to_the_frames_they_hit(broken_root: Path) -> None:
    episodes = scan_episodes(broken_root).episodes
    (overwritten,) = [e for e in episodes if e.hash == "overwritten"]
    problems = deep_problems([overwritten], progress=False)
    reported = sorted(f for p in problems for f in p.frames)
    reader = EpisodeReader(overwritten.path)
    reader.read_jpeg("front_1", 0)
    shard = overwritten.path / "images.front_1" / "c" / "0"
    index = reader._jpeg_readers["front_1"]._shard_index(shard)
    middle = shard.stat().st_size // 2
    hit = [f for f, (o, n) in enumerate(index.tolist()) if o < middle + 2000 and o + n > middle]
    assert hit and reported == hit


def test_correct_names_an_unreadable_episode_skips_it_and_fails_at_the_end(
    tmp_path: Path, capsys
) -> None:
    spec = get_embodiment("mecka_bimanual")
    paths = [
        generate_episode(tmp_path / f"m{i}", spec, frames=8, height=16, width=16, seed=i)
        for i in range(3)
    ]
    (paths[1] / "zarr.json").write_text('{"node_type": "group", "attributes": {')
    assert main(["correct", "mecka_left_wrist", str(tmp_path), "--dry-run"]) == 1
    captured = capsys.readouterr()
    assert f"skipped: {paths[1]}: cannot read group metadata" in captured.err
    assert "would correct: m0" in captured.out and "would correct: m2" in captured.out
    assert main(["correct", "mecka_left_wrist", str(tmp_path)]) == 1
    assert "2 corrected, 1 skipped" in capsys.readouterr().out
