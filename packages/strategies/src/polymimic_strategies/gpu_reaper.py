"""At job start, end this user's processes from earlier runs that still hold the job's GPUs.

A crashed or cancelled run can leave processes holding GPU memory on a node; the next job
scheduled onto those GPUs then runs out of memory. The parsing is separate from the acting
so that it can be tested on recorded `nvidia-smi` output.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

log = logging.getLogger(__name__)

QUERY_GPUS = ["nvidia-smi", "--query-gpu=index,uuid", "--format=csv,noheader"]
QUERY_APPS = [
    "nvidia-smi",
    "--query-compute-apps=pid,gpu_uuid,used_memory",
    "--format=csv,noheader,nounits",
]


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU, as nvidia-smi lists it."""

    pid: int
    gpu_uuid: str
    used_mib: int


def parse_gpus(text: str) -> dict[str, str]:
    """`index, uuid` lines -> {index: uuid}."""
    out = {}
    for line in text.strip().splitlines():
        index, uuid = (part.strip() for part in line.split(",", 1))
        out[index] = uuid
    return out


def parse_compute_apps(text: str) -> list[GpuProcess]:
    """`pid, gpu_uuid, used_memory` lines (no units) -> processes; blank output -> none."""
    apps = []
    for line in text.strip().splitlines():
        if not line.strip() or "No running" in line:
            continue
        pid, uuid, used = (part.strip() for part in line.split(","))
        apps.append(GpuProcess(int(pid), uuid, int(used) if used.isdigit() else 0))
    return apps


def job_gpu_uuids(visible_devices: str | None, gpus: dict[str, str]) -> set[str]:
    """The job's GPUs from CUDA_VISIBLE_DEVICES (indices or UUIDs); all GPUs when unset."""
    if not visible_devices:
        return set(gpus.values())
    out = set()
    for item in (v.strip() for v in visible_devices.split(",") if v.strip()):
        out.add(gpus.get(item, item))
    return out


def stale_processes(
    apps: Iterable[GpuProcess],
    job_gpus: set[str],
    *,
    own_pids: set[int],
    owner_of: Callable[[int], int | None],
    uid: int,
) -> list[GpuProcess]:
    """Processes on the job's GPUs that belong to `uid` and are not this job's."""
    return [
        app
        for app in apps
        if app.gpu_uuid in job_gpus and app.pid not in own_pids and owner_of(app.pid) == uid
    ]


def _owner(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except FileNotFoundError:
        return None


def reap_stale_gpu_processes(*, dry_run: bool = False, grace_s: float = 5.0) -> list[GpuProcess]:
    """End stale processes on this job's GPUs (SIGTERM, then SIGKILL after `grace_s`)."""
    try:
        gpus = parse_gpus(
            subprocess.run(QUERY_GPUS, capture_output=True, text=True, check=True).stdout
        )
        apps = parse_compute_apps(
            subprocess.run(QUERY_APPS, capture_output=True, text=True, check=True).stdout
        )
    except (OSError, subprocess.CalledProcessError) as exc:
        log.info("GPU reaper skipped: nvidia-smi unavailable (%s)", exc)
        return []
    own = {os.getpid(), os.getppid()}
    stale = stale_processes(
        apps,
        job_gpu_uuids(os.environ.get("CUDA_VISIBLE_DEVICES"), gpus),
        own_pids=own,
        owner_of=_owner,
        uid=os.getuid(),
    )
    for app in stale:
        log.warning(
            "%s stale process %d holding %d MiB on %s",
            "would end" if dry_run else "ending",
            app.pid,
            app.used_mib,
            app.gpu_uuid,
        )
        if not dry_run:
            _signal(app.pid, signal.SIGTERM)
    if stale and not dry_run:
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(_owner(a.pid) is not None for a in stale):
            time.sleep(0.2)
        for app in stale:
            _signal(app.pid, signal.SIGKILL)
    return stale


def _signal(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended by itself
        os.kill(pid, sig)
