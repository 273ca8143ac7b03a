"""The byte-range reader agrees with zarr on every layout and names corrupt files."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr
import zarr.dtype
from zarr.codecs import ZstdCodec

from polymimic_data.vlen_bytes_reader import FrameBytesError, VlenBytesArrayReader

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


LAYOUTS = {
    "sharded": ({"chunks": (1,), "shards": (8,), "compressors": None}, "sharded"),
    "chunk_per_frame": ({"chunks": (1,), "compressors": None}, "plain"),
    "chunk_of_five": ({"chunks": (5,), "compressors": None}, "plain"),
    "zstd": ({"chunks": (4,), "compressors": ZstdCodec()}, "zarr"),
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
def test_every_layout_reads_every_item(tmp_path: Path, name: str) -> None:
    layout, mode = LAYOUTS[name]
    arr = _array(tmp_path / "ep", **layout)
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", lambda: arr)
    assert reader.mode == mode
    assert [reader.get(i) for i in range(len(ITEMS))] == ITEMS


def test_truncated_shard_is_reported_with_its_path(tmp_path: Path) -> None:
    _array(tmp_path / "ep", chunks=(1,), shards=(8,), compressors=None)
    shard = tmp_path / "ep" / "images.front_1" / "c" / "1"
    shard.write_bytes(shard.read_bytes()[:40])
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", lambda: None)
    assert reader.get(0) == ITEMS[0]
    with pytest.raises(FrameBytesError, match=r"c/1"):
        reader.get(9)


def test_corrupt_chunk_is_reported(tmp_path: Path) -> None:
    _array(tmp_path / "ep", chunks=(5,), compressors=None)
    chunk = tmp_path / "ep" / "images.front_1" / "c" / "2"
    chunk.write_bytes(b"\x05\x00\x00\x00\xff\xff\xff\x00")
    reader = VlenBytesArrayReader(tmp_path / "ep" / "images.front_1", lambda: None)
    with pytest.raises(FrameBytesError, match="truncated"):
        reader.get(11)
