"""openpi's wire format: msgpack with numpy arrays as maps of bytes keys, read within limits.

An ndarray travels as `{b"__ndarray__": True, b"data": bytes (C order), b"dtype":
dtype.str, b"shape": [ints]}`, a numpy scalar as `{b"__npgeneric__": True, b"data": item,
b"dtype": dtype.str}` (openpi-client's msgpack_numpy, so its clients and ours read each
other's frames). Unpacked arrays are read-only views of the message.

A server reads what clients send, so `unpackb` refuses what no observation needs before it
builds it (`WireLimits`): any dtype but bool, integer and float (a void scalar of N bytes
would otherwise become an N-byte value from a 48-byte message), array data whose length is
not its shape's, arrays, lists, maps and strings past a bound, nesting past a small depth,
extension types. Every complaint is a WireError whose text is bounded in length and never
repeats what the client sent whole.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

_REFUSED_KINDS = ("V", "O", "c")  # void, object, complex: never packed
_READ_KINDS = ("b", "i", "u", "f")  # all an observation holds: bool, integers, floats
BRIEF = 60  # characters of a client's value an error text may quote


class WireError(ValueError):
    """A message that is not msgpack, or that holds what an observation never needs."""


@dataclass(frozen=True)
class WireLimits:
    """What one message may hold; `PolicyServer` derives them from its policy's inputs.

    `max_message_bytes` is enforced by the websocket layer before the bytes are held; the
    rest by `unpackb` while it reads.
    """

    max_message_bytes: int = 64 << 20
    max_array_elements: int = 1 << 24  # numbers in one ndarray
    max_items: int = 1 << 16  # list items and map entries, all told
    max_str_bytes: int = 1 << 16  # one string (a prompt)
    max_depth: int = 8  # maps and lists inside each other

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_array_elements", "max_items", "max_str_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: a positive number, got {getattr(self, name)}")
        if self.max_depth < 2:
            raise ValueError(f"max_depth: at least 2, got {self.max_depth}")


def brief(value: Any, limit: int = BRIEF) -> str:
    """A value someone else wrote, briefly: safe to put in an error text.

    A client's message or a checkpoint's record: its type and at most `limit` characters.
    """
    if isinstance(value, np.ndarray):
        return f"{value.dtype} array {value.shape}"
    if isinstance(value, bytes | bytearray | memoryview):
        return f"{len(value)} bytes"
    if isinstance(value, int) and value.bit_length() > 1000:  # repr refuses past 4300 digits
        return f"int of {value.bit_length()} bits"
    if isinstance(value, str | int | float | bool | np.number | np.bool_) or value is None:
        text = repr(value.item() if isinstance(value, np.generic) else value)
        text = text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"
        return f"{type(value).__name__} {text}"
    if isinstance(value, dict | list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return f"a {type(value).__name__}"


def _pack_default(obj: Any) -> Any:
    if isinstance(obj, np.ndarray | np.generic) and obj.dtype.kind in _REFUSED_KINDS:
        raise WireError(f"unsupported dtype {obj.dtype} (object, void and complex are refused)")
    if isinstance(obj, np.ndarray):
        return {
            b"__ndarray__": True,
            b"data": np.ascontiguousarray(obj).tobytes(),
            b"dtype": obj.dtype.str,
            b"shape": list(obj.shape),
        }
    if isinstance(obj, np.generic):
        return {b"__npgeneric__": True, b"data": obj.item(), b"dtype": obj.dtype.str}
    raise TypeError(f"cannot send a {type(obj).__name__} (use numpy arrays, numbers, str, dict)")


def packb(obj: Any) -> bytes:
    """Msgpack bytes of `obj`, numpy arrays and scalars included."""
    data = msgpack.packb(obj, default=_pack_default, use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def _dtype(raw: Any, what: str) -> np.dtype:
    """The dtype a map names, if an observation could hold it."""
    if not isinstance(raw, str | bytes) or len(raw) > 8:
        raise WireError(f"{what}: dtype a short numpy dtype string, got {brief(raw)}")
    try:
        dtype = np.dtype(raw.decode("ascii", "replace") if isinstance(raw, bytes) else raw)
    except TypeError as exc:
        raise WireError(f"{what}: dtype {brief(raw)} is no numpy dtype") from exc
    if dtype.kind not in _READ_KINDS:
        raise WireError(f"{what}: unsupported dtype {dtype.str} (bool, integers, floats only)")
    return dtype


class _Reader:
    """msgpack's hooks for one message: numpy maps decoded and everything counted."""

    def __init__(self, limits: WireLimits) -> None:
        self.limits, self.items = limits, 0

    def count(self, size: int) -> None:
        self.items += size
        if self.items > self.limits.max_items:
            raise WireError(
                f"more than {self.limits.max_items} list items and map entries in one message"
            )

    def list_hook(self, items: list[Any]) -> list[Any]:
        self.count(len(items))
        return items

    def object_hook(self, obj: dict[Any, Any]) -> Any:
        self.count(len(obj))
        if b"__ndarray__" in obj:
            return self.array(obj)
        if b"__npgeneric__" in obj:
            return self.scalar(obj)
        return obj

    def array(self, obj: dict[Any, Any]) -> np.ndarray:
        dtype = _dtype(obj.get(b"dtype"), "an array")
        shape, data = obj.get(b"shape"), obj.get(b"data")
        if (
            not isinstance(shape, list | tuple)
            or len(shape) > 8
            or not all(isinstance(s, int) and not isinstance(s, bool) and s >= 0 for s in shape)
        ):
            raise WireError(f"an array: shape a list of at most 8 sizes, got {brief(shape)}")
        elements = math.prod(shape)
        if elements > self.limits.max_array_elements:
            raise WireError(
                f"an array of {elements} numbers {tuple(shape)}; this server takes at most "
                f"{self.limits.max_array_elements} in one array"
            )
        if not isinstance(data, bytes) or len(data) != elements * dtype.itemsize:
            raise WireError(
                f"an array {dtype.str} {tuple(shape)} needs {elements * dtype.itemsize} bytes "
                f"of data, got {brief(data)}"
            )
        return np.ndarray(buffer=data, dtype=dtype, shape=tuple(shape))

    def scalar(self, obj: dict[Any, Any]) -> np.generic:
        dtype = _dtype(obj.get(b"dtype"), "a scalar")
        data = obj.get(b"data")
        is_bool = isinstance(data, bool)
        if is_bool != (dtype.kind == "b") or not isinstance(data, int | float):
            raise WireError(f"a scalar {dtype.str}: data a number, got {brief(data)}")
        try:
            return dtype.type(data)
        except (OverflowError, ValueError, TypeError) as exc:
            raise WireError(f"a scalar {dtype.str} cannot hold {brief(data)}") from exc


