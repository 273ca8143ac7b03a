"""openpi's msgpack-numpy, both ways: what its client packs, we read, and the reverse."""

from __future__ import annotations

import msgpack
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from polymimic_serve.wire import WireError, WireLimits, brief, packb, unpackb

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
            "needs 36 bytes of data, got 3 bytes",
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


def _array(dtype: str, shape: list[int], data: bytes) -> dict[bytes, object]:
    return {b"__ndarray__": True, b"data": data, b"dtype": dtype, b"shape": shape}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        # a 48-byte message that used to unpack into a 128 MB void value
        ({b"__npgeneric__": True, b"data": b"", b"dtype": "|V134217728"}, "dtype a short"),
        ({b"__npgeneric__": True, b"data": b"x" * 16, b"dtype": "|V16"}, "unsupported dtype"),
        ({b"__npgeneric__": True, b"data": 1, b"dtype": "<c16"}, "unsupported dtype"),
        (_array("|V8", [1], b"\x00" * 8), "unsupported dtype"),
        (_array("<f4", [2], b"\x00" * 12), "needs 8 bytes of data, got 12 bytes"),  # was accepted
        (_array("<f4", [-1], b""), "shape a list of at most 8 sizes"),
        (_array("<f4", [1] * 9, b"\x00" * 4), "shape a list of at most 8 sizes"),
        (_array("<f4", [1 << 40], b""), "at most"),
        ({b"__npgeneric__": True, b"data": 1 << 40, b"dtype": "<i4"}, "cannot hold"),
        ({b"__npgeneric__": True, b"data": "text", b"dtype": "<f4"}, "data a number"),
    ],
)
def test_what_no_observation_needs_is_refused_before_it_is_built(value: dict, message: str) -> None:
    data = msgpack.packb({"reset": value}, use_bin_type=True)
    assert len(data) < 200
    with pytest.raises(WireError, match=message) as caught:
        unpackb(data)
    assert len(str(caught.value)) < 300


def test_nesting_items_and_strings_are_bounded() -> None:
    limits = WireLimits(max_items=100, max_str_bytes=10, max_depth=4)
    deep: object = 1
    for _ in range(5):
        deep = [deep]
    with pytest.raises(WireError, match="nested deeper than 4"):
        unpackb(msgpack.packb(deep), limits)
    assert unpackb(msgpack.packb([[[1]]]), limits) == [[[1]]]
    very_deep = b"\x91" * 100_000 + b"\x01"  # msgpack's own recursion limit
    with pytest.raises(WireError, match="nested deeper than 8"):
        unpackb(very_deep)
    with pytest.raises(WireError, match="more than 100 list items"):
        unpackb(msgpack.packb([list(range(60)), list(range(60))]), limits)
    with pytest.raises(WireError, match="not a msgpack message"):
        unpackb(msgpack.packb("x" * 11), limits)
    with pytest.raises(WireError, match="a message of 11 bytes; at most 10"):
        unpackb(b"\x00" * 11, WireLimits(max_message_bytes=10))


def test_an_error_text_quotes_a_client_value_briefly() -> None:
    assert brief("x" * 10_000).endswith("(10002 characters)")
    assert len(brief("x" * 10_000)) < 100
    assert brief(np.zeros((3, 4), np.float32)) == "float32 array (3, 4)"
    assert brief(b"\x00" * 10**6) == "1000000 bytes"
    assert brief({"a": 1}) == "a dict of 1"
    assert brief(10**5000) == "int of 16610 bits"  # a record from a file (repr would raise)
    assert brief(-(10**300)).endswith("(302 characters)")
