"""The byte-range reader agrees with zarr on every layout real writers make, never falls
back to zarr on them, and names corrupt files."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
import zarr.dtype
from zarr.codecs import BloscCodec, Crc32cCodec, GzipCodec, ShardingCodec, ZstdCodec

from polymimic_data.store.vlen_bytes_reader import VlenBytesArrayReader
from polymimic_data.store.zarr_chunks import ChunkFileError

ITEMS = [bytes([i % 256]) * (i * 7 % 50 + 1) for i in range(23)]


def _array(path: Path, **layout) -> zarr.Array:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(path, mode="w", zarr_format=3)
        arr = group.create_array(
            "images.front_1", shape=(len(ITEMS),), dtype=zarr.dtype.VariableLengthBytes(), **layout
        )
        arr[:] = np.array(ITEMS, dtype=object)
    return arr


def _no_zarr() -> zarr.Array:
    raise AssertionError("the reader fell back to zarr's array API")


LAYOUTS = {
    # polymimic's writer: one frame per inner chunk, uncompressed, many frames to a shard
    "polymimic": ({"chunks": (1,), "shards": (8,), "compressors": None}, "sharded"),
    # EgoVerse's writer and zarr's defaults: one shard per array, zstd inner chunks
    "egoverse": ({"chunks": (1,), "shards": (len(ITEMS) + 1,)}, "sharded"),
    "zstd_shards": ({"chunks": (1,), "shards": (8,), "compressors": ZstdCodec()}, "sharded"),
    "gzip_shards": ({"chunks": (1,), "shards": (8,), "compressors": GzipCodec()}, "sharded"),
    "blosc_shards": ({"chunks": (1,), "shards": (8,), "compressors": BloscCodec()}, "sharded"),
    "crc32c_chunks": (
        {"chunks": (1,), "shards": (8,), "compressors": (ZstdCodec(), Crc32cCodec())},
        "sharded",
    ),
    "inner_chunks_of_four": ({"chunks": (4,), "shards": (8,)}, "sharded"),
    "chunk_per_frame": ({"chunks": (1,), "compressors": None}, "plain"),
    "chunk_of_five": ({"chunks": (5,), "compressors": None}, "plain"),
    "zstd_chunks": ({"chunks": (4,), "compressors": ZstdCodec()}, "plain"),
    "dot_keys": (
        {
            "chunks": (3,),
            "compressors": None,
            "chunk_key_encoding": {"name": "default", "separator": "."},
        },
        "plain",
    ),
}


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_reads_every_item_by_byte_range(tmp_path: Path, name: str) -> None:
    layout, mode = LAYOUTS[name]
    arr = _array(tmp_path / "ep", **layout)
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    assert reader.mode == mode
    assert [reader.get(i) for i in range(len(ITEMS))] == ITEMS
    assert [bytes(v) for v in arr[:]] == ITEMS


def test_index_at_the_start_of_the_shard(tmp_path: Path) -> None:
    sharding = ShardingCodec(
        chunk_shape=(1,), codecs=[zarr.codecs.VLenBytesCodec()], index_location="start"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        group = zarr.open_group(tmp_path / "ep", mode="w", zarr_format=3)
        arr = group.create_array(
            "images.front_1",
            shape=(len(ITEMS),),
            dtype=zarr.dtype.VariableLengthBytes(),
            chunks=(8,),
            serializer=sharding,
            compressors=None,  # a compressor around the whole shard would hide its index
        )
        arr[:] = np.array(ITEMS, dtype=object)
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    assert reader.layout.index_at_start
    assert [reader.get(i) for i in range(len(ITEMS))] == ITEMS


def test_a_codec_it_does_not_know_goes_through_zarr(tmp_path: Path) -> None:
    arr = _array(tmp_path / "ep", chunks=(4,), compressors=None)
    meta_path = tmp_path / "ep" / "images.front_1" / "zarr.json"
    meta = meta_path.read_text().replace('"name": "vlen-bytes"', '"name": "vlen-bytes-x"')
    meta_path.write_text(meta)
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", lambda: arr)
    assert reader.mode == "zarr" and reader.get(5) == ITEMS[5]


@pytest.mark.parametrize("name", ["polymimic", "egoverse"])
def test_truncated_shard_loses_the_whole_file_and_names_it(tmp_path: Path, name: str) -> None:
    _array(tmp_path / "ep", **LAYOUTS[name][0])
    shard = tmp_path / "ep" / "images.front_1" / "c" / "0"
    shard.write_bytes(shard.read_bytes()[:40])
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    with pytest.raises(ChunkFileError, match=r"c/0") as caught:
        reader.get(3)
    assert caught.value.whole_file


def test_the_index_checksum_is_verified(tmp_path: Path) -> None:
    _array(tmp_path / "ep", **LAYOUTS["egoverse"][0])
    shard = tmp_path / "ep" / "images.front_1" / "c" / "0"
    data = bytearray(shard.read_bytes())
    data[-10] ^= 0xFF  # inside the index, not its checksum
    shard.write_bytes(bytes(data))
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    with pytest.raises(ChunkFileError, match="crc32c checksum mismatch") as caught:
        reader.get(0)
    assert caught.value.whole_file


def test_a_corrupt_inner_chunk_loses_only_its_frame(tmp_path: Path) -> None:
    _array(tmp_path / "ep", chunks=(1,), shards=(8,), compressors=(ZstdCodec(), Crc32cCodec()))
    shard = tmp_path / "ep" / "images.front_1" / "c" / "0"
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    offset, _ = reader._shard_index(shard)[2].tolist()
    data = bytearray(shard.read_bytes())
    data[offset + 9] ^= 0xFF
    shard.write_bytes(bytes(data))
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    with pytest.raises(ChunkFileError, match="inner chunk is corrupt") as caught:
        reader.get(2)
    assert not caught.value.whole_file
    assert reader.get(1) == ITEMS[1] and reader.get(3) == ITEMS[3]


@pytest.mark.parametrize("keep_open", [False, True])
def test_an_uncompressed_frame_whose_header_lies_is_refused(
    tmp_path: Path, keep_open: bool
) -> None:
    """polymimic's layout (a frame an inner chunk, no codec): the header must say one item of
    the chunk's length, else the frame is corrupt, not its bytes less the header."""
    _array(tmp_path / "ep", chunks=(1,), shards=(8,), compressors=None)
    shard = tmp_path / "ep" / "images.front_1" / "c" / "0"
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    offset, _ = reader._shard_index(shard)[2].tolist()
    data = bytearray(shard.read_bytes())
    data[offset] = 2  # two items, where the chunk holds one
    shard.write_bytes(bytes(data))
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr, keep_open=keep_open)
    with pytest.raises(ChunkFileError, match="inner chunk") as caught:
        reader.get(2)
    assert not caught.value.whole_file
    assert reader.get(1) == ITEMS[1] and reader.get(3) == ITEMS[3]


