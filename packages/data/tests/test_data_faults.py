"""Each kind of bad data, in real files: replaced, reported, and never fatal on its own."""

from __future__ import annotations

import logging
import shutil
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr
from torch.utils.data import DataLoader

from polymimic_data import EpisodeDataset, collate_samples, resolve_episodes
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.samples.faults import BadDataError, DataFault, FaultLedger
from polymimic_data.synthetic.episodes import generate_episode


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
    assert sample["episode"] != fault.episode and np.isfinite(sample["actions"].numpy()).all()
    assert ds[index + 5]["faults"] == []  # frame 17 does not touch frame 12


def test_a_corrupt_jpeg_is_replaced_from_another_episode(tmp_path: Path) -> None:
    first, second = _episodes(tmp_path, "eva_bimanual")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_array(first / "images.front_1", mode="r+")[3:4] = np.array(
            [b"not a jpeg"], dtype=object
        )
    ds = _dataset(tmp_path)
    sample = ds[3]
    assert [(f["key"], f["frame"], f["episode_dropped"]) for f in sample["faults"]] == [
        ("images.front_1", 3, False)
    ]
    assert sample["episode"] == second.name.removesuffix(".zarr")
    assert ds[4]["faults"] == []  # one bad frame does not condemn its neighbours


@pytest.mark.parametrize("threads", [1, 3])
def test_a_corrupt_jpeg_of_one_camera_is_named_however_the_cameras_are_decoded(
    tmp_path: Path, threads: int
) -> None:
    """Three cameras decoded one after another or on three threads: the same samples, and
    the same fault for a frame whose second camera does not decode."""
    first, _ = _episodes(tmp_path, "eva_bimanual")
    cameras = ("front_1", "left_wrist", "right_wrist")
    clean = _dataset(tmp_path, cameras=cameras, decode_threads=1)
    expected = [clean[i] for i in (0, 7, 25)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.open_array(first / "images.left_wrist", mode="r+")[3:4] = np.array(
            [b"not a jpeg"], dtype=object
        )
    ds = _dataset(tmp_path, cameras=cameras, decode_threads=threads)
    for index, want in zip((0, 7, 25), expected, strict=True):
        got = ds[index]
        for camera in cameras:
            assert torch.equal(got[f"images.{camera}"], want[f"images.{camera}"]), camera
    assert ds.decoder.threads == threads  # as asked
    sample = ds[3]
    assert [(f["key"], f["frame"]) for f in sample["faults"]] == [("images.left_wrist", 3)]


def _truncate(shard: Path) -> None:
    shard.write_bytes(shard.read_bytes()[:100])


@pytest.mark.parametrize("layout", ["polymimic", "egoverse"])
def test_a_truncated_shard_is_one_bad_sample_however_many_samples_meet_it(
    tmp_path: Path, layout: str
) -> None:
    spec = get_embodiment("eva_bimanual")
    paths = [
        generate_episode(
            tmp_path / f"ep{i:02d}", spec, frames=20, height=32, width=40, seed=i, layout=layout
        )
        for i in range(20)
    ]
    _truncate(paths[3] / "images.front_1" / "c" / "0")
    ds = _dataset(tmp_path)
    loader = DataLoader(
        ds,
        batch_size=16,
        shuffle=True,
        collate_fn=collate_samples,
        generator=torch.Generator().manual_seed(0),
    )
    ledger = FaultLedger(max_bad_fraction=0.01, min_samples=len(ds))
    for batch in loader:
        assert "ep03" not in batch["episode"]
        ledger.record(batch["data_faults"], samples=len(batch["state"]))
    ledger.check()  # 1 of 400 samples: within the 1% limit
    assert ledger.samples == 400 and ledger.bad_samples == 1
    (fault,) = ledger.faults
    assert (fault.episode, fault.key, fault.episode_dropped) == ("ep03", "images.front_1", True)
    assert "c/0" in fault.reason


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


def test_a_sample_counts_once_however_many_tries_its_replacement_took(tmp_path: Path) -> None:
    first, second = _episodes(tmp_path, "eva_bimanual")
    _set(first, "left.gripper", 12, np.nan)
    _truncate(second / "images.front_1" / "c" / "0")  # the only other episode is broken
    ds = _dataset(tmp_path)
    batch = collate_samples([ds[12], ds[0]])
    (faults,) = batch["data_faults"]
    assert [(f["episode"], f["key"]) for f in faults] == [
        ("eva_bimanual-0", "left.gripper"),
        ("eva_bimanual-1", "images.front_1"),
    ]
    ledger = FaultLedger(max_bad_fraction=0.01, min_samples=1)
    ledger.record(batch["data_faults"], samples=2)
    assert (ledger.bad_samples, len(ledger.faults)) == (1, 2)


def test_the_ledger_judges_the_share_only_once_it_has_seen_enough(caplog) -> None:
    fault = DataFault("e1", "left.gripper", 3, "NaN or inf")
    ledger = FaultLedger(max_bad_fraction=0.01, min_samples=100)
    with caplog.at_level(logging.WARNING):
        ledger.record([[fault]], samples=16)
        ledger.check()  # 1 of 16 says little about a data set
        ledger.record([[fault]] * 5, samples=84)
        dropped = [DataFault("e2", "images.front_1", f, "shard truncated", True) for f in (1, 7)]
        ledger.record([[dropped[0]], [dropped[1]]], samples=0)  # two workers met one broken file
    assert sum("bad data replaced" in r.message for r in caplog.records) == 2  # each news once
    with pytest.raises(BadDataError, match=r"8 of 100 samples were bad") as caught:
        ledger.check()
    assert "e1  left.gripper  NaN or inf: 6" in str(caught.value)
    assert "validate ROOT --deep" in str(caught.value)


def test_the_ledger_logs_the_first_bad_frames_then_only_counts_them(caplog) -> None:
    # human data misses a hand in many frames: each must not cost a log line forever
    faults = [DataFault(f"e{i % 7}", "left.obs_wrist_pose", i, "not-detected sentinel (1e9)")
              for i in range(30)]  # fmt: skip
    ledger = FaultLedger(max_bad_fraction=0.9, min_samples=1, max_reports=5)
    with caplog.at_level(logging.WARNING):
        ledger.record([[f] for f in faults], samples=30)
        ledger.record([[faults[0]], [faults[29]]], samples=2)  # old news, either side of the cap
        summary = ledger.end_epoch()
    messages = [r.getMessage() for r in caplog.records]
    assert sum(m.startswith("bad data replaced") for m in messages) == 5
    assert sum("the rest are counted in each epoch's summary" in m for m in messages) == 1
    assert summary.startswith("32 bad frames met and replaced")  # the summary counts them all
    assert ledger.bad_samples == 32


def test_batches_carry_faults_and_the_ledger_summarises_each_epoch(tmp_path: Path) -> None:
    first, _ = _episodes(tmp_path, "eva_bimanual")
    _set(first, "left.gripper", 5, np.nan)
    ds = _dataset(tmp_path)
    batch = collate_samples([ds[i] for i in range(8)])
    assert "faults" not in batch
    # the state of frame 5, and the gripper actions (one frame ahead) of frames 1-4
    assert [len(f) for f in batch["data_faults"]] == [1, 1, 1, 1, 1]
    ledger = FaultLedger(max_bad_fraction=0.7, min_samples=8)
    ledger.record(batch["data_faults"], samples=8)
    ledger.check()
    assert ledger.bad_fraction == 5 / 8
    assert "left.gripper" in ledger.end_epoch()
    assert ledger.end_epoch() == ""


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize("image_size", [(16, 20), None], ids=["sized", "native"])
@pytest.mark.parametrize("corrupt", ["not a jpeg", "cut short"])
def test_a_batch_read_at_once_meets_faults_as_its_samples_do_one_by_one(
    tmp_path: Path, threads: int, image_size: tuple | None, corrupt: str
) -> None:
    """A corrupt frame of one camera and an episode missing a key, in a batch read at once
    (EpisodeDataset.__getitems__): the same stand-ins, images and faults as one by one.

    The corrupt frame is the batch's first, whose JPEG headers size its buffers: unreadable
    ("not a jpeg", at the native size: its stand-in sets the size) or readable with the
    data cut short (it decodes into its slot, fails, and is remade there)."""
    first, _, third = _episodes(tmp_path, "eva_bimanual", count=3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        frames = zarr.open_array(first / "images.left_wrist", mode="r+")
        bad = b"not a jpeg" if corrupt == "not a jpeg" else bytes(frames[3])[:-30]
        frames[3:4] = np.array([bad], dtype=object)
    episodes = resolve_episodes(tmp_path)
    shutil.rmtree(third / "right.gripper")  # after the index: met at the episode's open
    cameras = ("front_1", "left_wrist", "right_wrist")
    indices = [3, 45, 2, 21, 50, 3]  # frame 3 of the first twice; the third's are dropped

    def fresh() -> EpisodeDataset:
        return EpisodeDataset(episodes, embodiment="eva_bimanual", cameras=cameras,
                              image_size=image_size, horizon=4, decode_threads=threads)  # fmt: skip

    at_once = collate_samples(fresh().__getitems__(indices))
    dataset = fresh()
    one_by_one = collate_samples([dataset[i] for i in indices])
    for key, value in at_once.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, one_by_one[key]), key
        else:
            assert value == one_by_one[key], key
    faults = [(f["key"], f["frame"]) for sample in at_once["data_faults"] for f in sample]
    assert ("images.left_wrist", 3) in faults and any(k == "right.gripper" for k, _ in faults)


@pytest.mark.parametrize("threads", [1, 3])
def test_an_episode_dropped_mid_batch_is_not_served_later_in_that_batch(
    tmp_path: Path, threads: int
) -> None:
    """The second bad frame of an episode drops it; the batch's later samples from it are
    replaced, as they are one by one, even though they were prepared (and their frames
    decoding, on threads) before the fault was met."""
    spec = get_embodiment("eva_bimanual")
    first, _ = (
        generate_episode(tmp_path / f"eva-{i}.zarr", spec, frames=20, height=240, width=320, seed=i)
        for i in range(2)
    )
    for frame in (3, 6):
        _set(first, "images.left_wrist", frame, np.array([b"not a jpeg"], dtype=object))
    episodes = resolve_episodes(tmp_path)
    indices = [3, 6, 8, 10, 25, 12]  # 8, 10 and 12: the first episode's, after its drop
    cameras = ("front_1", "left_wrist", "right_wrist")

    def fresh() -> EpisodeDataset:
        return EpisodeDataset(episodes, embodiment="eva_bimanual", cameras=cameras,
                              image_size=(16, 20), horizon=4, max_bad_fraction_per_episode=0.05,
                              decode_threads=threads)  # fmt: skip

    dataset = fresh()
    at_once = dataset.__getitems__(indices)
    assert dataset.decoder.threads == threads  # 240x320 frames: on threads where there are
    one_by_one = fresh()
    expected = collate_samples([one_by_one[i] for i in indices])
    got = collate_samples(at_once)
    for key, value in got.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, expected[key]), key
        else:
            assert value == expected[key], key
    dropped = episodes[0].hash
    assert [s["episode"] == dropped for s in at_once] == [False] * len(indices)
    # the two bad frames reported (the second with the drop); the dropped episode's samples
    # replaced without a report of their own
    assert [[f["episode_dropped"] for f in s["faults"]] for s in at_once] == [
        [False],
        [True],
        [],
        [],
        [],
        [],
    ]
