"""Run directories: never shared, found again to resume, held by one live process."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from polymimic_train.runs import run_dirs
from polymimic_train.runs.run_dirs import RunDirError


def _create(root: str) -> str:
    return str(run_dirs.create_run_dir(root, "same"))


def test_runs_started_together_never_share_a_directory(tmp_path: Path) -> None:
    with multiprocessing.get_context("fork").Pool(8) as pool:
        made = pool.map(_create, [str(tmp_path)] * 64)
    assert len(set(made)) == 64
    assert sorted(p.name for p in (tmp_path / "same").iterdir()) == sorted(
        Path(m).name for m in made
    )


def _finished(run_dir: Path) -> Path:
    run_dirs.write_record(run_dir, "finished", steps=10)
    return run_dir


@contextmanager
def _held_by_another_process(run_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """The run directory locked by a live process of its own, as a running train is."""
    code = (
        "import time; from pathlib import Path; from polymimic_train.runs import run_dirs;"
        f"run_dirs.start(Path({str(run_dir)!r}), resumed_from=None); print('held', flush=True);"
        "time.sleep(120)"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def test_latest_is_the_newest_unfinished_run_no_live_process_holds(tmp_path: Path) -> None:
    older = run_dirs.create_run_dir(tmp_path, "fold")
    run_dirs.write_record(older, "failed")
    os.utime(older / run_dirs.RECORD, (1, 1))
    _finished(run_dirs.create_run_dir(tmp_path, "fold"))
    held = run_dirs.create_run_dir(tmp_path, "fold")
    with _held_by_another_process(held):
        assert run_dirs.run_dir_for(str(tmp_path), "fold", "latest") == str(older)
        with pytest.raises(RunDirError, match="in use by process"):
            run_dirs.RunLock(held).acquire()
    assert run_dirs.run_dir_for(str(tmp_path), "fold", "latest") == str(held)
    fresh = Path(run_dirs.run_dir_for(str(tmp_path), "pour", "latest"))  # none: a new one
    with pytest.raises(RunDirError, match="no unfinished run named 'pour'"):
        run_dirs.checkpoint_to_resume("latest", fresh, "pour")


def test_the_lock_dies_with_its_process_however_it_dies(tmp_path: Path) -> None:
    run_dir = run_dirs.create_run_dir(tmp_path, "x")
    with _held_by_another_process(run_dir) as holder:
        assert run_dirs.is_locked(run_dir)
        holder.kill()  # SIGKILL: no cleanup code runs
        holder.wait()
        assert not run_dirs.is_locked(run_dir)
    run_dirs.RunLock(run_dir).acquire().release()


def test_resume_names_a_run_or_a_checkpoint(tmp_path: Path) -> None:
    run_dir = run_dirs.create_run_dir(tmp_path, "n")
    run_dirs.write_record(run_dir, "failed")
    checkpoint = run_dir / "checkpoints" / "step000010.ckpt"
    checkpoint.parent.mkdir()
    checkpoint.write_bytes(b"")
    (run_dir / "checkpoints" / "last.ckpt").symlink_to("step000010.ckpt")
    assert run_dirs.run_dir_for(str(tmp_path), "n", str(run_dir)) == str(run_dir)
    assert run_dirs.run_dir_for(str(tmp_path), "n", str(checkpoint)) == str(run_dir)
    assert (
        run_dirs.checkpoint_to_resume(str(run_dir), run_dir)
        == run_dir / "checkpoints" / "last.ckpt"
    )
    assert run_dirs.checkpoint_to_resume(str(checkpoint), run_dir) == checkpoint
    elsewhere = tmp_path / "weights.ckpt"
    elsewhere.write_bytes(b"")
    fresh = Path(run_dirs.run_dir_for(str(tmp_path), "n", str(elsewhere)))
    assert fresh != run_dir and fresh.parent == run_dir.parent
    with pytest.raises(RunDirError, match="not a run directory"):
        run_dirs.checkpoint_to_resume(str(tmp_path), fresh)
    with pytest.raises(RunDirError, match="no such checkpoint or run directory"):
        run_dirs.checkpoint_to_resume(str(tmp_path / "missing"), fresh)
    assert json.loads((run_dir / run_dirs.RECORD).read_text())["state"] == "failed"


def test_two_trainings_started_at_the_same_moment_keep_their_own_records(
    tmp_path: Path, train_process
) -> None:
    overrides = ["trainer.max_steps=5", "data.synthetic.episodes=4", "data.synthetic.frames=20"]
    first = train_process(tmp_path, *overrides, "name=twin")
    second = train_process(tmp_path, *overrides, "name=twin")
    assert first.wait(timeout=600) == 0 and second.wait(timeout=600) == 0
    made = sorted((tmp_path / "runs" / "twin").iterdir())
    assert len(made) == 2
    pids = set()
    for run_dir in made:
        record = json.loads((run_dir / "run.json").read_text())
        assert record["state"] == "finished" and record["steps"] == 5
        pids.add(record["pid"])
        assert json.loads((run_dir / "summary.json").read_text())["run_dir"] == str(run_dir)
        assert (run_dir / "checkpoints" / "last.ckpt").resolve().name == "step000005.ckpt"
    assert pids == {first.pid, second.pid}


def _in_slurm_task(monkeypatch: pytest.MonkeyPatch, rank: int, job: str = "77") -> None:
    for key in ("SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", job)
    monkeypatch.setenv("SLURM_STEP_ID", "0")
    monkeypatch.setenv("SLURM_PROCID", str(rank))


def test_the_tasks_of_a_slurm_job_step_agree_on_rank_zeros_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _in_slurm_task(monkeypatch, rank=1)
    with pytest.raises(RunDirError, match=r"rank 0 .*shares"):  # rank 0 never chose
        run_dirs.run_dir_for(str(tmp_path), "fold", "auto", rendezvous_timeout_s=0.3)
    _in_slurm_task(monkeypatch, rank=0)
    chosen = run_dirs.run_dir_for(str(tmp_path), "fold", "auto")
    _in_slurm_task(monkeypatch, rank=1)
    assert run_dirs.run_dir_for(str(tmp_path), "fold", "auto") == chosen
    # another step of the same allocation (a second srun) is another run
    monkeypatch.setenv("SLURM_PROCID", "0")
    monkeypatch.setenv("SLURM_STEP_ID", "1")
    assert run_dirs.run_dir_for(str(tmp_path), "fold", "auto") != chosen


def test_a_requeued_slurm_job_resumes_in_its_own_directory_whatever_resume_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "pretrained.ckpt"
    elsewhere.write_bytes(b"")
    _in_slurm_task(monkeypatch, rank=0)
    first = Path(run_dirs.run_dir_for(str(tmp_path), "fold", str(elsewhere)))
    assert run_dirs.checkpoint_to_resume(str(elsewhere), first) == elsewhere  # first life
    run_dirs.start(first, resumed_from=elsewhere).release()
    (first / "checkpoints").mkdir()
    (first / "checkpoints" / "step000006.ckpt").write_bytes(b"")
    (first / "checkpoints" / "last.ckpt").symlink_to("step000006.ckpt")
    again = Path(run_dirs.run_dir_for(str(tmp_path), "fold", str(elsewhere)))  # requeued
    assert again == first
    assert run_dirs.checkpoint_to_resume(str(elsewhere), again) == first / "checkpoints/last.ckpt"
    # a job step whose run finished (a second `train` in one batch script) starts a new one
    run_dirs.write_record(first, "finished")
    assert Path(run_dirs.run_dir_for(str(tmp_path), "fold", "auto")) != first
    # outside SLURM, the same directory is just a run with a checkpoint
    monkeypatch.delenv("SLURM_JOB_ID")
    assert run_dirs.checkpoint_to_resume(str(elsewhere), first) == elsewhere


def test_a_new_life_keeps_the_requeue_count_and_drops_an_earlier_error(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    run_dirs.start(run_dir, resumed_from=None).release()
    run_dirs.write_record(run_dir, "requeued", requeues=1)
    run_dirs.write_record(run_dir, "failed", error="SIGTERMException: ")  # a later life
    run_dirs.start(run_dir, resumed_from=run_dir / "checkpoints" / "last.ckpt").release()
    record = run_dirs.read_record(run_dir)
    assert record["state"] == "running" and record["requeues"] == 1
    assert record["error"] is None  # the earlier life's, not this one's
    assert record["resumed_from"].endswith("last.ckpt")
