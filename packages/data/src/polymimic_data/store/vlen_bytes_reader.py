"""Single items of a 1-D variable-length-bytes zarr v3 array (JPEG frames), read from its files.

Covers the layouts real writers make (see zarr_chunks for the codec chains):

- polymimic's own: one frame per inner chunk, uncompressed, 256 frames to a shard;
- EgoVerse's and zarr's defaults: one shard file per array, one frame per inner chunk,
  inner codecs `vlen-bytes` + `zstd` (level 0), index codecs `bytes` + `crc32c`;
- plain chunked arrays, one or many frames to a chunk file.

A frame costs one `pread` and one decompression of its own inner chunk, after each shard's
index (or each uncompressed chunk's item offsets) is read once; a loader's reader
(`keep_open`) reads by those offsets through files it keeps open (zarr_chunks.pread_kept),
without an open and a close each time. Any other layout falls back to zarr.
"""

from __future__ import annotations

import json
import struct
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numcodecs
import numpy as np

from polymimic_data.store.zarr_chunks import (
    MISSING,
    ChunkFileError,
    ChunkLayout,
    chunk_key,
    decode_bytes,
    file_size,
    pread,
    pread_kept,
    read_layout,
    shard_index,
)

_U32 = struct.Struct("<I")
_SINGLE = struct.Struct("<II")  # a vlen-bytes chunk's item count, then its first item's length
_VLEN = numcodecs.VLenBytes()


def _one_item(raw: bytes) -> bool:
    """Whether a vlen-bytes chunk holds one item, its bytes after an 8-byte header."""
    return len(raw) >= 8 and _SINGLE.unpack_from(raw) == (1, len(raw) - 8)


@dataclass(frozen=True)
class KnownArray:
    """What opening an array reads, kept elsewhere (by samples.numeric_pack).

    Its metadata (`zarr.json`), its layout and, by shard file number, each shard's index.
    """

    meta: dict[str, Any]
    layout: ChunkLayout
    shard_indices: dict[int, np.ndarray]


