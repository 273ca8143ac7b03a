"""How many CPUs this process may really use, and torch's thread pool sized to match.

torch sizes its intra-op pool by the cores it sees, not by a container's CPU quota
(cgroup `cpu.max`, e.g. `docker --cpus=2` or a Kubernetes limit) nor, always, by the
affinity a scheduler set. A pool of 32 threads throttled to 2 CPUs runs several times
slower than a pool of 2: each step's threads wait on each other's time slices.
"""

from __future__ import annotations

import logging
import math
import os
from pathlib import Path

log = logging.getLogger(__name__)

_CGROUP_V2 = Path("/sys/fs/cgroup/cpu.max")
_CGROUP_V1 = (
    Path("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
    Path("/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
)


def _cgroup_quota() -> float | None:
    """CPUs the cgroup allows (a fraction is possible), or None when unlimited."""
    try:
        quota, period = _CGROUP_V2.read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        pass
    try:
        quota, period = (int(p.read_text()) for p in _CGROUP_V1)
        return None if quota <= 0 else quota / period
    except (OSError, ValueError):
        return None


def usable_cpus() -> int:
    """The CPUs this process may run on: its affinity, capped by its cgroup's quota."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    quota = _cgroup_quota()
    if quota is not None:
        cpus = min(cpus or 1, max(1, math.ceil(quota)))
    return max(1, cpus or 1)


def fit_torch_threads() -> int:
    """Shrink torch's intra-op pool to the usable CPUs (never grow it); returns its size."""
    import torch

    usable, current = usable_cpus(), torch.get_num_threads()
    if current > usable:
        torch.set_num_threads(usable)
        log.info("torch threads %d -> %d: this process may use %d CPUs", current, usable, usable)
    return torch.get_num_threads()
