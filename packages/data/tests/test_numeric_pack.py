"""A numeric pack serves what the disk holds, and never an episode that changed after it."""

from __future__ import annotations

import builtins
import io
import json
import multiprocessing
import os
import pickle
import shutil
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
import zarr

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.samples import numeric_pack
from polymimic_data.synthetic.episodes import generate_episode


def _episodes(root: Path, embodiment: str, count: int = 2, seed: int = 0) -> list[Path]:
    spec = get_embodiment(embodiment)
    return [
        generate_episode(root / f"ep{i}.zarr", spec, frames=20, height=32, width=40, seed=seed + i)
        for i in range(count)
    ]


def _set(path: Path, key: str, frame: int, value: object) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        arr = zarr.open_array(path / key, mode="r+")
        arr[frame : frame + 1] = value


def _dataset(
    root: Path | list, embodiment: str, pack: Path | None = None, cameras: tuple = ("front_1",)
) -> EpisodeDataset:
    episodes = resolve_episodes(root) if isinstance(root, Path) else root
    dataset = EpisodeDataset(
        episodes, embodiment=embodiment, cameras=cameras, image_size=(16, 20), horizon=4
    )
    if pack is not None:
        assert dataset.use_numeric_pack(pack, progress=False) is not None
    return dataset


def _cache_listing(cache: Path) -> list[str]:
    """What a pack's cache folder holds, with the pack's key left out of each name."""
    names = [p.name for p in cache.iterdir()]
    keys = {n.split("-")[1].split(".")[0] for n in names if "numeric_pack-" in n}
    assert len(keys) == 1, names
    key = keys.pop()
    return sorted(n.replace(f"numeric_pack-{key}", "pack").lstrip(".") for n in names)


def _numbers(dataset: EpisodeDataset) -> list[tuple]:
    """Every sample's numbers, prompt and faults (what a pack could change)."""
    out = []
    for index in range(len(dataset)):
        sample = dataset[index]
        out.append((sample["episode"], sample["frame"], sample["state"].numpy().tolist(),
                    sample["actions"].numpy().tolist(), sample["prompt"],
                    [(f["key"], f["frame"], f["reason"]) for f in sample["faults"]]))  # fmt: skip
    return out


@pytest.mark.parametrize("embodiment", ["eva_bimanual", "aria_bimanual"])
def test_a_packed_dataset_gives_every_sample_as_the_disk_does(
    tmp_path: Path, embodiment: str
) -> None:
    """Arrays, bad frames (replaced and reported the same way) and prompts, from the pack."""
    first, _ = _episodes(tmp_path / "data", embodiment)
    key = "left.gripper" if embodiment == "eva_bimanual" else "left.obs_keypoints"
    _set(first, key, 12, np.nan)
    packed = _dataset(tmp_path / "data", embodiment, pack=tmp_path / "cache")
    expected = _numbers(_dataset(tmp_path / "data", embodiment))
    assert _numbers(packed) == expected
    assert packed.episodes_opened == packed._cache.from_pack == 2  # no array file read
    assert any(faults and faults[0][:2] == (key, 12) for *_, faults in expected)
    assert any(prompt for *_, prompt, _ in expected)  # annotations come through


def _replace_with_another(path: Path, frames: int = 20) -> None:
    """The episode written again elsewhere with other values and renamed into its place."""
    spec = get_embodiment("eva_bimanual")
    other = generate_episode(path.parent.parent / "other.zarr", spec, frames=frames, height=32,
                             width=40, seed=99)  # fmt: skip
    shutil.rmtree(path)
    other.rename(path)


def _rewrite_keeping_mtime(path: Path) -> None:
    """Another episode's chunk of the same size copied over this one's, its mtime restored
    (as `cp -p` or `rsync -t` leave it): only the change time tells."""
    chunk = next(p for p in (path / "right.cmd_ee_pose").rglob("*") if p.is_file()
                 and p.name != "zarr.json")  # fmt: skip
    other = path.parent / "ep1.zarr" / chunk.relative_to(path)
    stat = chunk.stat()
    assert other.stat().st_size == stat.st_size and other.read_bytes() != chunk.read_bytes()
    with chunk.open("r+b") as out:  # in place: the same inode
        out.write(other.read_bytes())
    os.utime(chunk, ns=(stat.st_atime_ns, stat.st_mtime_ns))


