"""What opening an episode reads, for every episode, in one memory-mapped pack: an open reads none.

A loader worker opens each episode it has not seen (every sample's, once a data set outgrows
its episode cache): it reads the group's `zarr.json`, each numeric key's `zarr.json` and
chunk files, checks every frame for bad values (bad_values), reads the annotations and, at
the first frame of each camera, the camera's `zarr.json` and its shard's index: about 2 ms
for an eva episode on a small CPU, more than decoding its sample's JPEGs. A pack does that
once for a data set: the arrays of every episode, one flat file per key (`<n>.npy`,
memory-mapped, shared by the workers through the page cache); each camera's shard indices,
one flat file per camera (`camera<n>.npy`), and its metadata (kept once for the episodes
whose metadata differs only in length); each episode's bad frames, annotations and length
in `index.json`. Cameras in a layout read by byte ranges (sharded: polymimic's, EgoVerse's
and zarr's defaults) are packed; others are read from their files at first use, as without
a pack. `EpisodeDataset.use_numeric_pack(cache_dir)` loads the pack its episodes, keys and
cameras name, or builds it (atomically: a folder written beside and renamed into place).

Never stale: each packed episode records the identity (inode, size, modification and change
times) of everything its open depended on: the episode's folder (an entry added or removed
changes it) and its `zarr.json`, and for each key's, the annotations' and each packed
camera's array its `zarr.json` and chunk (or shard) files; where one of those files was
missing (read as the fill value), every file and folder under the array's folder instead,
recursively (depends_on; `identities.npy`, the names once per distinct listing). The change
time is the kernel's: a copy that restores the modification time (`cp -p`, `rsync -t`)
still changes it. An open compares them with the disk (22 `stat`s for an eva episode with
three cameras, and no read); an episode whose files changed, moved or vanished, or whose
missing chunk was written, is read from disk as without a pack (and its faults found as
they would be). An episode that could not be read when the pack was built is not in it:
it is read (and refused) at its open. An episode open in a worker's cache is served from
memory until the cache lets it go, pack or not (samples.episode_cache).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from polymimic_data.episodes.bad_values import frame_faults
from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.store.atomic_files import (
    exclusive,
    file_identity,
    stat_identity,
    write_text_atomic,
)
from polymimic_data.store.episode_store import EpisodeReader
from polymimic_data.store.vlen_bytes_reader import KnownArray, VlenBytesArrayReader
from polymimic_data.store.zarr_chunks import chunk_key, read_layout

log = logging.getLogger(__name__)
PACK_FORMAT = 2  # 2: cameras and the group's attributes packed too; identities in a .npy
ANNOTATIONS = "annotations"

BadFrames = dict[str, tuple[np.ndarray, list[str]]]  # key -> (bad per frame, reason per frame)


def read_key(
    reader: EpisodeReader, key: str
) -> tuple[np.ndarray, tuple[np.ndarray, list[str]] | None]:
    """One key's array, read whole, and its bad frames (mask, reasons), None if it has none.

    ValueError when the array holds fewer frames than the episode's `total_frames`.
    """
    values = reader.read_numeric(key)
    if len(values) < reader.total_frames:
        raise ValueError(f"{len(values)} frames, total_frames is {reader.total_frames}")
    mask, reasons = frame_faults(key, values)
    return values, ((mask, reasons) if mask.any() else None)


def depends_on(episode: Path, keys: Sequence[str], cameras: Sequence[str] = ()) -> list[str]:
    """What an open reading `keys`, the annotations and `cameras` depends on.

    The episode's folder and `zarr.json`, then for each of the keys', annotations' and
    cameras' arrays its `zarr.json` and chunk (or shard) files, where every one within its
    shape is there (chunk_files); else every file and folder under its folder, in walk
    order, so that a chunk written where none was (read as the fill value) is seen too.
    Relative to the episode.
    """
    names = [".", "zarr.json"]  # the folder: a key or the annotations added or removed
    for key in [*keys, ANNOTATIONS, *(f"images.{camera}" for camera in cameras)]:
        top = episode / key
        if not top.is_dir():
            continue
        files = chunk_files(top)
        if files is not None:
            names += [os.path.join(key, name) for name in ["zarr.json", *files]]
            continue
        for folder, folders, found in os.walk(top):
            folders.sort()  # the same listing for episodes laid out alike
            relative = os.path.relpath(folder, episode)
            names += [relative, *(os.path.join(relative, f) for f in sorted(found))]
    return names


def chunk_files(array_dir: Path) -> list[str] | None:
    """Every chunk (or shard) file of an array split along time only, if all are there.

    Each is named by chunk_key, one per `per_file` frames of its shape. Then an open
    depends on those files and its `zarr.json` alone: one written in place or replaced, or
    gone, shows in its identity, and one added lies outside the shape, where nothing is
    read. None where one is missing (its frames read as the fill value until it is
    written: its folder's identity tells) or the layout is read through zarr.
    """
    try:
        meta = json.loads((array_dir / "zarr.json").read_text())
        layout = read_layout(meta)
        if layout.mode == "zarr":
            return None
        count = -(-int(meta["shape"][0]) // layout.per_file)
        names = [chunk_key(meta, index) for index in range(count)]
    except Exception:  # metadata of any malformed shape: the walk (the open meets it)
        return None
    if not all(os.path.isfile(array_dir / name) for name in names):
        return None
    return names


def identities(episode: Path, names: Sequence[str]) -> np.ndarray | None:
    """Each name's identity now (inode, size, mtime, ctime); None when one has vanished.

    (Paths joined as strings: os.path.join cost as much as the `stat`s.)
    """
    prefix = os.path.join(episode, "")
    try:
        return np.array([file_identity(prefix + name) for name in names], np.int64)
    except OSError:
        return None


def unchanged(episode: Path, names: Sequence[str], packed: np.ndarray) -> bool:
    """Whether each name's identity is still its packed row (a `stat` each, until one differs).

    As `np.array_equal(identities(episode, names), packed)`, without building the array.
    """
    prefix = os.path.join(episode, "")
    if len(names) != len(packed):  # a pack damaged on disk: read the episode from it
        return False
    try:
        for name, row in zip(names, packed.tolist(), strict=True):
            if stat_identity(os.stat(prefix + name)) != row:
                return False
    except OSError:
        return False
    return True


@dataclass(frozen=True)
class PackedEpisode:
    """What an open needs of an episode, from the pack: its reader made without a read."""

    reader: EpisodeReader
    arrays: dict[str, np.ndarray]
    bad: BadFrames
    annotations: list[dict[str, Any]]


def pack_key(
    episodes: Sequence[EpisodeInfo], keys: Sequence[str], cameras: Sequence[str] = ()
) -> str:
    """A key that changes whenever the episodes (paths, hashes, lengths), keys or cameras do."""
    parts = [str(PACK_FORMAT), *keys, "cameras:", *cameras]
    parts += [f"{e.path}|{e.hash}|{e.total_frames}" for e in episodes]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


BUILD_LOCK_TIMEOUT_S = 1800.0  # a build of 10,000 episodes takes minutes, not half an hour


class NumericPack:
    """A data set's numeric arrays, bad frames, annotations and cameras, checked against the disk.

    `get(episode)` gives an episode's PackedEpisode, or None where the disk no longer holds
    what was packed (module docstring). Pickled (to a spawned loader worker) by its folder,
    which the worker maps again.
    """

    def __init__(self, directory: Path, paths: Sequence[Path]) -> None:
        self.directory = Path(directory)
        self._paths = [Path(p) for p in paths]
        index = json.loads((self.directory / "index.json").read_text())
        if index.get("format") != PACK_FORMAT:
            raise ValueError(
                f"{self.directory}: numeric pack format {index.get('format')!r}, this "
                f"polymimic-data reads {PACK_FORMAT}; delete the folder to build it again"
            )
        packed = [Path(p) for p in index["paths"]]
        if packed != self._paths:
            raise ValueError(
                f"{self.directory}: packs {len(packed)} episodes, not these {len(self._paths)} "
                "in this order; a pack is named by its episodes (pack_key)"
            )
        self.keys: list[str] = list(index["keys"])
        self.cameras: list[str] = list(index["cameras"])
        self._entries: list[dict[str, Any] | None] = index["episodes"]
        self._listings: list[list[str]] = index["listings"]
        self._metas: list[dict[str, Any]] = index["metas"]
        self._layouts = [read_layout(meta) for meta in self._metas]
        self._arrays = [_mapped(self.directory / f"{i}.npy") for i in range(len(self.keys))]
        self._indices = [
            _mapped(self.directory / f"camera{i}.npy") for i in range(len(self.cameras))
        ]
        self._identities = _mapped(self.directory / "identities.npy")

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "paths": self._paths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["paths"])  # type: ignore[misc]

    def __len__(self) -> int:
        return sum(entry is not None for entry in self._entries)

    def get(self, episode: int) -> PackedEpisode | None:
        """Episode number `episode` from the pack; None where the disk has changed."""
        entry = self._entries[episode]
        if entry is None:
            return None
        start, stop = entry["identities"]
        names = self._listings[entry["listing"]]
        if not unchanged(self._paths[episode], names, self._identities[start:stop]):
            return None
        frames = entry["frames"]
        arrays = {}
        for i, key in enumerate(self.keys):
            start, stop = entry["rows"][i]
            arrays[key] = self._arrays[i][start:stop].reshape(entry["shapes"][i])
        bad = {}
        for key, (bad_frames, reasons) in entry["bad"].items():
            mask = np.zeros(frames, dtype=bool)
            mask[bad_frames] = True
            per_frame = [""] * frames
            for frame, reason in zip(bad_frames, reasons, strict=True):
                per_frame[frame] = reason
            bad[key] = (mask, per_frame)
        cameras = {}
        for camera, (number, length, start, stop) in entry["cameras"].items():
            meta, layout = self._metas[number], self._layouts[number]
            rows = self._indices[self.cameras.index(camera)][start:stop]
            shards = dict(enumerate(rows.reshape(-1, layout.per_file // layout.per_chunk, 2)))
            shape = [length, *meta["shape"][1:]]
            cameras[camera] = KnownArray({**meta, "shape": shape}, layout, shards)
        reader = EpisodeReader.from_known(
            self._paths[episode], frames, cameras, keep_files_open=True
        )
        return PackedEpisode(reader, arrays, bad, entry["annotations"])

    @classmethod
    def load_or_build(
        cls,
        cache_dir: str | os.PathLike[str],
        episodes: Sequence[EpisodeInfo],
        keys: Sequence[str],
        cameras: Sequence[str] = (),
        *,
        progress: bool = True,
    ) -> NumericPack | None:
        """The pack of `episodes`, `keys` and `cameras` under `cache_dir`: loaded, or built once.

        None (and a warning) where a key's width differs between episodes: they are read
        from disk as without a pack.
        """
        directory = Path(cache_dir) / f"numeric_pack-{pack_key(episodes, keys, cameras)}"
        # a data set that cannot be packed is read from disk, and not read whole again at
        # every start to find that out (its episodes changing make a new key)
        unpackable = directory.with_name(f"{directory.name}.unpackable")
        if not (directory / "index.json").is_file() and not unpackable.is_file():
            # one process (of a job's ranks, or of jobs sharing the cache) builds it; the
            # others wait, then load it. Unlocked (a file system that cannot lock, a holder
            # gone quiet) each builds its own and the first renamed into place is used.
            with exclusive(directory.with_name(f".{directory.name}.lock"),
                           f"waiting for another process building {directory}",
                           timeout_s=BUILD_LOCK_TIMEOUT_S):  # fmt: skip
                if not (directory / "index.json").is_file() and not unpackable.is_file():
                    try:
                        _build(directory, episodes, keys, cameras, progress=progress)
                    except _Ragged as exc:
                        log.warning("no numeric pack: %s", exc)
                        with contextlib.suppress(OSError):  # read-only: found again next time
                            write_text_atomic(unpackable, f"{exc}\n")
                        return None
        if unpackable.is_file():
            log.warning("no numeric pack: %s (found at an earlier start; remove %s to try "
                        "again)", unpackable.read_text().strip(), unpackable)  # fmt: skip
            return None
        return cls(directory, [Path(e.path) for e in episodes])


class _Ragged(ValueError):
    """A key whose width differs between episodes (no flat column holds it)."""


def _mapped(path: Path) -> np.ndarray:
    """The array at `path`, memory-mapped (an empty one, which cannot be, read).

    A plain ndarray over the mapping: a memmap's slices are memmaps too, each made through
    its Python-level `__array_finalize__` (about a tenth of a small sample's reading).
    """
    try:
        return np.asarray(np.load(path, mmap_mode="r"))
    except ValueError:
        return np.load(path)


def _no_zarr() -> None:
    raise ValueError("not packed: read through zarr")


def _stacked(parts: Sequence[np.ndarray], empty: np.ndarray) -> np.ndarray:
    return np.concatenate(parts) if parts else empty


class _Column:
    """One flat file of the pack, an episode's rows at a time."""

    def __init__(self, empty: np.ndarray) -> None:
        self.parts: list[np.ndarray] = []
        self.rows, self.empty = 0, empty

    def append(self, values: np.ndarray) -> list[int]:
        """Add an episode's rows; where they will sit, [start, stop)."""
        self.parts.append(values)
        self.rows += len(values)
        return [self.rows - len(values), self.rows]

    def widths(self) -> list[int]:
        return sorted({part.shape[1] for part in self.parts})

    def save(self, path: Path, dtype: type) -> None:
        np.save(path, _stacked(self.parts, self.empty).astype(dtype, copy=False))


class _Columns:
    """The pack being built, an episode at a time: its flat columns and shared tables."""

    def __init__(self, keys: Sequence[str], cameras: Sequence[str]) -> None:
        self.keys, self.cameras = list(keys), list(cameras)
        self.arrays = [_Column(np.zeros((0, 0), np.float32)) for _ in self.keys]
        self.indices = [_Column(np.zeros((0, 2), np.uint64)) for _ in self.cameras]
        self.identities = _Column(np.zeros((0, 4), np.int64))
        self.listings: dict[tuple[str, ...], int] = {}  # each distinct listing once
        self.metas: dict[str, int] = {}  # each camera metadata once, its length left out

    def entry(self, path: Path) -> dict[str, Any]:
        """One episode read whole into the columns, and its entry; raises where unreadable."""
        names = depends_on(path, self.keys, self.cameras)
        before = identities(path, names)
        if before is None:
            raise OSError("a file vanished while the episode was read")
        reader = EpisodeReader(path)
        read = [read_key(reader, key) for key in self.keys]
        annotations = reader.read_annotations()
        cameras = {}
        for camera in self.cameras:
            with contextlib.suppress(OSError, ValueError, KeyError):  # read at its open instead
                array = VlenBytesArrayReader(path / f"images.{camera}", _no_zarr)
                if (known := array.known(reader.total_frames)) is not None:
                    cameras[camera] = known
        listing = self.listings.setdefault(tuple(names), len(self.listings))
        entry: dict[str, Any] = {"frames": reader.total_frames, "listing": listing,
                                 "identities": self.identities.append(before),
                                 "rows": [], "shapes": [], "annotations": annotations,
                                 "bad": {}, "cameras": {}}  # fmt: skip
        for i, (values, faults) in enumerate(read):
            flat = values.reshape(len(values), int(np.prod(values.shape[1:])))
            entry["rows"].append(self.arrays[i].append(flat))
            entry["shapes"].append(list(values.shape))
            if faults is not None:
                frames = np.flatnonzero(faults[0]).tolist()
                entry["bad"][self.keys[i]] = [frames, [faults[1][f] for f in frames]]
        for camera, known in cameras.items():
            length, *rest = known.meta["shape"]
            shared = json.dumps({**known.meta, "shape": [0, *rest]}, sort_keys=True)
            number = self.metas.setdefault(shared, len(self.metas))
            column = self.indices[self.cameras.index(camera)]
            rows = _stacked([known.shard_indices[f] for f in sorted(known.shard_indices)],
                            column.empty)  # fmt: skip
            entry["cameras"][camera] = [number, length, *column.append(rows)]
        return entry

    def save(self, folder: Path) -> dict[str, Any]:
        """The columns written into `folder`; the tables for index.json."""
        for i, column in enumerate(self.arrays):
            if len(column.widths()) > 1:  # no flat column holds them
                raise _Ragged(
                    f"{self.keys[i]} has rows of {column.widths()} values in different episodes"
                )
            column.save(folder / f"{i}.npy", np.float32)
        for i, column in enumerate(self.indices):
            column.save(folder / f"camera{i}.npy", np.uint64)
        self.identities.save(folder / "identities.npy", np.int64)
        return {"keys": self.keys, "cameras": self.cameras,
                "listings": [list(names) for names in self.listings],
                "metas": [json.loads(meta) for meta in self.metas]}  # fmt: skip


def _build(
    directory: Path,
    episodes: Sequence[EpisodeInfo],
    keys: Sequence[str],
    cameras: Sequence[str],
    *,
    progress: bool,
) -> None:
    """Write the pack into a folder beside `directory` and rename it into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        columns = _Columns(keys, cameras)
        entries: list[dict[str, Any] | None] = []
        skipped: list[str] = []
        for info in tqdm(episodes, desc="numeric pack", unit="episode", disable=not progress):
            try:
                entries.append(columns.entry(Path(info.path)))
            except Exception as exc:  # read at its open, where its fault is reported
                entries.append(None)
                skipped.append(f"{info.path}: {exc}")
        tables = columns.save(partial)
        paths = [str(e.path) for e in episodes]
        index = {"format": PACK_FORMAT, **tables, "paths": paths, "episodes": entries}
        (partial / "index.json").write_text(json.dumps(index))
        partial.chmod(0o755)  # mkdtemp's 0700 would keep the pack from a shared cache's users
        try:
            os.replace(partial, directory)
        except OSError:  # another process (a DDP rank) put its pack there first
            if not (directory / "index.json").is_file():
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    if skipped:
        log.warning("numeric pack %s: %d unreadable episodes left out (read, and refused, at "
                    "their open), e.g. %s", directory, len(skipped), skipped[0])  # fmt: skip
