"""Whole numeric arrays of an episode, read from their chunk files (see zarr_chunks).

An episode's state and action arrays are small and read whole, once per loader worker.
Through zarr's API that costs about 2 ms an array, 20 ms for an eva episode; from the files
it is a tenth of that. It decides how fast a worker opens an episode it has not seen, which
is every sample once a data set outgrows the worker's episode cache.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from polymimic_data.store.zarr_chunks import (
    MISSING,
    ChunkFileError,
    ChunkLayout,
    chunk_key,
    decode_bytes,
    pread,
    read_layout,
    shard_index,
)


def _fill(meta: dict, dtype: np.dtype) -> np.ndarray | None:
    value = meta.get("fill_value", 0)
    if isinstance(value, str) and value.startswith("0x"):
        return None  # a raw bit pattern: zarr knows how to read it
    try:
        return np.asarray(float(value) if isinstance(value, str) else value).astype(dtype)
    except (TypeError, ValueError):
        return None


def _chunk(
    raw: bytes, layout: ChunkLayout, dtype: np.dtype, shape: tuple[int, ...], path: Path
) -> np.ndarray:
    try:
        values = np.frombuffer(decode_bytes(layout, raw), dtype=dtype)
        return values.reshape(shape)
    except Exception as exc:  # each codec raises its own kind of error
        raise ChunkFileError(f"{path}: chunk is corrupt ({exc})", whole_file=True) from None


def read_rows(array_dir: Path, rows: int) -> np.ndarray | None:
    """The first `rows` rows of a numeric array, or None when its layout needs zarr.

    Chunks never written read as the array's fill value, as zarr reads them.
    """
    meta = json.loads((array_dir / "zarr.json").read_text())
    layout = read_layout(meta)
    if layout.mode == "zarr" or layout.serializer != "bytes":
        return None
    try:
        stored = np.dtype(meta["data_type"]).newbyteorder("<" if layout.endian == "little" else ">")
    except TypeError:
        return None
    fill = _fill(meta, stored)
    if fill is None or stored.kind not in "fiub":
        return None
    shape = list(meta["shape"])
    rows = min(rows, shape[0])
    out = np.empty((rows, *shape[1:]), dtype=stored.newbyteorder("="))
    chunk_shape = (layout.per_chunk, *shape[1:])
    indexes: dict[int, np.ndarray] = {}
    for start in range(0, rows, layout.per_chunk):
        stop = min(start + layout.per_chunk, rows)
        file_index, within = divmod(start, layout.per_file)
        path = array_dir / chunk_key(meta, file_index)
        if not path.exists():
            out[start:stop] = fill
            continue
        if layout.mode == "plain":
            raw = path.read_bytes()
        else:
            if file_index not in indexes:
                indexes[file_index] = shard_index(path, layout)
            offset, nbytes = indexes[file_index][within // layout.per_chunk].tolist()
            if offset == MISSING:
                out[start:stop] = fill
                continue
            raw = pread(path, offset, nbytes)
        out[start:stop] = _chunk(raw, layout, stored, chunk_shape, path)[: stop - start]
    return out
