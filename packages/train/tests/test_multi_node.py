"""Two nodes of one process each, emulated on this machine: two `train` processes with the
environment SLURM gives each task of `srun --nodes=2 --ntasks-per-node=1 train ...`, through
Lightning's own SLURM environment (global ranks from SLURM_PROCID, the world from
SLURM_NTASKS), gloo on 127.0.0.1. Each node has its own cache folder, as a node-local disk
would be; the runs root is shared, as a cluster's file system is.

Without the rendezvous in run_dirs, each task resolved a run directory of its own (two
directories, one with a half run); the GPU reaper ran on node 0 only.
"""

from __future__ import annotations

import csv
import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

JOB = "4242"
NODES = 2
RUN = (
    "name=two_nodes",
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=1",
    f"trainer.num_nodes={NODES}",
    "data.synthetic.episodes=4",  # 2 validation episodes: one per node, no padding
    "data.synthetic.frames=24",
    "data.episodes_per_block=2",  # the block shuffle, over the ranks of two nodes
)
# What a robot-learning cluster's nvidia-smi answers on a node with one idle GPU; it notes
# each call, so the test sees on which nodes the stale-GPU reaper ran.
FAKE_NVIDIA_SMI = """#!/bin/sh
echo "node $SLURM_NODEID" >> "$FAKE_NVIDIA_SMI_LOG"
case "$*" in *query-gpu*) echo "0, GPU-node$SLURM_NODEID" ;; esac
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _task_env(tmp: Path, base: dict[str, str], node: int, port: int) -> dict[str, str]:
    env = {k: v for k, v in base.items() if not k.startswith("SLURM_") and k not in {"LOCAL_RANK"}}
    return env | {
        "SLURM_JOB_ID": JOB,
        "SLURM_STEP_ID": "0",
        "SLURM_JOB_NAME": "train",
        "SLURM_NNODES": str(NODES),
        "SLURM_JOB_NUM_NODES": str(NODES),
        "SLURM_NODELIST": "node[0-1]",
        "SLURM_NTASKS": str(NODES),
        "SLURM_NTASKS_PER_NODE": "1",
        "SLURM_NODEID": str(node),
        "SLURM_PROCID": str(node),
        "SLURM_LOCALID": "0",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "POLYMIMIC_CACHE_DIR": str(tmp / f"node{node}" / "cache"),
        "PATH": f"{tmp / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "FAKE_NVIDIA_SMI_LOG": str(tmp / "nvidia-smi.log"),
    }


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory, train_app, train_argv, train_environment) -> dict:
    from polymimic_train.runs.run_dirs import SLURM_JOBS

    tmp = tmp_path_factory.mktemp("nodes")
    (tmp / "bin").mkdir()
    smi = tmp / "bin" / "nvidia-smi"
    smi.write_text(FAKE_NVIDIA_SMI)
    smi.chmod(smi.stat().st_mode | stat.S_IEXEC)
    # the episodes are generated once, before the job (as a cluster's data already is)
    once = ("trainer.max_steps=1", "trainer.val_check_interval=1", "name=generate")
    made = train_app(tmp, None, *RUN[-3:-1], *once)
    assert made.returncode == 0, made.stderr[-3000:]
    port, base = _free_port(), train_environment(tmp)
    logs = [tmp / f"node{n}.log" for n in range(NODES)]
    tasks = []
    for node in reversed(range(NODES)):  # rank 1 first: it must wait for rank 0's choice
        with logs[node].open("w") as out:
            tasks.append(
                subprocess.Popen(
                    train_argv(*RUN),
                    env=_task_env(tmp, base, node, port),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    text=True,
                )
            )
    codes = [t.wait(timeout=600) for t in tasks]
    assert codes == [0, 0], "\n".join(log.read_text()[-3000:] for log in logs)
    runs = tmp / "runs" / "two_nodes"
    return {
        "tmp": tmp,
        "dirs": sorted(p for p in runs.iterdir() if p.name != SLURM_JOBS),
        "record": runs / SLURM_JOBS / f"{JOB}.0",
        "rank0_pid": tasks[-1].pid,
        "logs": logs,
    }


def test_both_nodes_trained_in_one_run_directory(two_nodes) -> None:
    (run_dir,) = two_nodes["dirs"]
    assert two_nodes["record"].read_text().strip() == str(run_dir.resolve())
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "finished"
    assert record["pid"] == two_nodes["rank0_pid"]  # rank zero owns the run's record
    assert record["slurm_step"] == f"{JOB}.0"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4
    # Lightning's SLURM environment gave the ranks: both took part in one world of two
    for node, log in enumerate(two_nodes["logs"]):
        assert f"GLOBAL_RANK: {node}, MEMBER: {node + 1}/{NODES}" in log.read_text()
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        steps = [row["step"] for row in csv.DictReader(f) if row.get("train/loss")]
    assert steps == sorted(set(steps)), steps  # one writer: each logged step once
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").iterdir())
    assert checkpoints == ["last.ckpt", "step000002.ckpt", "step000004.ckpt"], checkpoints


def test_each_node_keeps_its_own_per_job_cache(two_nodes) -> None:
    for node in range(NODES):
        cache = two_nodes["tmp"] / f"node{node}" / "cache"
        assert [p.name for p in (cache / "episode_index").iterdir()] == [f"slurm-{JOB}"]


def test_the_stale_gpu_reaper_ran_once_on_each_node(two_nodes) -> None:
    calls = (two_nodes["tmp"] / "nvidia-smi.log").read_text().split("\n")
    # two queries (the GPUs, then the processes on them) per reap
    assert sorted(c for c in calls if c) == ["node 0", "node 0", "node 1", "node 1"]


def test_two_nodes_report_the_validation_of_one_process(two_nodes, train_environment) -> None:
    """The trainer-agreement standard: the final weights, validated by one process, give
    the metrics the two nodes reported for them."""
    (run_dir,) = two_nodes["dirs"]
    evaluated = subprocess.run(
        [
            sys.executable,
            "-m",
            "polymimic_train.evaluate",
            f"checkpoint={run_dir / 'checkpoints' / 'last.ckpt'}",
        ],
        env=train_environment(two_nodes["tmp"]),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (summary_file,) = (run_dir / "eval").glob("*/summary.json")
    one = json.loads(summary_file.read_text())
    two = json.loads((run_dir / "summary.json").read_text())
    for key in ("val_action_error", "baseline_action_error"):
        assert one[key] == pytest.approx(two[key], rel=1e-5), key
