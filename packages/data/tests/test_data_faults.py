"""Each kind of bad data, in real files: replaced, reported, and never fatal on its own."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from polymimic_data import EpisodeDataset, collate_samples, resolve_episodes
from polymimic_data.data_faults import BadDataError, DataFault, FaultLedger
from polymimic_data.embodiments import get_embodiment
from polymimic_data.synthetic import generate_episode


def _episodes(root: Path, embodiment: str, count: int = 2, frames: int = 20) -> list[Path]:
    spec = get_embodiment(embodiment)
    return [
        generate_episode(
            root / f"{embodiment}-{i}.zarr", spec, frames=frames, height=32, width=40, seed=i
        )
        for i in range(count)
    ]


def _set(path: Path, key: str, frame: int, value: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.open_array(path / key, mode="r+")
        arr[frame : frame + 1] = value


def _dataset(root: Path, embodiment: str = "eva_bimanual", **kwargs) -> EpisodeDataset:
    return EpisodeDataset(
        resolve_episodes(root), embodiment=embodiment, image_size=(16, 20), horizon=4, **kwargs
    )


@pytest.mark.parametrize(
    ("embodiment", "key", "value", "reason"),
    [
        ("eva_bimanual", "left.gripper", np.nan, "NaN or inf"),
        ("eva_bimanual", "right.cmd_ee_pose", np.inf, "NaN or inf"),
        ("aria_bimanual", "left.obs_keypoints", 1e9, "not-detected sentinel (1e9)"),
        (
            "eva_bimanual",
            "left.obs_ee_pose",
            np.array([[0.1, 0.2, 0.5, 0, 0, 0, 0]]),
            "zero or non-unit quaternion",
        ),
        (
            "aria_bimanual",
            "right.obs_wrist_pose",
            np.array([[0.1, 0.2, 0.5, 2.0, 0, 0, 0]]),
            "zero or non-unit quaternion",
        ),
    ],
)
def test_bad_numeric_values_are_replaced_and_reported(
    tmp_path: Path, embodiment: str, key: str, value: object, reason: str
) -> None:
    first, _ = _episodes(tmp_path, embodiment)
    _set(first, key, 12, value)
    ds = _dataset(tmp_path, embodiment)
    index = next(i for i in range(len(ds)) if ds.locate(i) == (0, 12))
    sample = ds[index]
    fault = DataFault(**sample["faults"][0])
    assert (fault.key, fault.frame, fault.reason) == (key, 12, reason)
    assert fault.episode == first.name.removesuffix(".zarr")
    assert sample["frame"] != 12 and np.isfinite(sample["actions"].numpy()).all()
    assert ds[index + 5]["faults"] == []  # frame 17 does not touch frame 12


def test_corrupt_jpeg_and_truncated_shard_are_replaced(tmp_path: Path) -> None:
    first, second = _episodes(tmp_path, "eva_bimanual")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_array(first / "images.front_1", mode="r+")[3:4] = np.array(
            [b"not a jpeg"], dtype=object
        )
    shard = second / "images.front_1" / "c" / "0"
    shard.write_bytes(shard.read_bytes()[:100])
    ds = _dataset(tmp_path)
    bad = ds[3]["faults"]
    assert bad[0]["key"] == "images.front_1" and bad[0]["frame"] == 3
    other = ds[20 + 4]["faults"]
    assert other and other[0]["key"] == "images.front_1"
    assert "c/0" in other[0]["reason"]


def test_missing_key_drops_the_episode_and_samples_come_from_another(
    tmp_path: Path, caplog
) -> None:
    first, second = _episodes(tmp_path, "eva_bimanual")
    ds = _dataset(tmp_path)
    shutil.rmtree(first / "right.gripper")
    with caplog.at_level(logging.WARNING):
        sample = ds[0]
    assert sample["episode"] == second.name.removesuffix(".zarr")
    assert "right.gripper" in sample["faults"][0]["reason"]
    assert any("dropping episode" in r.message for r in caplog.records)
    assert ds[1]["faults"] == []  # dropped: replaced silently, reported once


def test_an_episode_past_the_threshold_is_dropped(tmp_path: Path, caplog) -> None:
    first, _ = _episodes(tmp_path, "eva_bimanual", frames=20)
    for frame in (2, 6, 10, 14):
        _set(first, "left.gripper", frame, np.nan)
    ds = _dataset(tmp_path, max_bad_fraction_per_episode=0.1)  # at most 2 bad frames of 20
    with caplog.at_level(logging.WARNING):
        for frame in (1, 5, 9):
            ds[frame]
    assert any("dropping episode" in r.message for r in caplog.records)
    assert ds[18]["episode"] != first.name.removesuffix(".zarr")


def test_batches_carry_faults_and_the_ledger_enforces_its_limit(tmp_path: Path) -> None:
    first, _ = _episodes(tmp_path, "eva_bimanual")
    _set(first, "left.gripper", 5, np.nan)
    ds = _dataset(tmp_path)
    batch = collate_samples([ds[i] for i in range(8)])
    assert len(batch["data_faults"]) >= 1 and "faults" not in batch
    assert all(s["episode"] == first.name.removesuffix(".zarr") for s in (ds[0], ds[7]))  # kept
    ledger = FaultLedger(max_bad_fraction=0.7)
    ledger.record(batch["data_faults"], samples=8)
    ledger.check()
    assert "left.gripper" in ledger.end_epoch()
    assert ledger.end_epoch() == ""
    strict = FaultLedger(max_bad_fraction=0.01)
    strict.record(batch["data_faults"], samples=8)
    with pytest.raises(BadDataError, match=first.name.removesuffix(".zarr")):
        strict.check()
