"""zarr v3 chunk files read directly: the layouts and codec chains real writers use.

zarr's array API costs a millisecond or more per read however small, which a loader
reading a frame per camera per sample, or ten arrays per episode it opens, cannot afford.
This module reads an array's `zarr.json` into a ChunkLayout the readers (vlen_bytes_reader
for JPEG frames, numeric_reader for whole numeric arrays) fetch bytes by, or says "zarr"
when a layout is one it does not know:

- chunks split along time only (every other axis whole), regular grid, default or v2
  chunk keys;
- a serializer (`bytes`, either endian, or `vlen-bytes`), then bytes-to-bytes codecs among
  zstd, gzip, blosc and crc32c (checksums verified), in plain chunk files or in shards
  (`sharding_indexed`, index `bytes` little-endian with or without crc32c, at either end).
"""

from __future__ import annotations

import errno
import os
import struct
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import google_crc32c
import numcodecs
import numpy as np

from polymimic_data.store.atomic_files import stat_identity

MISSING = 2**64 - 1  # a shard index entry for an inner chunk never written
_U32 = struct.Struct("<I")


class ChunkFileError(ValueError):
    """A chunk's bytes are missing or corrupt.

    `whole_file` says the file itself is broken (missing, truncated, a bad index): every
    frame it holds is lost, not only the one asked for.
    """

    def __init__(self, message: str, *, whole_file: bool = False) -> None:
        super().__init__(message)
        self.whole_file = whole_file


def strip_crc32c(data: bytes) -> bytes:
    """A chunk's bytes without their trailing crc32c checksum, once it is verified."""
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
    "crc32c": lambda: strip_crc32c,
}


@dataclass(frozen=True)
class ChunkLayout:
    """How an array's rows sit in its files; mode "zarr" when this module cannot tell."""

    mode: str  # "plain" | "sharded" | "zarr"
    serializer: str = ""  # "bytes" | "vlen-bytes"
    endian: str = "little"  # of the `bytes` serializer
    per_file: int = 0  # rows per chunk file (plain) or shard file (sharded)
    per_chunk: int = 1  # rows per inner chunk (sharded)
    decoders: tuple[Callable[[bytes], bytes], ...] = ()  # applied in this order when reading
    index_crc: bool = False
    index_at_start: bool = False


def _serializer_and_decoders(
    codecs: list[dict[str, Any]],
) -> tuple[str, str, tuple[Callable[[bytes], bytes], ...]] | None:
    names = [str(c.get("name")) for c in codecs]
    if not names or names[0] not in ("bytes", "vlen-bytes"):
        return None
    if any(n not in _BYTES_DECODERS for n in names[1:]):
        return None
    endian = (codecs[0].get("configuration") or {}).get("endian", "little")
    return names[0], endian, tuple(_BYTES_DECODERS[n]() for n in reversed(names[1:]))


def _index_crc(index_codecs: list[dict[str, Any]]) -> bool | None:
    """Whether the shard index carries a crc32c; None when its codecs are not bytes(+crc32c)."""
    names = [c.get("name") for c in index_codecs]
    if names not in (["bytes"], ["bytes", "crc32c"]):
        return None
    if index_codecs[0].get("configuration", {}).get("endian", "little") != "little":
        return None
    return names == ["bytes", "crc32c"]


def read_layout(meta: dict[str, Any]) -> ChunkLayout:
    """The layout of an array from its zarr.json metadata."""
    shape = list(meta.get("shape", []))
    grid = meta.get("chunk_grid", {})
    if not shape or grid.get("name") != "regular":
        return ChunkLayout("zarr")
    chunk_shape = list(grid["configuration"]["chunk_shape"])
    if chunk_shape[1:] != shape[1:]:  # split along time only
        return ChunkLayout("zarr")
    codecs = meta.get("codecs", [])
    if codecs and codecs[0]["name"] != "sharding_indexed":
        chain = _serializer_and_decoders(codecs)
        if chain is None:
            return ChunkLayout("zarr")
        serializer, endian, decoders = chain
        return ChunkLayout("plain", serializer, endian, chunk_shape[0], chunk_shape[0], decoders)
    if len(codecs) != 1:
        return ChunkLayout("zarr")
    conf = codecs[0]["configuration"]
    chain = _serializer_and_decoders(conf.get("codecs", []))
    index_crc = _index_crc(conf.get("index_codecs", []))
    inner = list(conf.get("chunk_shape", [0]))
    per_chunk = int(inner[0])
    if chain is None or index_crc is None or inner[1:] != shape[1:] or per_chunk < 1:
        return ChunkLayout("zarr")
    if chunk_shape[0] % per_chunk:
        return ChunkLayout("zarr")
    serializer, endian, decoders = chain
    at_start = conf.get("index_location", "end") == "start"
    return ChunkLayout(
        "sharded", serializer, endian, chunk_shape[0], per_chunk, decoders, index_crc, at_start
    )


