from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import zarr

from polymimic_data import EpisodeReader, write_episode
from polymimic_data.store.episode_store import EpisodeWriter


def _jpeg(value: int) -> bytes:
    return simplejpeg.encode_jpeg(np.full((16, 16, 3), value, np.uint8))


def test_round_trip_keeps_arrays_images_and_attributes(tmp_path: Path) -> None:
    pose = np.random.default_rng(0).normal(size=(5, 7))
    path = write_episode(
        tmp_path / "ep.zarr",
        embodiment="eva_bimanual",
        fps=30,
        arrays={"left.obs_ee_pose": pose},
        images={"front_1": [_jpeg(i * 40) for i in range(5)]},
        annotations=[{"text": "pick", "start_idx": 0, "end_idx": 3}],
        task_name="t",
    )
    reader = EpisodeReader(path)
    assert reader.total_frames == 5 and reader.embodiment == "eva_bimanual"
    np.testing.assert_allclose(reader.read_numeric("left.obs_ee_pose"), pose, rtol=1e-6)
    assert reader.read_numeric("left.obs_ee_pose").dtype == np.float32
    assert reader.read_jpegs("front_1", 2, 4) == [_jpeg(80), _jpeg(120)]
    assert reader.read_annotations() == [{"text": "pick", "start_idx": 0, "end_idx": 3}]
    assert reader.attrs["features"]["images.front_1"]["dtype"] == "jpeg"
    assert reader.attrs["features"]["left.obs_ee_pose"]["shape"] == [7]


def test_jpeg_arrays_are_not_zstd_compressed(tmp_path: Path) -> None:
    path = write_episode(
        tmp_path / "ep", embodiment="eva_bimanual", fps=30, images={"front_1": [_jpeg(0)] * 2}
    )
    meta = json.loads((path / "images.front_1" / "zarr.json").read_text())
    assert [c["name"] for c in meta["codecs"]] == ["sharding_indexed"]
    inner = meta["codecs"][0]["configuration"]
    assert [c["name"] for c in inner["codecs"]] == ["vlen-bytes"] and inner["chunk_shape"] == [1]


def test_reader_clamps_padded_arrays_to_total_frames(tmp_path: Path) -> None:
    # EgoVerse writers pad arrays past the true length; readers must clamp.
    path = tmp_path / "padded.zarr"
    group = zarr.open_group(path, mode="w", zarr_format=3)
    group.create_array("left.gripper", data=np.arange(10, dtype=np.float64)[:, None])
    group.attrs.update({"embodiment": "EVA_BIMANUAL", "total_frames": 6, "fps": 30})
    reader = EpisodeReader(path)
    assert reader.embodiment == "eva_bimanual"
    np.testing.assert_array_equal(reader.read_numeric("left.gripper")[:, 0], np.arange(6))


def test_interrupted_write_leaves_nothing(tmp_path: Path) -> None:
    class Boom(Exception):
        pass

    class ExplodingFrames(list):
        def __iter__(self):
            raise Boom

    with pytest.raises(Boom):
        write_episode(
            tmp_path / "ep.zarr",
            embodiment="eva_bimanual",
            fps=30,
            arrays={"left.gripper": np.zeros((2, 1))},
            images={"front_1": ExplodingFrames([b"x", b"y"])},
        )
    assert list(tmp_path.iterdir()) == []


def test_write_refuses_to_overwrite_and_checks_lengths(tmp_path: Path) -> None:
    arrays = {"left.gripper": np.zeros((2, 1))}
    write_episode(tmp_path / "ep", embodiment="eva_bimanual", fps=30, arrays=arrays)
    with pytest.raises(FileExistsError):
        write_episode(tmp_path / "ep", embodiment="eva_bimanual", fps=30, arrays=arrays)
    with pytest.raises(ValueError, match="differ in length"):
        write_episode(
            tmp_path / "ep2",
            embodiment="eva_bimanual",
            fps=30,
            arrays={"a": np.zeros((2, 1)), "b": np.zeros((3, 1))},
        )


def test_reader_names_the_missing_key(tmp_path: Path) -> None:
    path = write_episode(
        tmp_path / "ep",
        embodiment="eva_bimanual",
        fps=30,
        arrays={"left.gripper": np.zeros((2, 1))},
    )
    with pytest.raises(KeyError, match=r"right\.gripper"):
        EpisodeReader(path).read_numeric("right.gripper")


def test_incremental_writer_matches_whole_episode_writer(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pose = rng.normal(size=(300, 7))  # crosses a shard boundary
    jpegs = [_jpeg(i % 250) for i in range(300)]
    with EpisodeWriter(tmp_path / "inc.zarr", embodiment="aria_bimanual", fps=30) as writer:
        for t in range(300):
            writer.append({"left.obs_ee_pose": pose[t]}, {"front_1": jpegs[t]})
        writer.annotate("wave", 10, 20)
    whole = write_episode(
        tmp_path / "whole.zarr",
        embodiment="aria_bimanual",
        fps=30,
        arrays={"left.obs_ee_pose": pose},
        images={"front_1": jpegs},
        annotations=[{"text": "wave", "start_idx": 10, "end_idx": 20}],
    )
    a, b = EpisodeReader(tmp_path / "inc.zarr"), EpisodeReader(whole)
    assert a.total_frames == b.total_frames == 300
    np.testing.assert_array_equal(
        a.read_numeric("left.obs_ee_pose"), b.read_numeric("left.obs_ee_pose")
    )
    assert a.read_jpegs("front_1", 250, 300) == jpegs[250:300]
    assert a.read_annotations() == b.read_annotations()
    assert a.attrs["features"] == b.attrs["features"]


def test_incremental_writer_interrupted_leaves_nothing(tmp_path: Path) -> None:
    with (
        pytest.raises(RuntimeError),
        EpisodeWriter(tmp_path / "ep", embodiment="eva_bimanual", fps=30) as w,
    ):
        w.append({"left.gripper": np.zeros(1)})
        raise RuntimeError("robot unplugged")
    assert list(tmp_path.iterdir()) == []
    with EpisodeWriter(tmp_path / "ep", embodiment="eva_bimanual", fps=30) as w:
        w.append({"left.gripper": np.zeros(1)})
        with pytest.raises(ValueError, match="same keys"):
            w.append({"right.gripper": np.zeros(1)})
