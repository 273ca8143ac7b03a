"""Single items of a 1-D variable-length-bytes zarr v3 array (JPEG frames), read from its files.

Going through zarr's array API costs a millisecond or more per read, even for one small
item; a loader that does that per camera per sample cannot approach the JPEG-decode floor.
This reader covers the layouts real writers make:

- polymimic's own: one frame per inner chunk, uncompressed, 256 frames to a shard;
- EgoVerse's and zarr's defaults: one shard file per array, one frame per inner chunk,
  inner codecs `vlen-bytes` + `zstd` (level 0), index codecs `bytes` + `crc32c`;
- plain chunked arrays, one or many frames to a chunk file.

Inner codec chains may hold any of zstd, gzip, blosc and crc32c (checksums are verified);
the shard index may carry a crc32c and sit at either end. A frame costs one `pread` and
one decompression of its own inner chunk, after each shard's index (or each uncompressed
chunk's item offsets) is read once. Any other layout falls back to zarr.
"""

from __future__ import annotations

import json
import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google_crc32c
import numcodecs
import numpy as np

_MISSING = 2**64 - 1
_U32 = struct.Struct("<I")
_SINGLE = struct.Struct("<II")  # a vlen-bytes chunk's item count, then its first item's length
_VLEN = numcodecs.VLenBytes()


class FrameBytesError(ValueError):
    """A frame's bytes are missing or corrupt.

    `whole_file` says the file itself is broken (missing, truncated, a bad index): every
    frame it holds is lost, not only this one.
    """

    def __init__(self, message: str, *, whole_file: bool = False) -> None:
        super().__init__(message)
        self.whole_file = whole_file


def _strip_crc32c(data: bytes) -> bytes:
    if len(data) < 4:
        raise ValueError("too short to hold its crc32c checksum")
    body, (stored,) = data[:-4], _U32.unpack_from(data, len(data) - 4)
    if google_crc32c.value(body) != stored:
        raise ValueError("crc32c checksum mismatch")
    return body


# zarr v3 bytes-to-bytes codecs by name: a decoder for each. Decompressors need no
# configuration to decode (level, shuffle and typesize only matter when encoding).
_BYTES_DECODERS: dict[str, Callable[[], Callable[[bytes], bytes]]] = {
    "zstd": lambda: numcodecs.Zstd().decode,
    "gzip": lambda: numcodecs.GZip().decode,
    "blosc": lambda: numcodecs.Blosc().decode,
    "crc32c": lambda: _strip_crc32c,
}


@dataclass(frozen=True)
class _Layout:
    """How the items of an array sit in its files; mode "zarr" when this reader cannot tell."""

    mode: str  # "plain" | "sharded" | "zarr"
    per_file: int = 0  # items per chunk file (plain) or shard file (sharded)
    per_chunk: int = 1  # items per inner chunk (sharded)
    decoders: tuple[Callable[[bytes], bytes], ...] = ()  # applied in this order when reading
    index_crc: bool = False
    index_at_start: bool = False


def _bytes_decoders(codecs: list[dict[str, Any]]) -> tuple[Callable[[bytes], bytes], ...] | None:
    """Decoders for `["vlen-bytes", *bytes-to-bytes]`, last codec first; None if unsupported."""
    names = [c.get("name") for c in codecs]
    if not names or names[0] != "vlen-bytes" or any(n not in _BYTES_DECODERS for n in names[1:]):
        return None
    return tuple(_BYTES_DECODERS[str(n)]() for n in reversed(names[1:]))


def _little_endian_index(index_codecs: list[dict[str, Any]]) -> bool | None:
    """Whether the shard index carries a crc32c; None when its codecs are not bytes(+crc32c)."""
    names = [c.get("name") for c in index_codecs]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        return None
    if index_codecs[0].get("configuration", {}).get("endian", "little") != "little":
        return None
    return names == ["bytes", "crc32c"]


