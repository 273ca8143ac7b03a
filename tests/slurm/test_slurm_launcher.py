"""`train -m hydra/launcher=slurm trainer=ddp trainer.devices=2` on a real SLURM cluster:
submitit submits two jobs of two tasks each (gloo), one runs uninterrupted and one is
requeued mid-run (`scontrol requeue`, as a preemption does). The requeued job comes back
into its own run directory, resumes from its last.ckpt, and ends with the uninterrupted
job's weights, bit for bit, and a metrics.csv holding every step once.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

import pytest
import torch

from .cluster import Cluster

STEPS = 24
RUN = [
    "-m",
    "hydra/launcher=slurm",
    "trainer=ddp",
    "trainer.devices=2",
    "trainer.accelerator=cpu",
    f"trainer.max_steps={STEPS}",
    "trainer.val_check_interval=6",
    "trainer.log_every_n_steps=1",
    "trainer.enable_progress_bar=false",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=30",
    "data.num_workers=1",  # the loader's worker must resume too
    "data.batch_size=4",
    "data.norm.num_samples=50",
    "data.synthetic.episodes=4",
    "data.synthetic.frames=24",
    "model.d_model=32",
    "model.num_heads=2",
    "model.image_tokens=2",
    "callbacks.trajectory_video.max_frames=4",
]
TIMING_COLUMNS = {"samples_per_s", "data_wait"}  # wall-clock figures: never equal


def _train(*overrides: str) -> list[str]:
    """`train` with RUN's settings, `overrides` replacing those of the same key."""
    keys = {o.partition("=")[0] for o in overrides}
    kept = [o for o in RUN if o.partition("=")[0] not in keys]
    return [sys.executable, "-m", "polymimic_train", *kept, *overrides]