CHANGES = {
    "a value rewritten in place": lambda path: _set(path, "right.cmd_ee_pose", 3, 0.25),
    "the episode replaced": _replace_with_another,
    "the episode replaced by a shorter one": lambda path: _replace_with_another(path, 15),
    "a key removed": lambda path: shutil.rmtree(path / "right.gripper"),
    "the annotations removed": lambda path: shutil.rmtree(path / "annotations"),
    "a chunk rewritten in place, its mtime restored": _rewrite_keeping_mtime,
}


@pytest.mark.parametrize("change", CHANGES)
def test_an_episode_changed_after_packing_is_read_fresh(tmp_path: Path, change: str) -> None:
    """Every sample is what the disk holds now: the changed episode read, the other packed."""
    first, _ = _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")  # as a run's cached index has them
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")  # packs both
    CHANGES[change](first)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")
    assert _numbers(packed) == _numbers(_dataset(episodes, "eva_bimanual"))
    assert packed._cache.from_pack == 1  # the unchanged episode only
    assert _cache_listing(tmp_path / "cache") == ["pack", "pack.lock"]  # the same, not a second


def test_annotations_added_after_packing_are_read(tmp_path: Path) -> None:
    first, second = _episodes(tmp_path / "data", "eva_bimanual")
    shutil.rmtree(first / "annotations")
    episodes = resolve_episodes(tmp_path / "data")
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")  # packed without them
    shutil.copytree(second / "annotations", first / "annotations")
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")
    expected = _numbers(_dataset(episodes, "eva_bimanual"))
    assert _numbers(packed) == expected
    assert all(prompt for *_, prompt, _ in expected[:20])  # episode 0's prompts, read fresh


def test_a_camera_shard_replaced_after_packing_is_read_fresh(tmp_path: Path) -> None:
    """The pack keeps each camera's shard index: a shard replaced on disk (another
    episode's frames renamed over it) is read by its own index, not the packed offsets."""
    first, second = _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")  # packs both
    shard = first / "images.front_1" / "c" / "0"
    theirs = second / "images.front_1" / "c" / "0"
    assert shard.is_file() and theirs.read_bytes() != shard.read_bytes()
    shutil.copyfile(theirs, tmp_path / "staged")
    os.replace(tmp_path / "staged", shard)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")
    disk = _dataset(episodes, "eva_bimanual")
    for index in range(len(disk)):
        ours, expected = packed[index], disk[index]
        assert ours["faults"] == expected["faults"] == [], index
        assert torch.equal(ours["images.front_1"], expected["images.front_1"]), index
    assert packed._cache.from_pack == 1  # the unchanged episode only


def test_a_chunk_written_after_packing_where_none_was_is_read(tmp_path: Path) -> None:
    """A chunk missing when packed reads as the fill value; written later, it is read."""
    first, _ = _episodes(tmp_path / "data", "eva_bimanual")
    chunk = first / "right.cmd_ee_pose" / "c" / "0" / "0"
    kept = chunk.read_bytes()
    chunk.unlink()
    episodes = resolve_episodes(tmp_path / "data")
    before = _numbers(_dataset(episodes, "eva_bimanual", pack=tmp_path / "cache"))
    chunk.write_bytes(kept)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")
    expected = _numbers(_dataset(episodes, "eva_bimanual"))
    assert _numbers(packed) == expected != before  # the chunk's values, not the fill
    assert packed._cache.from_pack == 1  # the unchanged episode only


def test_an_unreadable_episode_is_left_out_and_refused_at_its_open(tmp_path: Path) -> None:
    first, second = _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    shutil.rmtree(first / "right.gripper")  # after the index: the pack meets it first
    dataset = _dataset(episodes, "eva_bimanual")
    pack = dataset.use_numeric_pack(tmp_path / "cache", progress=False)
    assert pack is not None and len(pack) == 1
    sample = dataset[0]  # episode 0's: replaced from the other, its fault named
    assert sample["episode"] == second.name.removesuffix(".zarr")
    assert "right.gripper" in sample["faults"][0]["reason"]


def test_a_pack_pickles_by_its_folder(tmp_path: Path) -> None:
    """A spawned loader worker maps the pack again rather than receiving its arrays."""
    _episodes(tmp_path / "data", "eva_bimanual")
    dataset = _dataset(tmp_path / "data", "eva_bimanual", pack=tmp_path / "cache")
    pack = dataset._cache.pack
    assert pack is not None
    blob = pickle.dumps(pack)
    assert len(blob) < 2_000
    again = pickle.loads(blob)
    served, original = again.get(1), pack.get(1)
    assert served is not None and original is not None
    for key, values in original.arrays.items():
        assert np.array_equal(served.arrays[key], values)