def read_layout(meta: dict[str, Any]) -> _Layout:
    """The layout of a vlen-bytes array from its zarr.json metadata."""
    if meta.get("data_type") not in ("variable_length_bytes", "bytes") or len(meta["shape"]) != 1:
        return _Layout("zarr")
    per_file = int(meta["chunk_grid"]["configuration"]["chunk_shape"][0])
    codecs = meta.get("codecs", [])
    if codecs and codecs[0]["name"] != "sharding_indexed":
        decoders = _bytes_decoders(codecs)
        return _Layout("zarr") if decoders is None else _Layout("plain", per_file, 1, decoders)
    if len(codecs) != 1:
        return _Layout("zarr")
    conf = codecs[0]["configuration"]
    decoders = _bytes_decoders(conf.get("codecs", []))
    index_crc = _little_endian_index(conf.get("index_codecs", []))
    per_chunk = int(conf.get("chunk_shape", [0])[0])
    if decoders is None or index_crc is None or per_chunk < 1 or per_file % per_chunk:
        return _Layout("zarr")
    at_start = conf.get("index_location", "end") == "start"
    return _Layout("sharded", per_file, per_chunk, decoders, index_crc, at_start)


def _chunk_key(meta: dict[str, Any], index: int) -> str:
    encoding = meta.get("chunk_key_encoding", {"name": "default"})
    separator = encoding.get("configuration", {}).get("separator")
    if encoding.get("name") == "v2":
        return str(index)
    return f"c{separator or '/'}{index}"


def _pread(path: Path, offset: int, size: int) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise FrameBytesError(f"{path}: file is missing", whole_file=True) from None
    try:
        data = os.pread(fd, size, offset)
    finally:
        os.close(fd)
    if len(data) != size:
        raise FrameBytesError(
            f"{path}: truncated (wanted {size} bytes at {offset})", whole_file=True
        )
    return data


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise FrameBytesError(f"{path}: file is missing", whole_file=True) from None


