"""Single items of a 1-D variable-length-bytes zarr v3 array (JPEG frames), read from its files.

Going through zarr's array API costs a millisecond or more per read, even for one small
item; a loader that does that per camera per sample cannot approach the JPEG-decode floor.
For the layouts episodes actually use (vlen-bytes chunks without compression, sharded or
not) this reads the bytes of one frame with one `pread`, after reading each shard's index
or each chunk's item offsets once. Any other layout falls back to zarr.
"""

from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

_MISSING = 2**64 - 1
_U32 = struct.Struct("<I")


class FrameBytesError(ValueError):
    """A frame's bytes are missing or its chunk is corrupt."""


def _chunk_key(meta: dict[str, Any], index: int) -> str:
    encoding = meta.get("chunk_key_encoding", {"name": "default"})
    separator = encoding.get("configuration", {}).get("separator")
    if encoding.get("name") == "v2":
        return str(index)
    return f"c{separator or '/'}{index}"


def _layout(meta: dict[str, Any]) -> tuple[str, int]:
    """("plain" | "sharded" | "zarr", items per chunk or shard file)."""
    if meta.get("data_type") not in ("variable_length_bytes", "bytes") or len(meta["shape"]) != 1:
        return "zarr", 0
    per_file = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    codecs = meta.get("codecs", [])
    if [c["name"] for c in codecs] == ["vlen-bytes"]:
        return "plain", per_file
    if len(codecs) == 1 and codecs[0]["name"] == "sharding_indexed":
        conf = codecs[0]["configuration"]
        index_codecs = [c["name"] for c in conf.get("index_codecs", [])]
        little = conf.get("index_codecs", [{}])[0].get("configuration", {}).get("endian", "little")
        if (
            conf.get("chunk_shape") == [1]
            and [c["name"] for c in conf.get("codecs", [])] == ["vlen-bytes"]
            and index_codecs in (["bytes"], ["bytes", "crc32c"])
            and little == "little"
            and conf.get("index_location", "end") == "end"
        ):
            return "sharded", per_file
    return "zarr", 0


def _pread(path: Path, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    if len(data) != size:
        raise FrameBytesError(f"{path}: truncated (wanted {size} bytes at {offset})")
    return data


class VlenBytesArrayReader:
    """Item `i` of one vlen-bytes array, by byte ranges where the layout allows."""

    def __init__(
        self, array_dir: Path, open_zarr: Callable[[], Any], cache_files: int = 64
    ) -> None:
        self.array_dir = array_dir
        self._open_zarr = open_zarr
        self._zarr: Any = None
        self.meta = json.loads((array_dir / "zarr.json").read_text())
        self.mode, self.per_file = _layout(self.meta)
        self._crc = self.mode == "sharded" and any(
            c["name"] == "crc32c"
            for c in self.meta["codecs"][0]["configuration"].get("index_codecs", [])
        )
        self._index_cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_files = cache_files

    def _file(self, file_index: int) -> Path:
        return self.array_dir / _chunk_key(self.meta, file_index)

    def _cached(self, file_index: int, build: Callable[[], np.ndarray]) -> np.ndarray:
        entry = self._index_cache.get(file_index)
        if entry is None:
            entry = build()
            self._index_cache[file_index] = entry
            if len(self._index_cache) > self._cache_files:
                self._index_cache.popitem(last=False)
        else:
            self._index_cache.move_to_end(file_index)
        return entry

    def _shard_index(self, path: Path) -> np.ndarray:
        size = 16 * self.per_file + (4 if self._crc else 0)
        try:
            total = path.stat().st_size
        except FileNotFoundError:
            raise FrameBytesError(f"{path}: shard file is missing") from None
        if total < size:
            raise FrameBytesError(f"{path}: shard is shorter than its index")
        raw = _pread(path, total - size, size)
        index = np.frombuffer(raw[: 16 * self.per_file], dtype="<u8").reshape(-1, 2)
        valid = index[:, 0] != _MISSING
        if (index[valid].sum(1) > total - size).any():
            raise FrameBytesError(f"{path}: shard index points past the data")
        return index

    def _chunk_offsets(self, path: Path) -> np.ndarray:
        """(offset, length) of each item of an uncompressed vlen-bytes chunk."""
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise FrameBytesError(f"{path}: chunk file is missing") from None
        if len(data) < 4:
            raise FrameBytesError(f"{path}: chunk is truncated")
        (count,) = _U32.unpack_from(data, 0)
        out = np.empty((count, 2), dtype=np.int64)
        pos = 4
        for k in range(count):
            if pos + 4 > len(data):
                raise FrameBytesError(f"{path}: chunk is truncated at item {k}")
            (length,) = _U32.unpack_from(data, pos)
            out[k] = (pos + 4, length)
            pos += 4 + length
        if pos > len(data):
            raise FrameBytesError(f"{path}: chunk is truncated at its last item")
        return out

    def get(self, i: int) -> bytes:
        if self.mode == "zarr":
            if self._zarr is None:
                self._zarr = self._open_zarr()
            return bytes(self._zarr[i : i + 1][0])
        file_index, item = divmod(i, self.per_file)
        path = self._file(file_index)
        if self.mode == "sharded":
            offset, nbytes = (
                int(v) for v in self._cached(file_index, lambda: self._shard_index(path))[item]
            )
            if offset == _MISSING:
                raise FrameBytesError(f"{path}: frame {i} is missing from its shard")
            inner = _pread(path, offset, nbytes)
            if len(inner) < 8 or _U32.unpack_from(inner, 0)[0] != 1:
                raise FrameBytesError(f"{path}: inner chunk of frame {i} is corrupt")
            (length,) = _U32.unpack_from(inner, 4)
            if 8 + length != len(inner):
                raise FrameBytesError(f"{path}: inner chunk of frame {i} is corrupt")
            return inner[8:]
        offsets = self._cached(file_index, lambda: self._chunk_offsets(path))
        if item >= len(offsets):
            raise FrameBytesError(f"{path}: frame {i} is missing from its chunk")
        start, length = (int(v) for v in offsets[item])
        return _pread(path, start, length)
