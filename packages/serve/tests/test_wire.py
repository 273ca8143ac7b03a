"""openpi's msgpack-numpy, both ways: what its client packs, we read, and the reverse."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from polymimic_serve.wire import WireError, packb, unpackb

DTYPES = st.sampled_from(["<f4", "<f8", "|u1", "<i8", "<i4", "|b1", "<f2", "<u2"])


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(DTYPES, hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
def test_arrays_round_trip_with_dtype_and_shape(array: np.ndarray) -> None:
    back = unpackb(packb({"a": array, "nested": {"list": [array, 1, "x"]}}))
    for got in (back["a"], back["nested"]["list"][0]):
        assert got.dtype == array.dtype and got.shape == array.shape
        np.testing.assert_array_equal(got, array)
        assert not got.flags.writeable  # a view of the message, as openpi's are


def test_the_encoding_is_openpis_maps_with_bytes_keys() -> None:
    array = np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::2]  # not C-contiguous
    raw = msgpack.unpackb(packb({"actions": array, "n": np.int64(3)}), raw=False)
    assert raw["actions"] == {
        b"__ndarray__": True,
        b"data": np.ascontiguousarray(array).tobytes(),
        b"dtype": "<f4",
        b"shape": [2, 2],
    }
    assert raw["n"] == {b"__npgeneric__": True, b"data": 3, b"dtype": "<i8"}
    # what openpi-client's Packer writes (a map per array, packed by msgpack itself) reads back
    theirs = msgpack.packb(
        {"state": {b"__ndarray__": True, b"data": b"\x00" * 8, b"dtype": "<f8", b"shape": [1]}},
        use_bin_type=True,
    )
    assert unpackb(theirs)["state"].tolist() == [0.0]


@pytest.mark.parametrize("value", [np.array([1 + 2j]), np.array([object()]), np.zeros(2, "V4")])
def test_object_void_and_complex_arrays_are_refused(value: np.ndarray) -> None:
    with pytest.raises(WireError, match="unsupported dtype"):
        packb({"x": value})


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"\xc1garbage", "not a msgpack message"),
        (packb({"a": 1}) + b"\x00", "not a msgpack message"),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"abc", b"dtype": "<f4", b"shape": [9]}),
            "describes no array",
        ),
        (
            msgpack.packb({b"__ndarray__": True, b"data": b"", b"dtype": "|O", b"shape": [0]}),
            "describes no array|unsupported dtype",
        ),
    ],
)
def test_bytes_that_are_no_message_are_named(data: bytes, message: str) -> None:
    with pytest.raises(WireError, match=message):
        unpackb(data)
