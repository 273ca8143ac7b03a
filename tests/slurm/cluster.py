"""A real SLURM cluster of one machine, for the tests: munge, slurmctld and slurmd
(Debian's `slurm-wlm` and `munge`) started as processes of the test's own, with every
file, port and socket in a folder of its own, and stopped by their pids.

`python tests/slurm/cluster.py FOLDER` starts one and waits (Ctrl-C stops it), to try a
launcher by hand: `export SLURM_CONF=FOLDER/slurm.conf`.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DAEMONS = ("munged", "mungekey", "slurmctld", "slurmd", "sbatch", "scontrol", "sinfo", "squeue")
INSTALL = "apt-get install -y slurm-wlm munge"


def missing_programs() -> list[str]:
    """The programs a cluster needs that are not on PATH (or in /usr/sbin)."""
    path = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"
    return [p for p in DAEMONS if shutil.which(p, path=path) is None]


def _program(name: str) -> str:
    path = f"{os.environ.get('PATH', '')}{os.pathsep}/usr/sbin{os.pathsep}/sbin"
    found = shutil.which(name, path=path)
    assert found is not None, f"{name} is not installed ({INSTALL})"
    return found


def _free_ports(n: int) -> list[int]:
    sockets = [socket.socket() for _ in range(n)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _total_memory_mb() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20


@dataclass
class Cluster:
    """One controller and `nodes` slurmd daemons on this host, one per node (Debian's
    slurmd runs several on one host, `slurmd -N <node>`), each of which may claim more
    CPUs than the host has (`config_overrides`), so that jobs run side by side."""

    root: Path
    cpus: int = field(default_factory=lambda: os.cpu_count() or 1)
    nodes: int = 1
    kill_wait_s: int = 2
    host: str = field(default_factory=lambda: socket.gethostname().split(".")[0])
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _logs: list[Any] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "munge.socket"

    def env(self) -> dict[str, str]:
        """What a client (sbatch, scontrol, submitit) needs to reach this cluster."""
        return {"SLURM_CONF": str(self.conf)}

    def write_conf(self) -> None:
        for sub in ("state", "spool", "log", "run", "munge"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        ctld_port, *node_ports = _free_ports(1 + self.nodes)
        memory = int(_total_memory_mb() * 0.8 / self.nodes)
        r = self.root
        nodes = "\n".join(
            f"NodeName={name} NodeHostname={self.host} NodeAddr=127.0.0.1 Port={port} "
            f"CPUs={self.cpus} RealMemory={memory} State=UNKNOWN"
            for name, port in zip(self.node_names, node_ports, strict=True)
        )
        self.conf.write_text(
            f"""ClusterName=polymimic-test
SlurmctldHost={self.host}
SlurmctldPort={ctld_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket={self.munge_socket}
CredType=cred/munge
StateSaveLocation={r / "state"}
SlurmdSpoolDir={r / "spool"}/%n
SlurmctldPidFile={r / "run" / "slurmctld.pid"}
SlurmdPidFile={r / "run" / "slurmd-%n.pid"}
SlurmctldLogFile={r / "log" / "slurmctld.log"}
SlurmdLogFile={r / "log" / "slurmd-%n.log"}
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
KillWait={self.kill_wait_s}
MinJobAge=600
InactiveLimit=0
SlurmctldTimeout=30
SlurmdTimeout=30
{nodes}
PartitionName=debug Nodes={",".join(self.node_names)} Default=YES MaxTime=INFINITE State=UP
"""
        )

    def _start(self, name: str, argv: list[str]) -> None:
        log = (self.root / "log" / f"{name}.out").open("wb")
        self._logs.append(log)
        self._processes[name] = subprocess.Popen(
            argv, stdout=log, stderr=subprocess.STDOUT, env=os.environ | self.env()
        )

    def start(self, timeout_s: float = 60) -> Cluster:
        self.write_conf()
        key = self.root / "munge" / "munge.key"
        subprocess.run([_program("mungekey"), "--create", f"--keyfile={key}"], check=True)
        key.chmod(0o600)
        m = self.root / "munge"
        self._start(
            "munged",
            [
                _program("munged"),
                "--foreground",
                "--force",  # as root, in a folder that is not /run/munge
                f"--socket={self.munge_socket}",
                f"--key-file={key}",
                f"--pid-file={m / 'munged.pid'}",
                f"--log-file={m / 'munged.log'}",
                f"--seed-file={m / 'munged.seed'}",
            ],
        )
        self._wait(lambda: self.munge_socket.exists(), timeout_s, "munged's socket")
        self._start("slurmctld", [_program("slurmctld"), "-D", "-f", str(self.conf)])
        for node in self.node_names:
            (self.root / "spool" / node).mkdir(parents=True, exist_ok=True)
            self._start(node, [_program("slurmd"), "-D", "-f", str(self.conf), "-N", node])
        self._wait(self._nodes_idle, timeout_s, f"nodes {self.node_names} idle in sinfo")
        return self

    def _own_job_processes(self) -> list[int]:
        """Processes of this cluster's jobs (their environment names its slurm.conf)."""
        mark = f"SLURM_CONF={self.conf}".encode()
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            with contextlib.suppress(OSError):
                if mark in (entry / "environ").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
        return found

    @property
    def node_names(self) -> list[str]:
        return [f"node{i}" for i in range(self.nodes)]

    def _nodes_idle(self) -> bool:
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False).stdout.split()
        return out == ["idle"] * self.nodes

    def _wait(self, ready, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not ready():
            for name, process in self._processes.items():
                if process.poll() is not None:
                    raise RuntimeError(f"{name} exited ({self.log(name)[-2000:]})")
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"no {what} after {timeout_s:.0f} s ({self.log('slurmd-node0')})"
                )
            time.sleep(0.2)

    def log(self, name: str) -> str:
        for path in (self.root / "log" / f"{name}.log", self.root / "log" / f"{name}.out"):
            if path.exists():
                return path.read_text(errors="replace")
        return ""

    def run(self, program: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """A client command (sinfo, scontrol, squeue) against this cluster."""
        return subprocess.run(
            [_program(program), *args],
            env=os.environ | self.env(),
            capture_output=True,
            text=True,
            check=check,
            timeout=60,
        )

    def job_field(self, job: str, key: str) -> str:
        """A field of `scontrol show job` (e.g. JobState, Restarts), '' once it is gone."""
        out = self.run("scontrol", "-o", "show", "job", job, check=False).stdout
        for item in out.split():
            k, _, v = item.partition("=")
            if k == key:
                return v
        return ""

    def stop(self) -> None:
        """Cancel what still runs, then end the daemons by pid (SIGTERM, then SIGKILL),
        and any job step this cluster's slurmd left behind."""
        if self._processes.get("slurmctld") is not None:
            with contextlib.suppress(Exception):
                self.run("scancel", "--full", "--user", "root", check=False)
                deadline = time.monotonic() + 15
                while self.run("squeue", "-h", check=False).stdout.strip():
                    if time.monotonic() > deadline:
                        break
                    time.sleep(0.5)
        for name in (*self.node_names, "slurmctld", "munged"):
            process = self._processes.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        for pid in self._own_job_processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for log in self._logs:
            log.close()
        self._logs.clear()


if __name__ == "__main__":
    cluster = Cluster(Path(sys.argv[1]).resolve()).start()
    print(f"export SLURM_CONF={cluster.conf}", flush=True)
    try:
        signal.pause()
    finally:
        cluster.stop()
