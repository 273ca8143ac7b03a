"""PolicyConfig: the base of every policy's config, a frozen dataclass of plain values.

A config holds everything a policy is built from but its embodiments. It is checked when
it is made (a ValueError naming the field, `d_model: ...`), converts what Hydra or JSON
hands it to its fields' types (lists to tuples, mappings to dicts), and is plain data both
ways: `to_dict()` gives lists, dicts, numbers, strings, booleans and None only, and
`from_dict()` rebuilds the config from that, refusing any key that is not a field.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, ClassVar, Self


class _Mismatch(ValueError):
    """A value that is not of its field's type (a ValueError naming the field)."""


@dataclass(frozen=True)
class PolicyConfig:
    """The base of HPTConfig, RDTConfig and PiConfig: checks, conversion, plain data.

    Subclasses declare their fields (all with plain types: int, float, bool, str, None,
    sequences and mappings of those) and check their values in `__post_init__` after
    calling this one, which converts every field to its type. `initial_weights` gives the
    field values under which the policy reads no weights of its own (see
    `without_initial_weights`).
    """

    initial_weights: ClassVar[Mapping[str, Any]] = {}

    def __post_init__(self) -> None:
        hints = _field_types(type(self))
        for item in dataclasses.fields(self):
            value = _convert(getattr(self, item.name), hints[item.name], item.name)
            object.__setattr__(self, item.name, value)

    @classmethod
    def field_names(cls) -> list[str]:
        """The fields `to_dict` writes and `from_dict` reads, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]

    def to_dict(self) -> dict[str, Any]:
        """Every field as plain data: lists, dicts, numbers, strings, booleans and None."""
        return {name: _plain(getattr(self, name)) for name in self.field_names()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Self:
        """The config `to_dict` wrote; ValueError naming a key that is not a field."""
        if not isinstance(data, Mapping):
            raise ValueError(
                f"{cls.__name__}: a config is a mapping of field names to values, got "
                f"{type(data).__name__}"
            )
        names = cls.field_names()
        for key in data:
            if key not in names:
                raise ValueError(f"{key}: not a field of {cls.__name__}; its fields are {names}")
        for item in dataclasses.fields(cls):
            if item.name not in data and _default(item) is dataclasses.MISSING:
                raise ValueError(f"{item.name}: missing; {cls.__name__} has no default for it")
        return cls(**data)

    def without_initial_weights(self) -> Self:
        """The config with every source of initial weights off (`initial_weights`).

        No pretrained parts, no base weights read: for a policy whose weights then come
        from a checkpoint (a resume, or a trained policy loaded to serve).
        """
        return dataclasses.replace(self, **self.initial_weights)


def positive_integers(**values: Any) -> None:
    """ValueError naming the first value that is not a positive integer."""
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")


def one_of(name: str, value: Any, choices: Sequence[Any]) -> None:
    """ValueError naming the field when `value` is not one of `choices`."""
    if value not in choices:
        raise ValueError(f"{name}: {value!r} is not one of {sorted(choices)}")


@cache
def _field_types(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _default(item: dataclasses.Field[Any]) -> Any:
    if item.default_factory is not dataclasses.MISSING:
        return item.default_factory()
    return item.default


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _type_text(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_text(a) for a in args)
    if hint is type(None):
        return "null"
    if origin in (tuple, Sequence):
        return f"a list of {_type_text(args[0])}"
    if origin in (dict, Mapping):
        return f"a mapping of {_type_text(args[0])} to {_type_text(args[1])}"
    if origin is os.PathLike or hint is os.PathLike:
        return "a path"
    return getattr(hint, "__name__", str(hint))


_SCALARS: dict[Any, Any] = {
    bool: lambda v: v if isinstance(v, bool) else _NO,
    str: lambda v: v if isinstance(v, str) else _NO,
    int: lambda v: v if isinstance(v, int) and not isinstance(v, bool) else _NO,
    float: lambda v: float(v) if isinstance(v, int | float) and not isinstance(v, bool) else _NO,
    os.PathLike: lambda v: os.fspath(v) if isinstance(v, os.PathLike) else _NO,
}
_NO = object()  # a value that is not of the type asked for


def _convert(value: Any, hint: Any, where: str) -> Any:
    """`value` as `hint` says (lists to tuples, mappings to dicts), or _Mismatch."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        for arg in args:
            try:
                return _convert(value, arg, where)
            except _Mismatch:
                continue
    elif origin in (tuple, Sequence):
        if isinstance(value, Sequence) and not isinstance(value, str | bytes):
            return tuple(_convert(v, args[0], f"{where}[{i}]") for i, v in enumerate(value))
    elif origin in (dict, Mapping):
        if isinstance(value, Mapping):
            return {
                _convert(k, args[0], where): _convert(v, args[1], f"{where}.{k}")
                for k, v in value.items()
            }
    elif (scalar := _SCALARS.get(origin or hint)) is not None:
        converted = scalar(value)
        if converted is not _NO:
            return converted
    raise _Mismatch(f"{where}: must be {_type_text(hint)}, got {value!r}")