def test_corrupt_chunk_is_reported(tmp_path: Path) -> None:
    _array(tmp_path / "ep", chunks=(5,), compressors=None)
    chunk = tmp_path / "ep" / "images.front_1" / "c" / "2"
    chunk.write_bytes(b"\x05\x00\x00\x00\xff\xff\xff\x00")
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", _no_zarr)
    with pytest.raises(ChunkFileError, match="truncated"):
        reader.get(11)


def _open_files(under: Path) -> int:
    """Files of this process open under `under`."""
    fds = Path("/proc/self/fd").iterdir()
    return sum(1 for fd in fds if fd.resolve(strict=False).is_relative_to(under))


@pytest.mark.parametrize("name", ["polymimic", "chunk_per_frame"])
def test_a_loaders_reader_keeps_its_files_open_and_never_reads_a_replaced_one_by_old_offsets(
    tmp_path: Path, name: str, monkeypatch
) -> None:
    import pickle
    import threading

    from polymimic_data.store import zarr_chunks

    _array(tmp_path / "ep", **LAYOUTS[name][0])
    array_dir = tmp_path / "ep" / "images.front_1"
    assert VlenBytesArrayReader(array_dir, _no_zarr).get(3) == ITEMS[3]
    assert _open_files(tmp_path) == 0  # a one-off reader (validate's) keeps nothing open
    old = VlenBytesArrayReader(array_dir, _no_zarr, keep_open=True)
    assert old.get(3) == ITEMS[3] and old.get(3) == ITEMS[3]
    assert _open_files(tmp_path) == 1  # kept open for the next frame: no open and close each
    # The array written again, each file replaced (a new inode, as an atomic rewrite makes).
    changed = [bytes([255 - i]) * len(item) for i, item in enumerate(ITEMS)]
    scratch = _array(tmp_path / "scratch", **LAYOUTS[name][0])
    scratch[:] = np.array(changed, dtype=object)
    for file in (tmp_path / "scratch" / "images.front_1").rglob("*"):
        if file.is_file() and file.name != "zarr.json":
            file.replace(array_dir / file.relative_to(tmp_path / "scratch" / "images.front_1"))
    assert old.get(3) == ITEMS[3]  # the file it opened, whose offsets it holds
    copy = pickle.loads(pickle.dumps(old))  # as a worker gets it: its own files to open
    with pytest.raises(ChunkFileError, match="replaced on disk since its episode was opened"):
        copy.get(3)  # the new file by the old one's offsets: refused, not read
    assert VlenBytesArrayReader(array_dir, _no_zarr, keep_open=True).get(3) == changed[3]
    # At most KEPT_OPEN a thread, the least recently read closed first; the old reader's
    # file, closed so, is opened again as the replacement: refused too.
    monkeypatch.setattr(zarr_chunks, "KEPT_OPEN", 2)
    readers = [VlenBytesArrayReader(array_dir, _no_zarr, keep_open=True) for _ in range(3)]
    assert [r.get(5) for r in readers] == [changed[5]] * 3
    assert len(zarr_chunks._KEPT.files) == 2 and _open_files(tmp_path) == 2
    key = next(k for k in zarr_chunks._KEPT.files if k[0] is readers[-1]._token)
    kept = zarr_chunks._KEPT.files[key]
    assert readers[-1].get(5) == changed[5]
    assert zarr_chunks._KEPT.files[key] == kept  # the same descriptor: not opened again
    with pytest.raises(ChunkFileError, match="replaced on disk"):
        old.get(3)
    # A thread's kept files are closed when it ends.
    reader = VlenBytesArrayReader(array_dir, _no_zarr, keep_open=True)
    thread = threading.Thread(target=reader.get, args=(7,))
    thread.start()
    thread.join()
    assert _open_files(tmp_path) == 2  # this thread's two; the other's closed


