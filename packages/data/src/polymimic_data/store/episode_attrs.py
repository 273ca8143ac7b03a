"""An episode's group attributes: reading them from its zarr.json, and matching filters."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def read_group_attrs(path: Path) -> dict[str, Any]:
    """The attributes of the zarr group at `path` (ValueError when it is not a group)."""
    meta = json.loads((path / "zarr.json").read_text())
    if meta.get("node_type") != "group":
        raise ValueError("zarr.json is not a group")
    return dict(meta.get("attributes", {}))


_ATTRIBUTE_ALIASES = {"task": "task_name"}


def attrs_match(attrs: Mapping[str, Any], filters: Mapping[str, Any]) -> bool:
    """Every filter matches: a value or any of a list, strings compared case-insensitively."""
    for name, wanted in filters.items():
        value = attrs.get(_ATTRIBUTE_ALIASES.get(name, name))
        if value is None:
            return False
        options = wanted if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
        if str(value).lower() not in {str(o).lower() for o in options}:
            return False
    return True
