"""openpi's wire format: msgpack with numpy arrays as maps of bytes keys.

An ndarray travels as `{b"__ndarray__": True, b"data": bytes (C order), b"dtype":
dtype.str, b"shape": [ints]}`, a numpy scalar as `{b"__npgeneric__": True, b"data": item,
b"dtype": dtype.str}`; object, void and complex arrays are refused (what openpi-client's
msgpack_numpy does, so its clients and ours read each other's frames). Unpacked arrays are
read-only views of the message.
"""

from __future__ import annotations

from typing import Any

import msgpack
import numpy as np

_REFUSED_KINDS = ("V", "O", "c")  # void, object, complex


class WireError(ValueError):
    """A message that is not msgpack, or an array map that does not describe an array."""


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


def _unpack_hook(obj: dict[Any, Any]) -> Any:
    if b"__ndarray__" in obj:
        try:
            dtype = np.dtype(obj[b"dtype"])
            if dtype.kind in _REFUSED_KINDS:
                raise WireError(f"unsupported dtype {dtype}")
            return np.ndarray(buffer=obj[b"data"], dtype=dtype, shape=tuple(obj[b"shape"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"an array map that describes no array: {exc}") from exc
    if b"__npgeneric__" in obj:
        try:
            return np.dtype(obj[b"dtype"]).type(obj[b"data"])
        except (KeyError, TypeError, ValueError) as exc:
            raise WireError(f"a scalar map that describes no scalar: {exc}") from exc
    return obj


def packb(obj: Any) -> bytes:
    """Msgpack bytes of `obj`, numpy arrays and scalars included."""
    data = msgpack.packb(obj, default=_pack_default, use_bin_type=True)
    assert isinstance(data, bytes)
    return data


def unpackb(data: bytes) -> Any:
    """The object `data` encodes; WireError if it is not a msgpack message."""
    try:
        return msgpack.unpackb(data, object_hook=_unpack_hook, raw=False, strict_map_key=False)
    except WireError:
        raise
    except (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError) as exc:
        raise WireError(f"not a msgpack message ({type(exc).__name__}: {exc})") from exc
