"""Reading and writing one episode: a zarr v3 group in the EgoVerse layout.

Numeric arrays are flat dot-named keys, time first; images are `images.<camera>`, a
1-D variable-length bytes array holding one JPEG per frame (never zstd-compressed);
language is `annotations`, JSON spans. Readers clamp every array to `total_frames`.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.dtype

from polymimic_data.store.numeric_reader import read_rows
from polymimic_data.store.vlen_bytes_reader import KnownArray, VlenBytesArrayReader
from polymimic_data.store.zarr_chunks import ChunkFileError

EPISODE_SUFFIX = ".zarr"
FRAMES_PER_SHARD = 256
NUMERIC_CHUNK_FRAMES = 4096  # numeric arrays are small: few files, read whole
# Unfinished writes live in hidden siblings; episode walkers skip hidden folders.
INCOMPLETE_PREFIX = ".incomplete-"


@contextmanager
def _vlen_bytes_allowed() -> Iterator[None]:
    # zarr flags variable-length bytes as not yet in the v3 spec; EgoVerse stores JPEGs
    # this way, so we must too.
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
        yield


def _feature(array: np.ndarray, names: Sequence[str] | None = None) -> dict[str, Any]:
    return {
        "dtype": str(array.dtype),
        "shape": list(array.shape[1:]),
        "names": list(names) if names else None,
    }


def _create_jpeg_array(group: zarr.Group, key: str) -> zarr.Array:
    """One JPEG per inner chunk, `FRAMES_PER_SHARD` to a file, never compressed.

    One frame is then one byte range of one file (see vlen_bytes_reader), and a long
    episode is not tens of thousands of files. JPEG bytes do not compress: zstd only costs.
    """
    return group.create_array(
        key,
        shape=(0,),
        dtype=zarr.dtype.VariableLengthBytes(),
        chunks=(1,),
        shards=(FRAMES_PER_SHARD,),
        compressors=None,
    )


class EpisodeWriter:
    """Writes an episode frame by frame (length unknown up front), atomically.

    Everything goes to a hidden sibling folder that resolvers never pick up, and is renamed
    to `path` by `close()`; leaving a `with` block by an exception removes it instead.
    Frames are buffered and flushed a shard at a time, so shards are written whole.
    `names`: channel names of numeric keys, kept in `features` (what a viewer labels the
    channels by), e.g. {"observation.state": ["waist", "shoulder", ...]}.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        embodiment: str,
        fps: float,
        task_name: str = "",
        task_description: str = "",
        metadata: Mapping[str, Any] | None = None,
        names: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(f"{self.path} already exists; refusing to overwrite an episode")
        self._attrs = {
            "embodiment": embodiment,
            "fps": float(fps),
            "task_name": task_name,
            "task_description": task_description,
            **dict(metadata or {}),
        }
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._tmp = self.path.parent / f"{INCOMPLETE_PREFIX}{self.path.name}-{uuid.uuid4().hex[:8]}"
        self._group = zarr.open_group(self._tmp, mode="w", zarr_format=3)
        self._keys: tuple[str, ...] | None = None
        self._buffers: dict[str, list[Any]] = {}
        self._arrays: dict[str, zarr.Array] = {}
        self._features: dict[str, Any] = {}
        self._names = {k: list(v) for k, v in (names or {}).items()}
        self._annotations: list[dict[str, Any]] = []
        self.frames = 0
        self._buffered = 0

    def __enter__(self) -> EpisodeWriter:
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def extend(
        self,
        arrays: Mapping[str, np.ndarray] | None = None,
        images: Mapping[str, Sequence[bytes]] | None = None,
    ) -> None:
        """Add n frames: each array is (n, ...) float; each camera has n JPEGs."""
        columns: dict[str, Any] = {k: np.asarray(v) for k, v in (arrays or {}).items()}
        columns |= {f"images.{c}": list(v) for c, v in (images or {}).items()}
        keys = tuple(sorted(columns))
        if self._keys is None:
            self._keys = keys
            self._buffers = {k: [] for k in keys}
        elif keys != self._keys:
            raise ValueError(
                f"{self.path}: every call must give the same keys; first {list(self._keys)}, "
                f"now {list(keys)}"
            )
        lengths = {k: len(v) for k, v in columns.items()}
        if len(set(lengths.values())) > 1:
            raise ValueError(f"{self.path}: arrays differ in length: {lengths}")
        for key, value in columns.items():
            if not key.startswith("images.") and value.dtype.kind != "f":
                raise TypeError(
                    f"{self.path}: array {key!r} must be float32/float64, got {value.dtype}"
                )
            self._buffers[key].append(value)
        self._buffered += next(iter(lengths.values()), 0)
        if self._buffered >= FRAMES_PER_SHARD:
            self._flush()

    def append(
        self,
        arrays: Mapping[str, np.ndarray] | None = None,
        images: Mapping[str, bytes] | None = None,
    ) -> None:
        """Add one frame: each array is that frame's value; each camera one JPEG."""
        self.extend(
            {k: np.asarray(v)[None] for k, v in (arrays or {}).items()},
            {c: [b] for c, b in (images or {}).items()},
        )

    def annotate(self, text: str, start_idx: int, end_idx: int) -> None:
        """A language span over frames [start_idx, end_idx)."""
        self._annotations.append({"text": text, "start_idx": start_idx, "end_idx": end_idx})

    def _flush(self) -> None:
        if not self._buffered:
            return
        with _vlen_bytes_allowed():
            for key, parts in self._buffers.items():
                if key.startswith("images."):
                    block = np.empty(sum(len(p) for p in parts), dtype=object)
                    block[:] = [b for p in parts for b in p]
                    if key not in self._arrays:
                        self._arrays[key] = _create_jpeg_array(self._group, key)
                        self._features[key] = {"dtype": "jpeg", "shape": [], "names": None}
                else:
                    block = np.concatenate(parts)
                    if key not in self._arrays:
                        self._arrays[key] = self._group.create_array(
                            key,
                            shape=(0, *block.shape[1:]),
                            dtype=block.dtype,
                            chunks=(NUMERIC_CHUNK_FRAMES, *block.shape[1:]),
                        )
                        width = int(np.prod(block.shape[1:]))
                        named = self._names.get(key)
                        if named is not None and len(named) != width:
                            raise ValueError(
                                f"{self.path}: names for {key!r} has {len(named)} channels, "
                                f"its arrays {width}"
                            )
                        self._features[key] = _feature(block, named)
                self._arrays[key].append(block)
                parts.clear()
        self.frames += self._buffered
        self._buffered = 0

    def close(self) -> Path:
        """Flush, write the attributes, and move the episode into place."""
        try:
            self._flush()
            if self.frames == 0:
                raise ValueError(f"{self.path}: an episode needs at least one frame")
            if self._annotations:
                with _vlen_bytes_allowed():
                    ann = self._group.create_array(
                        "annotations",
                        shape=(len(self._annotations),),
                        dtype=zarr.dtype.VariableLengthBytes(),
                    )
                    ann[:] = np.array(
                        [json.dumps(a).encode() for a in self._annotations], dtype=object
                    )
                self._features["annotations"] = {"dtype": "json", "shape": [], "names": None}
            self._group.attrs.update(
                self._attrs | {"total_frames": self.frames, "features": self._features}
            )
            os.rename(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise
        return self.path

    def abort(self) -> None:
        """Drop everything written so far."""
        shutil.rmtree(self._tmp, ignore_errors=True)


def write_episode(
    path: str | os.PathLike[str],
    *,
    embodiment: str,
    fps: float,
    arrays: Mapping[str, np.ndarray] | None = None,
    images: Mapping[str, Sequence[bytes]] | None = None,
    annotations: Sequence[Mapping[str, Any]] = (),
    task_name: str = "",
    task_description: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write a whole episode atomically: it appears at `path` complete or not at all.

    `arrays` maps dot-named keys to time-first float arrays; `images` maps camera names
    to one JPEG per frame. Every array must have the same length, which becomes
    `total_frames`.
    """
    if not arrays and not images:
        raise ValueError(f"{path}: an episode needs at least one array")
    with EpisodeWriter(
        path,
        embodiment=embodiment,
        fps=fps,
        task_name=task_name,
        task_description=task_description,
        metadata=metadata,
    ) as writer:
        writer.extend(arrays, images)
        for span in annotations:
            writer.annotate(str(span["text"]), int(span["start_idx"]), int(span["end_idx"]))
    return writer.path


class EpisodeReader:
    """One episode opened once: its attributes, clamped arrays and JPEG frames."""

    def __init__(self, path: str | os.PathLike[str], *, keep_files_open: bool = False) -> None:
        """Open the episode at `path` (its group's attributes read now).

        `keep_files_open`: its JPEG frames read through files it keeps open, for a reader of
        many (a training loader's; see VlenBytesArrayReader).
        """
        attrs = _group_attributes(Path(path))
        self._open(Path(path), attrs, int(attrs["total_frames"]), keep_files_open)

    def _open(
        self, path: Path, attrs: dict[str, Any] | None, total_frames: int, keep_open: bool
    ) -> None:
        self.path, self._attrs, self.total_frames = path, attrs, total_frames
        self._keep_open = keep_open
        self._zarr_group: Any = None  # opened only when an array needs zarr's own reader
        self._arrays: dict[str, Any] = {}
        self._jpeg_readers: dict[str, VlenBytesArrayReader] = {}

    @classmethod
    def from_known(
        cls,
        path: str | os.PathLike[str],
        total_frames: int,
        cameras: Mapping[str, KnownArray],
        *,
        keep_files_open: bool = False,
    ) -> EpisodeReader:
        """An episode opened from what a numeric pack kept of it: no file is read.

        `cameras`: each camera's image array as it was packed; a camera not named is read
        from its files at first use, and `attrs` from the group's `zarr.json` when asked.
        `keep_files_open` as the constructor's.
        """
        reader = cls.__new__(cls)
        path = path if isinstance(path, Path) else Path(path)  # (a Path made again costs 3 us)
        reader._open(path, None, total_frames, keep_files_open)
        for camera, known in cameras.items():
            reader._jpeg_readers[camera] = reader._jpeg_reader(camera, known)
        return reader

    @property
    def attrs(self) -> dict[str, Any]:
        """The group's attributes (`embodiment`, `total_frames`, `fps`, `features`, ...)."""
        if self._attrs is None:
            self._attrs = _group_attributes(self.path)
        return self._attrs

    @property
    def hash(self) -> str:
        return episode_hash(self.path)

    @property
    def embodiment(self) -> str:
        return str(self.attrs["embodiment"]).lower()

    @property
    def _group(self) -> Any:
        if self._zarr_group is None:
            try:
                self._zarr_group = zarr.open_group(self.path, mode="r")
            except Exception as exc:
                raise ValueError(f"{self.path}: cannot open as a zarr group ({exc})") from exc
        return self._zarr_group

    def keys(self) -> list[str]:
        return sorted(self._group.array_keys())

    def _array(self, key: str) -> Any:
        arr = self._arrays.get(key)
        if arr is None:
            try:
                arr = self._group[key]
            except KeyError:
                raise KeyError(f"{self.path}: key {key!r} is missing") from None
            self._arrays[key] = arr
        return arr

    def read_numeric(self, key: str) -> np.ndarray:
        """The whole array, clamped to `total_frames`, as float32.

        Read from its chunk files where the layout allows, else through zarr.
        """
        try:
            values = read_rows(self.path / key, self.total_frames)
        except FileNotFoundError:
            raise KeyError(f"{self.path}: key {key!r} is missing") from None
        if values is None:
            values = self._array(key)[: self.total_frames]
        return np.asarray(values, dtype=np.float32)

    def read_jpeg(self, camera: str, frame: int) -> bytes:
        """The JPEG bytes of one frame of one camera, by byte range where possible."""
        reader = self._jpeg_readers.get(camera)
        if reader is None:
            reader = self._jpeg_readers[camera] = self._jpeg_reader(camera)
        if not 0 <= frame < self.total_frames:
            raise IndexError(f"{self.path}: frame {frame} outside 0..{self.total_frames - 1}")
        if reader.mode != "zarr":
            return reader.get(frame)
        with _vlen_bytes_allowed():
            return reader.get(frame)

    def _jpeg_reader(self, camera: str, known: KnownArray | None = None) -> VlenBytesArrayReader:
        key = f"images.{camera}"
        if known is None and not (self.path / key / "zarr.json").exists():
            raise KeyError(f"{self.path}: key {key!r} is missing")
        try:
            return VlenBytesArrayReader(
                self.path / key, lambda: self._array(key), known=known, keep_open=self._keep_open
            )
        except (OSError, ValueError, KeyError) as exc:
            raise ChunkFileError(
                f"{self.path / key}: unreadable array metadata ({exc})", whole_file=True
            ) from exc

    def read_jpegs(self, camera: str, start: int, stop: int) -> list[bytes]:
        """JPEG bytes of frames [start, stop) of one camera."""
        return [self.read_jpeg(camera, f) for f in range(start, min(stop, self.total_frames))]

    def read_annotations(self) -> list[dict[str, Any]]:
        array_dir = self.path / "annotations"
        if not (array_dir / "zarr.json").exists():
            return []
        reader = VlenBytesArrayReader(array_dir, lambda: self._array("annotations"))
        with _vlen_bytes_allowed():
            return [json.loads(reader.get(i)) for i in range(int(reader.meta["shape"][0]))]


def _group_attributes(path: Path) -> dict[str, Any]:
    """An episode group's attributes; ValueError naming the file when it is not one."""
    try:
        meta = json.loads((path / "zarr.json").read_text())
        if meta.get("node_type") != "group":
            raise ValueError("zarr.json is not a group's")
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot open as a zarr group ({exc})") from exc
    attrs = dict(meta.get("attributes", {}))
    for field in ("embodiment", "total_frames"):
        if field not in attrs:
            raise ValueError(f"{path}: attribute {field!r} is missing")
    return attrs


def episode_hash(path: str | os.PathLike[str]) -> str:
    """An episode's hash: its folder's name without the `.zarr` suffix."""
    name = Path(path).name
    return name[: -len(EPISODE_SUFFIX)] if name.endswith(EPISODE_SUFFIX) else name