def test_out_of_descriptors_a_thread_frees_its_kept_files_and_tries_once_more(
    tmp_path: Path, monkeypatch
) -> None:
    import errno
    import os

    from polymimic_data.store import zarr_chunks

    _array(tmp_path / "ep", **LAYOUTS["polymimic"][0])  # shards of 8 frames: files 0, 1, 2
    array_dir = tmp_path / "ep" / "images.front_1"
    known = VlenBytesArrayReader(array_dir, _no_zarr).known(len(ITEMS))  # no index to read
    reader = VlenBytesArrayReader(array_dir, _no_zarr, known=known, keep_open=True)
    assert reader.get(0) == ITEMS[0] and reader.get(8) == ITEMS[8]  # files 0 and 1 kept
    real_open, refusals, refuse = os.open, [], [1]

    def open_(path, *args, **kwargs):
        if len(refusals) < refuse[0]:
            refusals.append(path)
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(zarr_chunks.os, "open", open_)
    assert reader.get(16) == ITEMS[16]  # refused once: the kept two freed, then opened
    assert list(zarr_chunks._KEPT.files) == [(reader._token, 2)] and len(refusals) == 1
    refuse[0] = 3  # refused again after freeing: the error is the caller's
    with pytest.raises(OSError, match="Too many open files"):
        reader.get(0)
    assert len(refusals) == 3 and not zarr_chunks._KEPT.files
