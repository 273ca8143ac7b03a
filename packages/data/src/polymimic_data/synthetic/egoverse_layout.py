"""Episodes laid out as EgoVerse's own writer lays them out, written through zarr's API.

EgoVerse creates every array with zarr's defaults, which differ from polymimic's writer:
- each array is padded to a multiple of 100 frames (`total_frames` says how many are real)
  and held in one shard file;
- numeric arrays are float32 or float64 with inner chunks of 100 rows, codecs
  `bytes` + `zstd` (level 0);
- JPEG arrays are `variable_length_bytes` with one frame per inner chunk, codecs
  `vlen-bytes` + `zstd` (level 0, no checksum);
- the shard index (`bytes` little-endian + `crc32c`) sits at the end of the file.

polymimic reads these as they are. Tests and benchmarks write them with this module, so
the loader is held to what a real writer produces, not only to its own files.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import zarr
import zarr.dtype

from polymimic_data.store.episode_store import INCOMPLETE_PREFIX

PAD_TO = 100
ROWS_PER_CHUNK = 100


def padded_length(frames: int) -> int:
    """`frames` rounded up to a multiple of PAD_TO, the length EgoVerse pads arrays to."""
    return -(-frames // PAD_TO) * PAD_TO


def _numeric(group: zarr.Group, key: str, values: np.ndarray, length: int) -> dict[str, Any]:
    padded = np.zeros((length, *values.shape[1:]), dtype=values.dtype)
    padded[: len(values)] = values
    group.create_array(
        key, data=padded, chunks=(ROWS_PER_CHUNK, *values.shape[1:]), shards=padded.shape
    )
    return {"dtype": str(values.dtype), "shape": list(values.shape[1:]), "names": None}


def _jpegs(group: zarr.Group, key: str, frames: Sequence[bytes], length: int) -> dict[str, Any]:
    array = group.create_array(
        key, shape=(length,), dtype=zarr.dtype.VariableLengthBytes(), chunks=(1,), shards=(length,)
    )
    array[: len(frames)] = np.array(list(frames), dtype=object)
    return {"dtype": "jpeg", "shape": [], "names": None}


def write_egoverse_episode(
    path: str | os.PathLike[str],
    *,
    embodiment: str,
    fps: float,
    arrays: Mapping[str, np.ndarray],
    images: Mapping[str, Sequence[bytes]],
    annotations: Sequence[Mapping[str, Any]] = (),
    task_name: str = "",
    task_description: str = "",
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write one episode in EgoVerse's layout, atomically (complete at `path` or absent).

    `embodiment` is stored as given (EgoVerse writes upper case); `arrays` keep their
    float dtype.
    """
    path = Path(path)
    if path.exists():
        raise FileExistsError(f"{path} already exists; refusing to overwrite an episode")
    lengths = {k: len(v) for k, v in arrays.items()} | {k: len(v) for k, v in images.items()}
    if not lengths or len(set(lengths.values())) != 1:
        raise ValueError(f"{path}: arrays and cameras must share one length, got {lengths}")
    frames = next(iter(lengths.values()))
    length = padded_length(frames)
    tmp = path.parent / f"{INCOMPLETE_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}"
    try:
        group = zarr.open_group(tmp, mode="w", zarr_format=3)
        features = {k: _numeric(group, k, np.asarray(v), length) for k, v in arrays.items()}
        with warnings.catch_warnings():  # zarr: vlen-bytes has no v3 specification yet
            warnings.filterwarnings("ignore", message=".*does not have a Zarr V3 specification.*")
            for camera, jpegs in images.items():
                features[f"images.{camera}"] = _jpegs(group, f"images.{camera}", jpegs, length)
            if annotations:
                spans = group.create_array(
                    "annotations", shape=(len(annotations),), dtype=zarr.dtype.VariableLengthBytes()
                )
                spans[:] = np.array([json.dumps(dict(a)).encode() for a in annotations], object)
                features["annotations"] = {"dtype": "json", "shape": [], "names": None}
        group.attrs.update(
            {
                "embodiment": embodiment,
                "total_frames": frames,
                "fps": fps,
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
