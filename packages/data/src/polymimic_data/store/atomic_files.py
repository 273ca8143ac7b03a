"""Atomic file writes: a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` through a temporary file beside it, then a rename.

    Creates the parent folders; the file is made 0644, as an ordinary file would be.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("wb", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(data)
    os.chmod(f.name, 0o644)  # NamedTemporaryFile makes 0600; these are ordinary files
    os.replace(f.name, path)
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` to `path` as UTF-8, atomically."""
    return write_bytes_atomic(path, text.encode())


def write_json_atomic(path: str | os.PathLike[str], data: Any) -> Path:
    """Write `data` to `path` as indented JSON, atomically."""
    return write_text_atomic(path, json.dumps(data, indent=2))