def _wait(ready, timeout_s: float, what: str, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        if process.poll() is not None:
            raise AssertionError(f"`train -m` ended before {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {timeout_s:.0f} s")
        time.sleep(0.2)


def _run_dir(tmp: Path, name: str) -> Path | None:
    found = sorted((tmp / "runs").glob("*/multirun_*/*/run.json"))
    for record in found:
        config = (record.parent / ".hydra" / "config.yaml").read_text()
        if f"name: {name}\n" in config:
            return record.parent
    return None


def _launch(tmp: Path, env: dict[str, str], *overrides: str) -> tuple[subprocess.Popen, IO]:
    """`train -m ...` started in `tmp`, its output into `tmp/train-m.log` (returned open)."""
    log = (tmp / "train-m.log").open("w")
    launcher = subprocess.Popen(
        _train(*overrides), env=env, cwd=tmp, stdout=log, stderr=subprocess.STDOUT, text=True
    )
    return launcher, log


def _appearing_run_dir(tmp: Path, name: str, launcher: subprocess.Popen) -> Path:
    """The run directory of the job named `name`, once its first task has made it."""
    _wait(lambda: _run_dir(tmp, name) is not None, 600, f"the run directory of {name}", launcher)
    run_dir = _run_dir(tmp, name)
    assert run_dir is not None
    return run_dir


def _job_of_record(run_dir: Path) -> str:
    """The SLURM job (an array task's own id) that trains in `run_dir`."""
    return str(json.loads((run_dir / "run.json").read_text())["slurm_step"]).split(".")[0]


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        return [{k: v for k, v in r.items() if k not in TIMING_COLUMNS} for r in csv.DictReader(f)]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    last = run_dir / "checkpoints" / "last.ckpt"
    return torch.load(last, map_location="cpu", weights_only=True)["state_dict"]


def _requeue_scenario(cluster: Cluster, env: dict[str, str], tmp: Path) -> dict:
    """Two jobs from one multirun, one requeued by `scontrol` after its second checkpoint."""
    launcher, log = _launch(tmp, env, "name=whole,requeued")
    try:
        run_dir = _appearing_run_dir(tmp, "requeued", launcher)
        _wait(
            lambda: (run_dir / "checkpoints" / "step000012.ckpt").exists(),
            600,
            "the second checkpoint",
            launcher,
        )
        job = _job_of_record(run_dir)
        cluster.run("scontrol", "requeue", job)  # what a preemption does
        _wait(
            lambda: cluster.job_field(job, "JobState") == "PENDING",
            60,
            "the requeued job pending",
            launcher,
        )
        restarts = cluster.job_field(job, "Restarts")
        # Slurm holds a requeued job back for a while (its BeginTime): let it go now
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        code = launcher.wait(timeout=900)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        log.close()
    assert code == 0, (tmp / "train-m.log").read_text()[-4000:]
    whole = _run_dir(tmp, "whole")
    assert whole is not None
    return {"tmp": tmp, "whole": whole, "requeued": run_dir, "job": job, "restarts": restarts}


def _two_node_scenario(cluster: Cluster, env: dict[str, str], tmp: Path) -> dict:
    """The uninterrupted job again, as one task on each of two nodes (two slurmd)."""
    with (tmp / "train-m.log").open("w") as log:
        code = subprocess.run(
            _train("name=two_nodes", "trainer.devices=1", "trainer.num_nodes=2"),
            env=env,
            cwd=tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=900,
        ).returncode
    assert code == 0, (tmp / "train-m.log").read_text()[-4000:]
    run_dir = _run_dir(tmp, "two_nodes")
    assert run_dir is not None
    return {"tmp": tmp, "dir": run_dir}


@pytest.fixture(scope="module")
def scenarios(cluster: Cluster, job_env, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Every scenario at once (the cluster has room for their four jobs): CI minutes less."""
    scenarios = {
        "requeue": _requeue_scenario,
        "limit": _time_limit_scenario,
        "two_nodes": _two_node_scenario,
    }
    tmps = {n: Path(tmp_path_factory.mktemp(n)) for n in scenarios}
    with ThreadPoolExecutor(len(scenarios)) as pool:
        futures = {
            n: pool.submit(run, cluster, job_env(tmps[n]), tmps[n]) for n, run in scenarios.items()
        }
        return {n: f.result() for n, f in futures.items()}


@pytest.fixture(scope="module")
def jobs(scenarios) -> dict:
    return scenarios["requeue"]


@pytest.fixture(scope="module")
def timed_out(scenarios) -> dict:
    return scenarios["limit"]


def test_the_requeued_job_was_really_requeued_and_resumed_in_its_run_directory(jobs) -> None:
    assert jobs["restarts"] == "1"
    record = json.loads((jobs["requeued"] / "run.json").read_text())
    assert record["state"] == "finished" and record["steps"] == STEPS
    assert record["resumed_from"].endswith("last.ckpt")  # not from scratch
    # each job of the multirun in <runs_root>/<its name>/multirun_<time>/<job number>: the
    # requeued job's second life made no second directory
    assert [p.name for p in jobs["requeued"].parent.iterdir()] == ["1"]
    assert [p.name for p in jobs["whole"].parent.iterdir()] == ["0"]


def test_requeued_weights_and_metrics_equal_the_uninterrupted_job(jobs) -> None:
    ours, theirs = _weights(jobs["whole"]), _weights(jobs["requeued"])
    assert ours.keys() == theirs.keys()
    for key in ours:  # bit for bit: same data order on both ranks, same noise
        assert torch.equal(ours[key], theirs[key]), key
    rows = _rows(jobs["requeued"])
    assert rows == _rows(jobs["whole"])
    trained = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert sorted(trained) == list(range(STEPS)), trained  # every step once
    assert list((jobs["requeued"] / "metrics").glob("abandoned-*.csv"))


def test_two_nodes_train_in_one_directory_like_one_node(scenarios) -> None:
    """One task on each of two nodes: one run directory written by global rank 0, both
    nodes in one world, and the validation of two tasks on one node. Not bit for bit:
    the weights drift apart in the 4th digit within 24 steps (0.0790 against 0.0787 in
    validation here), which this test bounds at 2% until the cause is found."""
    two = scenarios["two_nodes"]
    record = json.loads((two["dir"] / "run.json").read_text())
    assert record["state"] == "finished" and record["steps"] == STEPS
    assert [p.name for p in two["dir"].parent.iterdir() if p.name.isdigit()] == ["0"]
    logs = "".join(p.read_text() for p in two["dir"].parent.glob(".submitit/*/*_log.out"))
    for rank in (0, 1):
        assert f"GLOBAL_RANK: {rank}, MEMBER: {rank + 1}/2" in logs
    ours = json.loads((two["dir"] / "summary.json").read_text())
    theirs = json.loads((scenarios["requeue"]["whole"] / "summary.json").read_text())
    assert ours["val_action_error"] == pytest.approx(theirs["val_action_error"], rel=0.02)
    lines = filter(None, (two["tmp"] / "nvidia-smi.log").read_text().split("\n"))
    calls = sorted((node, rank) for node, _job, rank in (line.split() for line in lines))
    # the reaper ran on each node, by the node's first task (global ranks 0 and 1)
    assert calls == [("node0", "0")] * 2 + [("node1", "1")] * 2, calls


def test_each_job_has_its_own_cache_and_the_reaper_ran_once_per_node(jobs) -> None:
    caches = [p.name for p in (jobs["tmp"] / "cache" / "episode_index").iterdir()]
    assert len(caches) == 2 and all(c.startswith("slurm-") for c in caches), caches
    calls = (jobs["tmp"] / "nvidia-smi.log").read_text().split("\n")
    by_job: dict[str, list[str]] = {}
    for call in filter(None, calls):
        _host, job, rank = call.split()
        by_job.setdefault(job, []).append(rank)
    assert {f"slurm-{job}" for job in by_job} == set(caches)
    # one reap (two nvidia-smi queries) by the node's first task per start: the requeued
    # job started twice
    assert sorted(by_job.values()) == [["0"] * 2, ["0"] * 4], by_job


def _elapsed_s(cluster: Cluster, job: str) -> int:
    """How long the job has run, from `scontrol`'s RunTime ([d-]hh:mm:ss)."""
    days, _, clock = cluster.job_field(job, "RunTime").rpartition("-")
    h, m, s = (int(x) for x in clock.split(":"))
    return int(days or 0) * 86400 + h * 3600 + m * 60 + s


SIGNAL_DELAY_S = 120


def _time_limit_scenario(cluster: Cluster, env: dict[str, str], tmp: Path) -> dict:
    """A job that reaches its time limit mid-run: Slurm sends the launcher's signal
    (`--signal=USR2@signal_delay_s`) and submitit requeues it; the second life is watched
    until it has checkpointed past where the first one stopped, then cancelled."""
    job = ""
    launcher, log = _launch(
        tmp,
        env,
        "name=limited",
        "trainer.max_steps=100000",  # far beyond the time limit
        "trainer.val_check_interval=6",
        "data.num_workers=0",
        "callbacks.trajectory_video.every_n_validations=1000",
        f"hydra.launcher.signal_delay_s={SIGNAL_DELAY_S}",
    )
    try:
        run_dir = _appearing_run_dir(tmp, "limited", launcher)
        checkpoints = run_dir / "checkpoints"
        _wait(lambda: (checkpoints / "step000006.ckpt").exists(), 600, "a checkpoint", launcher)
        job = _job_of_record(run_dir)
        # Now cut the job's time limit so that the signal is due 10-70 s from now (Slurm
        # keeps limits in minutes, and sends the signal by its own clock, up to ~30 s early)
        minutes = -(-(_elapsed_s(cluster, job) + SIGNAL_DELAY_S + 10) // 60)
        cluster.run("scontrol", "update", f"JobId={job}", f"TimeLimit={minutes}")
        # requeued, and done completing (an earlier StartTime=now is overwritten)
        requeued = lambda: (  # noqa: E731
            cluster.job_field(job, "Restarts") == "1"
            and cluster.job_field(job, "JobState") == "PENDING"
        )
        _wait(requeued, 180, "the job requeued", launcher)
        stopped_at = max(int(p.stem[4:]) for p in checkpoints.glob("step*.ckpt"))
        # the second life may run as long as it needs; let it go at once
        cluster.run("scontrol", "update", f"JobId={job}", "TimeLimit=30")
        cluster.run("scontrol", "update", f"JobId={job}", "StartTime=now")
        beyond = checkpoints / f"step{stopped_at + 6:06d}.ckpt"
        _wait(beyond.exists, 600, f"{beyond.name} in the second life", launcher)
        record = json.loads((run_dir / "run.json").read_text())
        rows = _rows(run_dir)
    finally:
        if job:
            cluster.run("scancel", job, check=False)
        launcher.kill()
        launcher.wait()
        log.close()
    submitit_logs = "".join(
        p.read_text() for p in (tmp / "runs").glob("*/multirun_*/.submitit/*/*_log.err")
    ) + "".join(p.read_text() for p in (tmp / "runs").glob("*/multirun_*/.submitit/*/*_log.out"))
    return {"dir": run_dir, "record": record, "rows": rows, "stopped_at": stopped_at,
            "logs": submitit_logs, "tmp": tmp}  # fmt: skip


def test_a_job_at_its_time_limit_is_signalled_requeued_and_resumes_in_its_directory(
    timed_out,
) -> None:
    assert "Caught signal SIGUSR2" in timed_out["logs"]  # the launcher's signal, not a kill
    # and its handler (sys.exit) ran at a step boundary, not inside whatever was running
    assert "caught SIGUSR2: acting on it at the next step boundary" in timed_out["logs"]
    assert "not honoured within" not in timed_out["logs"]
    assert timed_out["stopped_at"] >= 6
    record = timed_out["record"]
    assert record["state"] == "running"  # the second life, cancelled by the test
    # the first life was recorded as left for its requeue (it said `failed: SystemExit: -1`)
    assert record["requeues"] == 1 and record.get("error") is None, record
    assert record["resumed_from"].endswith("last.ckpt")
    jobs_dirs = [p.name for p in timed_out["dir"].parent.iterdir() if p.name.isdigit()]
    assert jobs_dirs == [timed_out["dir"].name]  # the second life made no other
    trained = [int(r["step"]) for r in timed_out["rows"] if r.get("train/loss")]
    assert trained == sorted(set(trained)), "a step logged twice"
    assert trained[:12] == list(range(12))
