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

EPISODE_SUFFIX = ".zarr"
_TMP_PREFIX = ".incomplete-"


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
    path = Path(path)
    arrays = arrays or {}
    images = images or {}
    lengths = {k: len(v) for k, v in arrays.items()} | {
        f"images.{c}": len(v) for c, v in images.items()
    }
    if not lengths:
        raise ValueError(f"{path}: an episode needs at least one array")
    if len(set(lengths.values())) != 1:
        raise ValueError(f"{path}: arrays differ in length: {lengths}")
    total_frames = next(iter(lengths.values()))
    if total_frames == 0:
        raise ValueError(f"{path}: an episode needs at least one frame")
    if path.exists():
        raise FileExistsError(f"{path} already exists; refusing to overwrite an episode")

    tmp = path.parent / f"{_TMP_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}"
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        group = zarr.open_group(tmp, mode="w", zarr_format=3)
        features: dict[str, Any] = {}
        for key, value in arrays.items():
            value = np.asarray(value)
            if value.dtype.kind != "f":
                raise TypeError(f"{path}: array {key!r} must be float32/float64, got {value.dtype}")
            group.create_array(key, data=value, chunks=value.shape)
            features[key] = _feature(value)
        with _vlen_bytes_allowed():
            for camera, frames in images.items():
                key = f"images.{camera}"
                arr = group.create_array(
                    key,
                    shape=(len(frames),),
                    dtype=zarr.dtype.VariableLengthBytes(),
                    chunks=(len(frames),),
                    compressors=None,  # JPEG bytes do not compress; zstd only costs time
                )
                arr[:] = np.array(list(frames), dtype=object)
                features[key] = {"dtype": "jpeg", "shape": [], "names": None}
            if annotations:
                ann = group.create_array(
                    "annotations",
                    shape=(len(annotations),),
                    dtype=zarr.dtype.VariableLengthBytes(),
                    chunks=(len(annotations),),
                )
                ann[:] = np.array([json.dumps(dict(a)).encode() for a in annotations], dtype=object)
                features["annotations"] = {"dtype": "json", "shape": [], "names": None}
        group.attrs.update(
            {
                "embodiment": embodiment,
                "total_frames": int(total_frames),
                "fps": float(fps),
                "task_name": task_name,
                "task_description": task_description,
                "features": features,
                **dict(metadata or {}),
            }
        )
        os.rename(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


class EpisodeReader:
    """One episode opened once: its attributes, clamped arrays and JPEG frames."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            self._group = zarr.open_group(self.path, mode="r")
        except Exception as exc:
            raise ValueError(f"{self.path}: cannot open as a zarr group ({exc})") from exc
        self.attrs: dict[str, Any] = dict(self._group.attrs)
        for field in ("embodiment", "total_frames"):
            if field not in self.attrs:
                raise ValueError(f"{self.path}: attribute {field!r} is missing")
        self.total_frames = int(self.attrs["total_frames"])
        self._arrays: dict[str, Any] = {}

    @property
    def hash(self) -> str:
        return episode_hash(self.path)

    @property
    def embodiment(self) -> str:
        return str(self.attrs["embodiment"]).lower()

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
        """The whole array, clamped to `total_frames`, as float32."""
        return np.asarray(self._array(key)[: self.total_frames], dtype=np.float32)

    def read_jpegs(self, camera: str, start: int, stop: int) -> list[bytes]:
        """JPEG bytes of frames [start, stop) of one camera."""
        with _vlen_bytes_allowed():
            values = self._array(f"images.{camera}")[start:stop]
        return [bytes(v) for v in values]

    def read_annotations(self) -> list[dict[str, Any]]:
        if "annotations" not in self._group.array_keys():
            return []
        with _vlen_bytes_allowed():
            raw = self._array("annotations")[:]
        return [json.loads(bytes(v)) for v in raw]


def episode_hash(path: str | os.PathLike[str]) -> str:
    name = Path(path).name
    return name[: -len(EPISODE_SUFFIX)] if name.endswith(EPISODE_SUFFIX) else name


def is_incomplete(path: Path) -> bool:
    return path.name.startswith(_TMP_PREFIX)