def chunk_key(meta: dict[str, Any], index: int) -> str:
    """The file name of chunk (or shard) `index` along time; 0 along every other axis."""
    coords = [str(index)] + ["0"] * (len(meta["shape"]) - 1)
    encoding = meta.get("chunk_key_encoding", {"name": "default"})
    separator = encoding.get("configuration", {}).get("separator")
    if encoding.get("name") == "v2":
        return (separator or ".").join(coords)
    return (separator or "/").join(["c", *coords])


def pread(path: Path, offset: int, size: int) -> bytes:
    """`size` bytes of `path` at `offset`; a whole-file ChunkFileError if missing or short."""
    fd = _open(path)
    try:
        return _pread_fd(fd, path, offset, size)
    finally:
        os.close(fd)


def _open(path: Path) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise ChunkFileError(f"{path}: file is missing", whole_file=True) from None


def _pread_fd(fd: int, path: Path, offset: int, size: int) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise ChunkFileError(
            f"{path}: truncated (wanted {size} bytes at {offset})", whole_file=True
        )
    return data


KEPT_OPEN = 64  # files each thread keeps open for pread_kept (0 or less: one)


class _Files(OrderedDict[Hashable, int]):
    """One thread's files kept open (descriptors), closed when it ends (its local dropped)."""

    def close_all(self) -> None:
        while self:
            os.close(self.popitem(last=False)[1])

    def __del__(self) -> None:
        self.close_all()


class _KeptOpen(threading.local):
    """Files kept open by pread_kept, per thread, the least recently read first."""

    def __init__(self) -> None:
        self.files = _Files()


_KEPT = _KeptOpen()


def pread_kept(
    owner: object, index: int, path: Path, offset: int, size: int, seen: dict[int, list[int]]
) -> bytes:
    """`pread` through file `index` of `owner` kept open: one syscall, not an open and a close.

    `owner` (a reader's token, its own for its life) and `index` (its file's number) name
    the descriptor; each thread keeps its own KEPT_OPEN, the least recently read closed
    first, and closes them when it ends. `seen`: the owner's identity of each file it has
    opened (atomic_files.stat_identity, as the numeric pack and the resolver's index compare
    files): a file opened again (after its descriptor was closed) that is another file now,
    replaced or rewritten on disk, is refused (a whole-file ChunkFileError) rather than read
    by the offsets the owner took from the one before; a reader made later (the episode
    opened again) reads it. Otherwise errors as pread's.
    """
    files = _KEPT.files
    key = (owner, index)
    fd = files.get(key)
    if fd is None:
        fd = _open_kept(files, path)
        try:
            identity = stat_identity(os.fstat(fd))
            if seen.setdefault(index, identity) != identity:
                raise ChunkFileError(
                    f"{path}: replaced on disk since its episode was opened (its frames' "
                    "offsets are the old file's); open the episode again",
                    whole_file=True,
                )
        except BaseException:
            os.close(fd)
            raise
        while len(files) >= max(1, KEPT_OPEN):
            os.close(files.popitem(last=False)[1])
        files[key] = fd
    else:
        files.move_to_end(key)
    return _pread_fd(fd, path, offset, size)


def _open_kept(files: _Files, path: Path) -> int:
    """A descriptor of `path`; where the process has none left, this thread's kept ones freed."""
    try:
        return _open(path)
    except OSError as exc:
        if exc.errno not in (errno.EMFILE, errno.ENFILE) or not files:
            raise
    files.close_all()
    return _open(path)  # once more: as it fails now, it fails


def file_size(path: Path) -> int:
    """The size of `path` in bytes; a whole-file ChunkFileError if it is missing."""
    try:
        return path.stat().st_size
    except FileNotFoundError:
        raise ChunkFileError(f"{path}: file is missing", whole_file=True) from None


def shard_index(path: Path, layout: ChunkLayout) -> np.ndarray:
    """(offset, nbytes) of each inner chunk of a shard; checked against the file."""
    chunks = layout.per_file // layout.per_chunk
    size = 16 * chunks + (4 if layout.index_crc else 0)
    total = file_size(path)
    if total < size:
        raise ChunkFileError(f"{path}: shard is shorter than its index", whole_file=True)
    raw = pread(path, 0 if layout.index_at_start else total - size, size)
    if layout.index_crc:
        try:
            raw = strip_crc32c(raw)
        except ValueError as exc:
            raise ChunkFileError(f"{path}: shard index: {exc}", whole_file=True) from None
    index = np.frombuffer(raw, dtype="<u8").reshape(-1, 2)
    valid = index[:, 0] != MISSING
    data_end = total if layout.index_at_start else total - size
    if (index[valid].sum(1) > data_end).any():
        raise ChunkFileError(f"{path}: shard index points past the data", whole_file=True)
    return index


def decode_bytes(layout: ChunkLayout, raw: bytes) -> bytes:
    """A chunk's bytes with its bytes-to-bytes codecs undone (what its serializer wrote)."""
    for decode in layout.decoders:
        raw = decode(raw)
    return raw
