"""A real one-node SLURM cluster for this folder's tests (`nox -s tests-slurm` installs
Debian's slurm-wlm and munge where they are missing), and `train` as a user runs it."""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from .cluster import INSTALL, Cluster, missing_programs

# What nvidia-smi answers on a node with one idle GPU; each call is noted, so a test sees
# on which nodes (and how often) the stale-GPU reaper ran.
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "$SLURMD_NODENAME $SLURM_JOB_ID $SLURM_PROCID" >> "$FAKE_NVIDIA_SMI_LOG"
case "$*" in *query-gpu*) echo "0, GPU-fake" ;; esac
"""


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    missing = missing_programs()
    if missing:
        pytest.fail(f"SLURM's programs are missing: {missing}; `{INSTALL}` (nox -s tests-slurm)")
    # slurmd keeps its spool under the folder: a short path (sockets have a length limit)
    root = Path(tmp_path_factory.mktemp("slurm"))
    # two nodes (two slurmd), room for the tests' four 2-task jobs at once
    running = Cluster(root, cpus=5, nodes=2).start()
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="session")
def job_env(cluster: Cluster, tmp_path_factory: pytest.TempPathFactory):
    """job_env(tmp): the environment `train -m` (and so every job it submits) runs in."""
    bin_dir = Path(tmp_path_factory.mktemp("bin"))
    smi = bin_dir / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)

    def env(tmp: Path) -> dict[str, str]:
        clean = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        return (
            clean
            | cluster.env()
            | {
                "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
                "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
                "POLYMIMIC_RUNS_ROOT": str(tmp / "runs"),
                "PATH": f"{bin_dir}{os.pathsep}{Path(sys.executable).parent}{os.pathsep}"
                f"{clean.get('PATH', '')}",
                "FAKE_NVIDIA_SMI_LOG": str(tmp / "nvidia-smi.log"),
                "PYTHONUNBUFFERED": "1",
                # The nodes (node0, node1) are this host under names no resolver knows; on a
                # real cluster Lightning finds the first node's address from SLURM_NODELIST.
                "MASTER_ADDR": "127.0.0.1",
            }
        )

    return env
