"""Atomic file writes: a reader sees the old file or the new one, never half of one.

And `exclusive`, a lock file for work that several processes (a job's ranks) would
otherwise each do at once: the first does it, the others wait and then find it done.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


@contextmanager
def exclusive(lock_file: str | os.PathLike[str], waiting: str) -> Iterator[None]:
    """Held by one process at a time: `flock` on `lock_file` (created, with its folders).

    A process that has to wait logs `waiting` first. The lock goes with its process.
    """
    lock_file = Path(lock_file)
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("%s", waiting)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


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
