"""`polymimic-data view`'s recording (`save_recording`, what `view --save` writes) of what
polymimic-sim records and what LeRobot's importer writes:
any layout the resolver reads opens in rerun (packages/data/tests/test_viewer.py covers
polymimic's and EgoVerse's writers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_data.episodes import save_recording

pytest.importorskip("rerun", reason="the viz extra (rerun-sdk) is not installed")
pytest.importorskip("datafusion", reason="reading a recording back needs rerun-sdk[catalog]")


def _read_back(path: Path):
    from rerun.chunk import RrdReader

    return RrdReader(path).store().stream().collect()


def _column(store, entity: str, component: str) -> list:
    table = store.reader(index="frame", contents=entity).to_pandas()
    return table[f"{entity}:{component}"].dropna().tolist()


def test_a_sim_recorded_episode_opens_with_its_frames_and_poses(tmp_path: Path) -> None:
    from polymimic_sim import record

    record("aloha_ee/transfer_cube", tmp_path / "sim", episodes=1, image_size=(24, 32),
           progress=False)  # fmt: skip
    (episode,) = resolve_episodes(tmp_path / "sim")
    reader = EpisodeReader(episode.path)
    dest = tmp_path / "sim.rrd"
    assert save_recording([episode.path], dest, progress=False) == dest
    store = _read_back(dest)
    root = f"/episodes/{reader.hash}"
    blobs = _column(store, f"{root}/images/top", "EncodedImage:blob")
    assert len(blobs) == reader.total_frames
    assert bytes(np.asarray(blobs[-1][0], np.uint8)) == reader.read_jpeg(
        "top", reader.total_frames - 1
    )
    moved = _column(store, f"{root}/world/right/cmd_ee_pose", "Transform3D:translation")
    shown = np.stack([np.asarray(v[0]) for v in moved])
    np.testing.assert_allclose(shown, reader.read_numeric("right.cmd_ee_pose")[:, :3], rtol=1e-6)


def test_a_joint_driven_sim_episode_names_its_joints(tmp_path: Path) -> None:
    """sim/aloha stores 14 joints in one key, unnamed in its features: the channels its
    embodiment declares name the series (`left_waist`), not their indices."""
    from polymimic_sim import record

    record("aloha/transfer_cube", tmp_path / "sim", episodes=1, image_size=(24, 32),
           progress=False)  # fmt: skip
    (episode,) = resolve_episodes(tmp_path / "sim")
    reader = EpisodeReader(episode.path)
    dest = save_recording([episode.path], tmp_path / "joints.rrd", progress=False)
    store = _read_back(dest)
    schema = "\n".join(str(c) for c in store.schema())
    root = f"/episodes/{reader.hash}"
    for key, column, name in (
        ("observation.state", 0, "left_waist"),
        ("action", 13, "right_gripper"),
    ):
        entity = f"{root}/{key.replace('.', '/')}/{name}"
        values = [v[0] for v in _column(store, entity, "Scalars:scalars")]
        np.testing.assert_allclose(values, reader.read_numeric(key)[:, column], rtol=1e-6)
    assert f"{root}/observation/state/0:" not in schema  # no series left named by index


def test_a_lerobot_import_opens_with_its_named_channels(tmp_path: Path) -> None:
    pytest.importorskip("av", reason="the lerobot extra")
    from polymimic_data.lerobot import import_lerobot
    from polymimic_data.testing import write_lerobot_dataset

    write_lerobot_dataset(tmp_path / "lerobot", episodes=1, frames=12)
    import_lerobot(tmp_path / "lerobot", tmp_path / "imported", progress=False)
    (episode,) = resolve_episodes(tmp_path / "imported")
    reader = EpisodeReader(episode.path)
    dest = tmp_path / "lerobot.rrd"
    assert save_recording([episode.path], dest, progress=False) == dest
    store = _read_back(dest)
    schema = "\n".join(str(c) for c in store.schema())
    stored = reader.keys()
    key = next(k for k in stored if not k.startswith("images.") and k != "annotations")
    names = reader.attrs["features"][key]["names"]
    assert names, f"{key}: the importer stores LeRobot's channel names"
    entity = f"/episodes/{reader.hash}/{key.replace('.', '/')}/{names[0]}"
    assert f"{entity}:Scalars:scalars" in schema
    values = [v[0] for v in _column(store, entity, "Scalars:scalars")]
    np.testing.assert_allclose(values, reader.read_numeric(key)[:, 0], rtol=1e-6)