class VlenBytesArrayReader:
    """Item `i` of one vlen-bytes array, by byte ranges where the layout allows."""

    def __init__(
        self,
        array_dir: Path,
        open_zarr: Callable[[], Any],
        cache_files: int = 64,
        *,
        known: KnownArray | None = None,
        keep_open: bool = False,
    ) -> None:
        """`known`: what an open reads, kept by a numeric pack: the reader reads no file.

        `keep_open`: a frame read by itself goes through a file kept open (pread_kept), for a
        reader that reads many (a training loader's); a one-off read opens and closes it.
        """
        self.array_dir = array_dir
        self._open_zarr = open_zarr
        self._zarr: Any = None
        if known is None:
            self.meta = json.loads((array_dir / "zarr.json").read_text())
            self.layout = read_layout(self.meta)
        else:
            self.meta, self.layout = known.meta, known.layout
        if self.layout.serializer not in ("", "vlen-bytes"):
            raise ValueError(f"{array_dir}: not a variable-length bytes array")
        self._is_sharded = self.layout.mode == "sharded"
        # polymimic's, EgoVerse's and zarr's default layouts (`_sharded`'s inline case)
        self._a_frame_a_chunk = self._is_sharded and self.layout.per_chunk == 1
        self._index_cache: OrderedDict[int, np.ndarray] = OrderedDict(
            known.shard_indices if known is not None else {}
        )
        self._cache_files = cache_files
        # Its own, for the files it keeps open (pread_kept): unlike a count, not repeated by
        # another process (a copy unpickled there gets a token of its own).
        self._token = object() if keep_open else None
        self._seen: dict[int, list[int]] = {}  # each kept file's identity when opened
        self._paths: dict[int, Path] = {}
        # Inner chunks of several items, decoded: the next frame is usually in the same one.
        self._chunk_cache: OrderedDict[tuple[int, int], np.ndarray | list[bytes]] = OrderedDict()

    @property
    def mode(self) -> str:
        return self.layout.mode

    def _file(self, file_index: int) -> Path:
        path = self._paths.get(file_index)
        if path is None:
            path = self._paths[file_index] = self.array_dir / chunk_key(self.meta, file_index)
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

    def known(self, items: int) -> KnownArray | None:
        """What an open of this array reads to get its first `items` (a pack keeps it).

        None unless its layout is read by byte ranges from shards.
        """
        if self.mode != "sharded":
            return None
        files = -(-min(items, int(self.meta["shape"][0])) // self.layout.per_file)
        indices = {f: self._shard_index(self._file(f)) for f in range(files)}
        return KnownArray(self.meta, self.layout, indices)

    def _shard_index(self, path: Path) -> np.ndarray:
        return shard_index(path, self.layout)

    def _chunk_offsets(self, path: Path) -> np.ndarray:
        """(offset, length) of each item of an uncompressed vlen-bytes chunk."""
        data = pread(path, 0, file_size(path))
        if len(data) < 4:
            raise ChunkFileError(f"{path}: chunk is truncated", whole_file=True)
        (count,) = _U32.unpack_from(data, 0)
        out = np.empty((count, 2), dtype=np.int64)
        pos = 4
        for k in range(count):
            if pos + 4 > len(data):
                raise ChunkFileError(f"{path}: chunk is truncated at item {k}", whole_file=True)
            (length,) = _U32.unpack_from(data, pos)
            out[k] = (pos + 4, length)
            pos += 4 + length
        if pos > len(data):
            raise ChunkFileError(f"{path}: chunk is truncated at its last item", whole_file=True)
        return out

    def _decode(self, raw: bytes, path: Path, what: str) -> np.ndarray | list[bytes]:
        """The items of one encoded chunk: bytes-to-bytes codecs undone, then vlen-bytes."""
        try:
            raw = decode_bytes(self.layout, raw)
            if self.layout.per_chunk == 1 and _one_item(raw):
                return [raw[8:]]
            return _VLEN.decode(raw)
        except Exception as exc:  # each codec raises its own kind of error
            raise ChunkFileError(f"{path}: {what} is corrupt ({exc})") from None

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
        """Item `i` of a sharded array; the usual case (a frame an inner chunk) inline.

        This runs for every frame of every camera a loader reads.
        """
        file_index, item = divmod(i, self.layout.per_file)
        path = self._file(file_index)
        chunk, within = divmod(item, self.layout.per_chunk)
        index = self._index_cache.get(file_index)
        if index is None:  # (the hit inline)
            index = self._cached(file_index, lambda: self._shard_index(path))
        else:
            self._index_cache.move_to_end(file_index)
        offset, nbytes = index[chunk].tolist()
        if offset == MISSING:
            raise ChunkFileError(f"{path}: the frame is missing from its shard")
        what = "the frame's inner chunk"
        if self._a_frame_a_chunk:
            raw = self._read(file_index, path, offset, nbytes)
            if not self.layout.decoders and _one_item(raw):
                return raw[8:]  # the item after its 8-byte header, as _decode gives it
            items = self._decode(raw, path, what)
        else:
            read = lambda: self._read(file_index, path, offset, nbytes)  # noqa: E731
            items = self._decoded_chunk((file_index, chunk), read, path, what)
        if len(items) != self.layout.per_chunk:
            raise ChunkFileError(
                f"{path}: {what} holds {len(items)} items, not {self.layout.per_chunk}"
            )
        return bytes(items[within])

    def _plain(self, i: int) -> bytes:
        file_index, item = divmod(i, self.layout.per_file)
        path = self._file(file_index)
        if self.layout.decoders:
            read = lambda: pread(path, 0, file_size(path))  # noqa: E731
            items = self._decoded_chunk((file_index, 0), read, path, "chunk")
            if item >= len(items):
                raise ChunkFileError(f"{path}: the frame is missing from its chunk")
            return bytes(items[item])
        offsets = self._cached(file_index, lambda: self._chunk_offsets(path))
        if item >= len(offsets):
            raise ChunkFileError(f"{path}: the frame is missing from its chunk")
        start, length = offsets[item].tolist()
        return self._read(file_index, path, start, length)

    def _read(self, file_index: int, path: Path, offset: int, size: int) -> bytes:
        """`size` bytes of file `file_index` at `offset`, through it kept open where asked."""
        if self._token is None:
            return pread(path, offset, size)
        return pread_kept(self._token, file_index, path, offset, size, self._seen)

    def get(self, i: int) -> bytes:
        if self._is_sharded:
            return self._sharded(i)
        if self.mode == "plain":
            return self._plain(i)
        if self._zarr is None:
            self._zarr = self._open_zarr()
        return bytes(self._zarr[i : i + 1][0])