def test_ranks_starting_together_build_one_pack_and_all_use_it(tmp_path: Path, monkeypatch) -> None:
    """A job's ranks each open the same pack at once: one builds it, the others wait."""
    _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    builds = tmp_path / "builds.txt"
    real_build = numeric_pack._build

    def counted(*args, **kwargs):
        with open(builds, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)  # long enough for every rank to arrive while it builds
        return real_build(*args, **kwargs)

    monkeypatch.setattr(numeric_pack, "_build", counted)

    def rank() -> None:
        dataset = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache")
        assert _numbers(dataset) == _numbers(_dataset(episodes, "eva_bimanual"))

    context = multiprocessing.get_context("fork")
    ranks = [context.Process(target=rank) for _ in range(3)]
    for process in ranks:
        process.start()
    for process in ranks:
        process.join(timeout=120)
    assert [p.exitcode for p in ranks] == [0, 0, 0]
    assert len(builds.read_text().split()) == 1
    assert _cache_listing(tmp_path / "cache") == ["pack", "pack.lock"]  # no partial left


def test_a_data_set_that_cannot_be_packed_is_read_from_disk_and_not_tried_again(
    tmp_path: Path, monkeypatch
) -> None:
    """One episode's key wider than the other's: no flat column holds them. The next start
    finds that out from a marker, without reading every episode again."""
    paths = _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    keys = ["left.obs_ee_pose"]
    wider = np.zeros((20, 9), np.float32)  # a pose is 7 wide
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        zarr.create_array(paths[1] / keys[0], data=wider, overwrite=True)
    assert numeric_pack.NumericPack.load_or_build(tmp_path / "cache", episodes, keys) is None
    marker = next((tmp_path / "cache").glob("numeric_pack-*.unpackable"))
    assert "left.obs_ee_pose has rows of" in marker.read_text()

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(numeric_pack, "_build", no_build)
    assert numeric_pack.NumericPack.load_or_build(tmp_path / "cache", episodes, keys) is None


def test_a_cache_that_cannot_lock_still_gets_its_pack(tmp_path: Path, monkeypatch) -> None:
    """NFS without its lock daemon refuses flock (ENOLCK): the build goes on unlocked."""
    import errno

    from polymimic_data.store import atomic_files

    def refuse(handle, operation):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(atomic_files.fcntl, "flock", refuse)
    _episodes(tmp_path / "data", "eva_bimanual")
    packed = _dataset(tmp_path / "data", "eva_bimanual", pack=tmp_path / "cache")
    assert _numbers(packed) == _numbers(_dataset(tmp_path / "data", "eva_bimanual"))
    assert packed._cache.from_pack == 2


def test_a_lock_held_past_its_timeout_is_gone_on_without(tmp_path: Path) -> None:
    """A holder that never lets go (its node died, NFS keeps its lock): a warning, then on."""
    from polymimic_data.store import exclusive

    lock = tmp_path / "held.lock"
    with exclusive(lock, "first") as first:
        assert first
        child = os.fork()
        if child == 0:  # another process: flock locks are per open file
            started = time.monotonic()
            with exclusive(lock, "waiting", timeout_s=0.5) as held:
                waited = time.monotonic() - started
            os._exit(0 if not held and 0.4 < waited < 5 else 1)
        _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    with exclusive(lock, "free now", timeout_s=0.5) as held:
        assert held


EVA_CAMERAS = ("front_1", "left_wrist", "right_wrist")


class _FilesOpened:
    """Counts the files this process opens (to read: numpy's mapped pack is opened before)."""

    def __init__(self, monkeypatch) -> None:
        self.paths: list[str] = []
        real_os_open, real_open = os.open, io.open

        def os_open(path, *args, **kwargs):
            self.paths.append(str(path))
            return real_os_open(path, *args, **kwargs)

        def open_(file, *args, **kwargs):
            self.paths.append(str(file))
            return real_open(file, *args, **kwargs)

        monkeypatch.setattr(os, "open", os_open)
        monkeypatch.setattr(io, "open", open_)
        monkeypatch.setattr(builtins, "open", open_)


def test_an_open_from_the_pack_reads_no_file(tmp_path: Path, monkeypatch) -> None:
    """No `zarr.json`, chunk, annotation or shard index: only each camera's JPEG, by pread."""
    _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    from_disk = _dataset(episodes, "eva_bimanual", cameras=EVA_CAMERAS)
    opened = _FilesOpened(monkeypatch)
    from_disk._cache.get(0)
    from_disk[0]
    assert len(opened.paths) > 10  # the group, the keys, the annotations, each camera
    del opened.paths[:]
    packed._cache.get(0)
    assert opened.paths == []
    sample = packed[0]
    assert sorted(Path(p).parent.parent.name for p in opened.paths) == [
        f"images.{c}" for c in EVA_CAMERAS
    ]  # one pread of each camera's shard
    assert packed._cache.from_pack == 1
    expected = from_disk[0]
    for camera in EVA_CAMERAS:
        assert torch.equal(sample[f"images.{camera}"], expected[f"images.{camera}"])