def _check_depth(value: Any, limit: int) -> None:
    """WireError if maps and lists nest deeper than `limit` (arrays are leaves)."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            raise WireError(f"maps and lists nested deeper than {limit}")
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))


def unpackb(data: bytes, limits: WireLimits | None = None) -> Any:
    """The object `data` encodes, within `limits`; WireError naming what is refused."""
    limits = limits or WireLimits()
    if len(data) > limits.max_message_bytes:
        raise WireError(f"a message of {len(data)} bytes; at most {limits.max_message_bytes}")
    reader = _Reader(limits)
    try:
        value = msgpack.unpackb(
            data,
            object_hook=reader.object_hook,
            list_hook=reader.list_hook,
            raw=False,
            strict_map_key=False,
            max_str_len=limits.max_str_bytes,
            max_bin_len=limits.max_message_bytes,
            max_array_len=limits.max_items,
            max_map_len=limits.max_items,
            max_ext_len=0,  # no extension types (openpi sends none)
        )
    except WireError:
        raise
    except msgpack.StackError as exc:
        raise WireError(f"maps and lists nested deeper than {limits.max_depth}") from exc
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        reason = str(exc)[:BRIEF] or "no reason given"
        raise WireError(f"not a msgpack message ({type(exc).__name__}: {reason})") from exc
    _check_depth(value, limits.max_depth)
    return value
