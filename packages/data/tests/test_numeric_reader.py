"""Whole numeric arrays read from their files agree with zarr on every layout writers make."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, BytesCodec, Crc32cCodec, GzipCodec, TransposeCodec, ZstdCodec

from polymimic_data.store.numeric_reader import read_rows
from polymimic_data.store.zarr_chunks import ChunkFileError

VALUES = np.random.default_rng(0).normal(size=(230, 7))

LAYOUTS = {
    # polymimic's writer: float32, 4096-row chunks, zarr's default zstd
    "polymimic": {"dtype": "float32", "chunks": (4096, 7)},
    # EgoVerse's writer: float64 padded to 300 rows, one shard, inner chunks of 100 rows
    "egoverse": {"dtype": "float64", "shape": (300, 7), "chunks": (100, 7), "shards": (300, 7)},
    "uncompressed": {"dtype": "float32", "chunks": (64, 7), "compressors": None},
    "gzip": {"dtype": "float64", "chunks": (50, 7), "compressors": GzipCodec()},
    "blosc_shards": {
        "dtype": "float32",
        "chunks": (16, 7),
        "shards": (64, 7),
        "compressors": BloscCodec(),
    },
    "crc32c": {"dtype": "float32", "chunks": (40, 7), "compressors": (ZstdCodec(), Crc32cCodec())},
    "big_endian": {"dtype": "float64", "chunks": (64, 7), "serializer": BytesCodec(endian="big")},
    "v2_keys": {
        "dtype": "float32",
        "chunks": (32, 7),
        "chunk_key_encoding": {"name": "v2", "separator": "."},
    },
}


def _array(path: Path, **layout) -> zarr.Array:
    shape = layout.pop("shape", VALUES.shape)
    dtype = layout.pop("dtype")
    array = zarr.create_array(path, shape=shape, dtype=dtype, **layout)
    array[: len(VALUES)] = VALUES.astype(dtype)
    return array


@pytest.mark.parametrize("name", sorted(LAYOUTS))
def test_every_layout_reads_as_zarr_reads_it(tmp_path: Path, name: str) -> None:
    array = _array(tmp_path / "a", **dict(LAYOUTS[name]))
    ours = read_rows(tmp_path / "a", 230)
    assert ours is not None, "fell back to zarr"
    np.testing.assert_array_equal(ours, array[:230])
    assert ours.dtype.isnative


def test_rows_past_the_written_ones_read_as_the_fill_value(tmp_path: Path) -> None:
    array = zarr.create_array(tmp_path / "a", shape=(300, 2), dtype="float32", chunks=(100, 2))
    array[:50] = 1.0  # chunks 1 and 2 are never written
    ours = read_rows(tmp_path / "a", 300)
    assert ours is not None
    np.testing.assert_array_equal(ours, array[:])
    assert read_rows(tmp_path / "a", 40).shape == (40, 2)  # clamped to what is asked


@pytest.mark.parametrize(
    "layout",
    [
        {"dtype": "float32", "chunks": (64, 3)},  # split along a second axis
        {"dtype": "float32", "chunks": (64, 7), "filters": [TransposeCodec(order=(1, 0))]},
    ],
)
def test_layouts_it_does_not_know_are_left_to_zarr(tmp_path: Path, layout: dict) -> None:
    _array(tmp_path / "a", **layout)
    assert read_rows(tmp_path / "a", 230) is None


def test_a_truncated_chunk_is_named(tmp_path: Path) -> None:
    _array(tmp_path / "a", dtype="float32", chunks=(100, 7))
    chunk = tmp_path / "a" / "c" / "1" / "0"
    chunk.write_bytes(chunk.read_bytes()[:20])
    with pytest.raises(ChunkFileError, match="c/1/0: chunk is corrupt"):
        read_rows(tmp_path / "a", 230)
