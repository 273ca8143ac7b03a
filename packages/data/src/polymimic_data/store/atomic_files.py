"""Atomic file writes: a reader sees the old file or the new one, never half of one.

And `exclusive`, a lock file for work that several processes (a job's ranks) would
otherwise each do at once: the first does it, the others wait and then find it done; and
`file_identity`, by which a cache of what a file held tells that it has changed since.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import math
import os
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


UNLOCKABLE = (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EACCES, errno.EROFS)


@contextmanager
def exclusive(
    lock_file: str | os.PathLike[str], waiting: str, *, timeout_s: float | None = None
) -> Iterator[bool]:
    """Held by one process at a time: `flock` on `lock_file` (created, with its folders).

    Yields whether the lock is held. A process that has to wait logs `waiting` first, and
    again each minute. Where the file system cannot lock (NFS without its lock daemon,
    Lustre without `flock`, a read-only or another user's cache) or `timeout_s` passes
    (a holder on a dead node), it warns and goes on unlocked: use it for work that is safe
    unlocked too, only wasteful. The lock goes with its process.
    """
    lock_file = Path(lock_file)
    try:
        lock_file.parent.mkdir(parents=True, exist_ok=True)
        handle = open(lock_file, "a")  # noqa: SIM115 (closed below, after the body)
    except OSError as exc:
        _unlocked(lock_file, exc)
        yield False
        return
    with handle:
        held = _acquire(handle, lock_file, waiting, timeout_s)
        try:
            yield held
        finally:
            if held:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _unlocked(lock_file: Path, exc: OSError) -> None:
    """A file system that cannot lock is said once and gone on from; any other error raised."""
    if exc.errno not in UNLOCKABLE:
        raise exc
    log.warning("%s: cannot lock (%s); going on unlocked", lock_file, exc.strerror)


def _acquire(handle: Any, lock_file: Path, waiting: str, timeout_s: float | None) -> bool:
    started, said = time.monotonic(), -math.inf
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError as exc:
            _unlocked(lock_file, exc)
            return False
        waited = time.monotonic() - started
        if timeout_s is not None and waited >= timeout_s:
            log.warning("%s: still held after %.0f s; going on unlocked", lock_file, waited)
            return False
        if waited - said >= 60:
            log.info("%s (%.0f s so far)", waiting, waited)
            said = waited
        time.sleep(0.2)


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


def file_identity(path: str | os.PathLike[str]) -> list[int]:
    """What a file or folder is now: inode, size, modification and change times (ns).

    Written in place, replaced (`os.replace`), copied over with its mtime kept (`cp -p`,
    `rsync -t`: the kernel's change time still moves) or, for a folder, given or losing an
    entry: one of them differs. Each fits an int64 (an inode past 2**63, as some network
    file systems give, is taken as its two's complement). OSError where it is gone.
    """
    return stat_identity(os.stat(path))


def stat_identity(stat: os.stat_result) -> list[int]:
    """file_identity of a `stat` already taken (e.g. `os.fstat` of a file held open)."""
    inode = stat.st_ino - (1 << 64) if stat.st_ino >= 1 << 63 else stat.st_ino
    return [inode, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
