"""Every episode's numeric arrays in one memory-mapped pack: opening an episode reads none.

A loader worker opens each episode it has not seen (every sample's, once a data set outgrows
its episode cache): it reads each numeric key's `zarr.json` and chunk files, checks every
frame for bad values (bad_values) and reads the annotations, about 2 ms for an eva episode
on a small CPU, more than decoding its sample's JPEGs. A pack does that once for a data set:
the arrays of every episode, one flat file per key (`<n>.npy`, memory-mapped, shared by the
workers through the page cache), with each episode's bad frames and annotations in
`index.json`. `EpisodeDataset.use_numeric_pack(cache_dir)` loads the pack its episodes and
keys name, or builds it (atomically: a folder written beside and renamed into place).

Never stale: each packed episode records the identity (inode, size, modification and change
times) of everything its read depended on: the episode's folder (an entry added or removed
changes it), each key's and the annotations' folders, recursively, every file and folder in
them. The change time is the kernel's: a copy that restores the modification time (`cp -p`,
`rsync -t`) still changes it. An open compares them with the disk; an episode whose files changed,
moved or vanished, whose folder gained a chunk, or whose `total_frames` changed is read from
disk as without a pack (and its faults found as they would be). An episode that could not be
read when the pack was built is not in it: it is read (and refused) at its open.
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
from polymimic_data.store.atomic_files import exclusive, write_text_atomic
from polymimic_data.store.episode_store import EpisodeReader

log = logging.getLogger(__name__)
PACK_FORMAT = 1
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


def _identity(path: str) -> list[int]:
    stat = os.stat(path)
    return [stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]


def depends_on(episode: Path, keys: Sequence[str]) -> list[str]:
    """What a read of `keys` (and the annotations) depends on, relative to the episode.

    Every file and folder under their folders, in walk order.
    """
    names = ["."]  # the episode's folder: a key or the annotations added or removed
    for key in [*keys, ANNOTATIONS]:
        top = episode / key
        if not top.is_dir():
            continue
        for folder, _, files in os.walk(top):
            relative = os.path.relpath(folder, episode)
            names += [relative, *(os.path.join(relative, f) for f in sorted(files))]
    return names


def identities(episode: Path, names: Sequence[str]) -> list[list[int]] | None:
    """Each name's identity now (inode, size, mtime, ctime); None when one has vanished."""
    try:
        return [_identity(os.path.join(episode, name)) for name in names]
    except OSError:
        return None


@dataclass(frozen=True)
class PackedEpisode:
    """What an open needs of an episode, from the pack."""

    arrays: dict[str, np.ndarray]
    bad: BadFrames
    annotations: list[dict[str, Any]]