def _images(dataset: EpisodeDataset) -> list[tuple]:
    """Every sample's numbers and its images' bytes (what a packed camera could change)."""
    out = []
    for index, numbers in enumerate(_numbers(dataset)):
        sample = dataset[index]
        images = [sample[f"images.{c}"].numpy().tobytes() for c in dataset.cameras]
        out.append((*numbers, images))
    return out


def _shard(episode: Path, camera: str = "left_wrist") -> Path:
    return next(p for p in (episode / f"images.{camera}" / "c").rglob("*") if p.is_file())


def _shard_rewritten_keeping_mtime(episode: Path) -> None:
    """The other episode's frames written over this one's shard, in place, mtime restored."""
    shard = _shard(episode)
    stat = shard.stat()
    with shard.open("r+b") as out:  # the same inode
        out.truncate(0)
        out.write(_shard(episode.parent / "ep1.zarr").read_bytes())
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _attributes_rewritten_keeping_mtime(episode: Path) -> None:
    """`total_frames` cut to 15 in the group's `zarr.json`, its mtime restored."""
    meta_path = episode / "zarr.json"
    stat = meta_path.stat()
    meta = json.loads(meta_path.read_text())
    meta["attributes"]["total_frames"] = 15
    meta_path.write_text(json.dumps(meta))
    os.utime(meta_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


CAMERA_CHANGES = {
    "a camera's shard rewritten in place, its mtime restored": _shard_rewritten_keeping_mtime,
    "a camera removed": lambda path: shutil.rmtree(path / "images.left_wrist"),
    "the group's attributes rewritten, its mtime restored": _attributes_rewritten_keeping_mtime,
    "the episode replaced": _replace_with_another,
}


@pytest.mark.parametrize("change", CAMERA_CHANGES)
def test_an_episode_changed_after_its_index_was_cached_is_read_fresh(
    tmp_path: Path, change: str
) -> None:
    """Images included: the changed episode is read from disk, and refused as the disk's is.

    The episodes as resolved before the change: a run's workers open episodes long after
    its start resolved them.
    """
    first, _ = _episodes(tmp_path / "data", "eva_bimanual")
    episodes = resolve_episodes(tmp_path / "data")
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    CAMERA_CHANGES[change](first)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    expected = _images(_dataset(episodes, "eva_bimanual", cameras=EVA_CAMERAS))
    assert _images(packed) == expected
    assert packed._cache.from_pack == 1  # the unchanged episode only


def _frames_never_written(episode: Path, frames: slice, camera: str = "left_wrist") -> None:
    """Frames of a camera left out of its shard (MISSING in the index), as zarr leaves a
    chunk that holds only the fill value; every frame: no shard file at all."""
    array = zarr.open_array(episode / f"images.{camera}", mode="r+")
    count = len(range(*frames.indices(array.shape[0])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        array[frames] = np.array([b""] * count, dtype=object)


@pytest.mark.parametrize("frames", [slice(5, 6), slice(None)], ids=["one frame", "every frame"])
def test_a_packed_camera_with_frames_missing_from_its_shard_is_read_as_the_disk_is(
    tmp_path: Path, frames: slice
) -> None:
    """The pack keeps the index's MISSING entries (and a camera with no shard file): the
    same samples, faults and stand-ins as from disk, the episode still opened from the pack."""
    first, _ = _episodes(tmp_path / "data", "eva_bimanual")
    _frames_never_written(first, frames)
    shards = [p for p in (first / "images.left_wrist" / "c").rglob("*") if p.is_file()]
    assert bool(shards) == (frames.stop is not None)  # every frame gone: no shard file
    episodes = resolve_episodes(tmp_path / "data")
    _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    packed = _dataset(episodes, "eva_bimanual", pack=tmp_path / "cache", cameras=EVA_CAMERAS)
    expected = _images(_dataset(episodes, "eva_bimanual", cameras=EVA_CAMERAS))
    assert _images(packed) == expected
    assert packed._cache.from_pack == 2
    faults = {(key, frame) for *_, faults, _ in expected for key, frame, _ in faults}
    # the one frame replaced where a sample needs it; with no shard, the episode dropped
    assert ("images.left_wrist", 5 if frames.stop else 0) in faults