class VlenBytesArrayReader:
    """Item `i` of one vlen-bytes array, by byte ranges where the layout allows."""

    def __init__(
        self, array_dir: Path, open_zarr: Callable[[], Any], cache_files: int = 64
    ) -> None:
        self.array_dir = array_dir
        self._open_zarr = open_zarr
        self._zarr: Any = None
        self.meta = json.loads((array_dir / "zarr.json").read_text())
        self.layout = read_layout(self.meta)
        self._index_cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cache_files = cache_files
        self._paths: dict[int, Path] = {}
        # Inner chunks of several items, decoded: the next frame is usually in the same one.
        self._chunk_cache: OrderedDict[tuple[int, int], np.ndarray | list[bytes]] = OrderedDict()

    @property
    def mode(self) -> str:
        return self.layout.mode

    def _file(self, file_index: int) -> Path:
        path = self._paths.get(file_index)
        if path is None:
            path = self._paths[file_index] = self.array_dir / _chunk_key(self.meta, file_index)
        return path

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
        """(offset, nbytes) of each inner chunk of a shard; checked against the file."""
        chunks = self.layout.per_file // self.layout.per_chunk
        size = 16 * chunks + (4 if self.layout.index_crc else 0)
        total = _file_size(path)
        if total < size:
            raise FrameBytesError(f"{path}: shard is shorter than its index", whole_file=True)
        raw = _pread(path, 0 if self.layout.index_at_start else total - size, size)
        if self.layout.index_crc:
            try:
                raw = _strip_crc32c(raw)
            except ValueError as exc:
                raise FrameBytesError(f"{path}: shard index: {exc}", whole_file=True) from None
        index = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
        valid = index[:, 0] != _MISSING
        data_end = total if self.layout.index_at_start else total - size
        if (index[valid].sum(1) > data_end).any():
            raise FrameBytesError(f"{path}: shard index points past the data", whole_file=True)
        return index

    def _chunk_offsets(self, path: Path) -> np.ndarray:
        """(offset, length) of each item of an uncompressed vlen-bytes chunk."""
        data = _pread(path, 0, _file_size(path))
        if len(data) < 4:
            raise FrameBytesError(f"{path}: chunk is truncated", whole_file=True)
        (count,) = _U32.unpack_from(data, 0)
        out = np.empty((count, 2), dtype=np.int64)
        pos = 4
        for k in range(count):
            if pos + 4 > len(data):
                raise FrameBytesError(f"{path}: chunk is truncated at item {k}", whole_file=True)
            (length,) = _U32.unpack_from(data, pos)
            out[k] = (pos + 4, length)
            pos += 4 + length
        if pos > len(data):
            raise FrameBytesError(f"{path}: chunk is truncated at its last item", whole_file=True)
        return out

    def _decode(self, raw: bytes, path: Path, what: str) -> np.ndarray | list[bytes]:
        """The items of one encoded chunk: bytes-to-bytes codecs undone, then vlen-bytes."""
        try:
            for decode in self.layout.decoders:
                raw = decode(raw)
            # One item (a frame per inner chunk): its bytes follow an 8-byte header.
            if (
                self.layout.per_chunk == 1
                and len(raw) >= 8
                and _SINGLE.unpack_from(raw)
                == (
                    1,
                    len(raw) - 8,
                )
            ):
                return [raw[8:]]
            return _VLEN.decode(raw)
        except Exception as exc:  # each codec raises its own kind of error
            raise FrameBytesError(f"{path}: {what} is corrupt ({exc})") from None

    def _decoded_chunk(
        self, key: tuple[int, int], read: Callable[[], bytes], path: Path, what: str
    ) -> np.ndarray | list[bytes]:
        items = self._chunk_cache.get(key)
        if items is None:
            items = self._decode(read(), path, what)
            self._chunk_cache[key] = items
            if len(self._chunk_cache) > 4:
                self._chunk_cache.popitem(last=False)
        return items

    def _sharded(self, i: int) -> bytes:
        file_index, item = divmod(i, self.layout.per_file)
        path = self._file(file_index)
        chunk, within = divmod(item, self.layout.per_chunk)
        index = self._cached(file_index, lambda: self._shard_index(path))
        offset, nbytes = index[chunk].tolist()
        if offset == _MISSING:
            raise FrameBytesError(f"{path}: the frame is missing from its shard")
        what = "the frame's inner chunk"
        if self.layout.per_chunk == 1:
            items = self._decode(_pread(path, offset, nbytes), path, what)
        else:
            read = lambda: _pread(path, offset, nbytes)  # noqa: E731
            items = self._decoded_chunk((file_index, chunk), read, path, what)
        if len(items) != self.layout.per_chunk:
            raise FrameBytesError(
                f"{path}: {what} holds {len(items)} items, not {self.layout.per_chunk}"
            )
        return bytes(items[within])

    def _plain(self, i: int) -> bytes:
        file_index, item = divmod(i, self.layout.per_file)
        path = self._file(file_index)
        if self.layout.decoders:
            read = lambda: _pread(path, 0, _file_size(path))  # noqa: E731
            items = self._decoded_chunk((file_index, 0), read, path, "chunk")
            if item >= len(items):
                raise FrameBytesError(f"{path}: the frame is missing from its chunk")
            return bytes(items[item])
        offsets = self._cached(file_index, lambda: self._chunk_offsets(path))
        if item >= len(offsets):
            raise FrameBytesError(f"{path}: the frame is missing from its chunk")
        start, length = offsets[item].tolist()
        return _pread(path, start, length)

    def get(self, i: int) -> bytes:
        if self.mode == "sharded":
            return self._sharded(i)
        if self.mode == "plain":
            return self._plain(i)
        if self._zarr is None:
            self._zarr = self._open_zarr()
        return bytes(self._zarr[i : i + 1][0])