def pack_key(episodes: Sequence[EpisodeInfo], keys: Sequence[str]) -> str:
    """A key that changes whenever the episodes (paths, hashes, lengths) or the keys do."""
    parts = [str(PACK_FORMAT), *keys, *(f"{e.path}|{e.hash}|{e.total_frames}" for e in episodes)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


BUILD_LOCK_TIMEOUT_S = 1800.0  # a build of 10,000 episodes takes minutes, not half an hour


class NumericPack:
    """A data set's numeric arrays, bad frames and annotations, checked against the disk.

    `get(episode, reader)` gives an episode's PackedEpisode, or None where the disk no longer
    holds what was packed (module docstring). Pickled (to a spawned loader worker) by its
    folder, which the worker maps again.
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
        self._entries: list[dict[str, Any] | None] = index["episodes"]
        self._arrays = [_mapped(self.directory / f"{i}.npy") for i in range(len(self.keys))]

    def __getstate__(self) -> dict[str, Any]:
        return {"directory": self.directory, "paths": self._paths}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["directory"], state["paths"])  # type: ignore[misc]

    def __len__(self) -> int:
        return sum(entry is not None for entry in self._entries)

    def get(self, episode: int, reader: EpisodeReader) -> PackedEpisode | None:
        """Episode number `episode`'s arrays from the pack; None where the disk has changed."""
        entry = self._entries[episode]
        if entry is None or entry["frames"] != reader.total_frames:
            return None
        if identities(self._paths[episode], entry["files"]) != entry["identities"]:
            return None
        arrays = {}
        for i, key in enumerate(self.keys):
            start, stop = entry["rows"][i]
            arrays[key] = self._arrays[i][start:stop].reshape(entry["shapes"][i])
        bad = {}
        for key, (frames, reasons) in entry["bad"].items():
            mask = np.zeros(entry["frames"], dtype=bool)
            mask[frames] = True
            per_frame = [""] * entry["frames"]
            for frame, reason in zip(frames, reasons, strict=True):
                per_frame[frame] = reason
            bad[key] = (mask, per_frame)
        return PackedEpisode(arrays, bad, entry["annotations"])

    @classmethod
    def load_or_build(
        cls,
        cache_dir: str | os.PathLike[str],
        episodes: Sequence[EpisodeInfo],
        keys: Sequence[str],
        *,
        progress: bool = True,
    ) -> NumericPack | None:
        """The pack of `episodes` and `keys` under `cache_dir`: loaded, or built once.

        None (and a warning) where a key's width differs between episodes: they are read
        from disk as without a pack.
        """
        directory = Path(cache_dir) / f"numeric_pack-{pack_key(episodes, keys)}"
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
                        _build(directory, episodes, keys, progress=progress)
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
    """The array at `path`, memory-mapped (an empty one, which cannot be, read)."""
    try:
        return np.load(path, mmap_mode="r")
    except ValueError:
        return np.load(path)


def _build(
    directory: Path, episodes: Sequence[EpisodeInfo], keys: Sequence[str], *, progress: bool
) -> None:
    """Write the pack into a folder beside `directory` and rename it into place."""
    directory.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{directory.name}-", dir=directory.parent))
    try:
        columns: list[list[np.ndarray]] = [[] for _ in keys]
        rows = [0] * len(keys)
        entries: list[dict[str, Any] | None] = []
        skipped: list[str] = []
        for info in tqdm(episodes, desc="numeric pack", unit="episode", disable=not progress):
            path = Path(info.path)
            try:
                files = depends_on(path, keys)
                before = identities(path, files)
                reader = EpisodeReader(path)
                read = [read_key(reader, key) for key in keys]
                annotations = reader.read_annotations()
            except Exception as exc:  # read at its open, where its fault is reported
                entries.append(None)
                skipped.append(f"{path}: {exc}")
                continue
            entry: dict[str, Any] = {"frames": reader.total_frames, "files": files,
                                     "identities": before, "rows": [], "shapes": [],
                                     "annotations": annotations, "bad": {}}  # fmt: skip
            for i, (values, faults) in enumerate(read):
                flat = values.reshape(len(values), int(np.prod(values.shape[1:])))
                entry["rows"].append([rows[i], rows[i] + len(flat)])
                entry["shapes"].append(list(values.shape))
                columns[i].append(flat)
                rows[i] += len(flat)
                if faults is not None:
                    frames = np.flatnonzero(faults[0]).tolist()
                    entry["bad"][keys[i]] = [frames, [faults[1][f] for f in frames]]
            entries.append(entry)
        for i, column in enumerate(columns):
            widths = sorted({c.shape[1] for c in column})
            if len(widths) > 1:  # no flat column holds them
                raise _Ragged(f"{keys[i]} has rows of {widths} values in different episodes")
            stacked = np.concatenate(column) if column else np.zeros((0, 0), np.float32)
            np.save(partial / f"{i}.npy", stacked.astype(np.float32, copy=False))
        paths = [str(e.path) for e in episodes]
        index = {"format": PACK_FORMAT, "keys": list(keys), "paths": paths, "episodes": entries}
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
