"""Run directories: one per run, never shared, found again to resume.

A new run directory is `<runs_root>/<name>/<YYYY-mm-dd_HH-MM-SS>_<6 hex>`, made with an
exclusive mkdir, so two runs started in the same second never share one. `run.json`
records the run's state (`running`, `finished`, `failed`, or `requeued` between a
requeued job's lives), and a lock held while the run lives keeps a second process out of
it. It is a POSIX record lock: the kernel drops it when the process dies, however it dies,
and forked children (loader workers, which may outlive a killed parent by seconds) never
hold it. `resume` chooses the directory:

- `auto` (or null): a new directory; a requeued SLURM job re-enters its own (its config
  already names it) and resumes from its `checkpoints/last.ckpt`;
- `latest`: the newest directory of this `name` that did not finish and no live process
  holds;
- a run directory, or a checkpoint inside one: that directory;
- a checkpoint anywhere else: a new directory, starting from that checkpoint's weights.

Inside a SLURM job every task of a job step must train in one directory, and a requeued
job must come back to it, however it was launched (submitit's multirun names it for its
tasks; `srun train ...` on several nodes does not). So there the global rank 0 chooses by
the rules above and records its choice under `<runs_root>/<name>/.slurm-jobs/` keyed by
job and step; the other tasks wait for that record and take the same directory, and a
requeued job (same job and step) re-enters its unfinished directory and resumes from its
`last.ckpt`, whatever `resume` said.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import Any

from polymimic_data.store import write_json_atomic, write_text_atomic

RECORD = "run.json"
LOCK = "run.lock"
CHECKPOINTS = "checkpoints"
LAST = "last.ckpt"
SLURM_JOBS = ".slurm-jobs"
RENDEZVOUS_TIMEOUT_S = 300.0


class RunDirError(ValueError):
    """A run directory cannot be used as asked."""


def create_run_dir(runs_root: str | os.PathLike[str], name: str) -> Path:
    """A new, empty run directory, created atomically under `runs_root/name`."""
    parent = Path(runs_root) / name
    parent.mkdir(parents=True, exist_ok=True)
    for _ in range(100):
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        path = parent / f"{stamp}_{uuid.uuid4().hex[:6]}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
    raise RunDirError(f"could not create a new run directory under {parent}")


def read_record(run_dir: Path) -> dict[str, Any]:
    """The run's record (`run.json`: state, pid, host, steps), or {} where there is none."""
    try:
        return json.loads((run_dir / RECORD).read_text())
    except (OSError, ValueError):
        return {}


class LeftForRequeue(SystemExit):
    """The launcher's handler ended the process to come back requeued.

    submitit's `sys.exit` after `scontrol requeue`, raised by `runs.preemption`: the run's
    record says `requeued`, not `failed`. Its exit code is the handler's (-1 where the
    requeue command was killed before the handler could exit).
    """


def write_record(run_dir: Path, state: str, **fields: Any) -> None:
    """Update `run.json` (atomically): the state and anything else worth knowing."""
    record = read_record(run_dir) | fields | {"state": state, "updated": time.time()}
    write_json_atomic(run_dir / RECORD, record)


def is_locked(run_dir: Path) -> bool:
    """Whether a live process holds this run directory."""
    try:
        fd = os.open(run_dir / LOCK, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.lockf(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


class RunLock:
    """Held for a run's whole life; refuses a directory another live process holds.

    POSIX record locks belong to a process: they never conflict within one, and closing
    any descriptor of the file in the holding process drops them. Only `train` processes
    take it, once each; `is_locked` is for other processes (e.g. `resume=latest`).
    """

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        fd = os.open(self.run_dir / LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            holder = read_record(self.run_dir)
            raise RunDirError(
                f"run directory {self.run_dir} is in use by process {holder.get('pid', '?')} on "
                f"{holder.get('host', '?')}; wait for it to end, or start a new run"
            ) from None
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the lock
            self._fd = None


def last_checkpoint(run_dir: Path) -> Path | None:
    """`checkpoints/last.ckpt` of the run, or None before its first checkpoint."""
    last = run_dir / CHECKPOINTS / LAST
    return last if last.exists() else None


def run_dir_of(checkpoint: str | os.PathLike[str]) -> Path | None:
    """The run directory a checkpoint was saved in (`<run dir>/checkpoints/<file>`), or None.

    The one rule from a checkpoint to its run; symlinks are followed first.
    """
    parent = Path(checkpoint).resolve().parent
    return parent.parent if parent.name == CHECKPOINTS else None


def checkpoint_home(checkpoint: str | os.PathLike[str]) -> Path:
    """Where what is made from a checkpoint goes: its run directory, else its own folder."""
    return run_dir_of(checkpoint) or Path(checkpoint).resolve().parent


def latest_unfinished(runs_root: Path, name: str) -> Path | None:
    """The newest run directory of `name` that did not finish and no live process holds."""
    parent = runs_root / name
    if not parent.is_dir():
        return None
    candidates = sorted(
        (p for p in parent.iterdir() if p.is_dir() and (p / RECORD).exists()),
        key=lambda p: (p / RECORD).stat().st_mtime,
        reverse=True,
    )
    for path in candidates:
        if read_record(path).get("state") != "finished" and not is_locked(path):
            return path
    return None


def slurm_step() -> str | None:
    """`<job>.<step>` inside a SLURM job step (`batch` for the batch script), else None.

    An array task's job is `<array job>_<task>`. The same across a requeue, since a
    requeued job keeps its id and reruns its steps.
    """
    job = os.environ.get("SLURM_JOB_ID")
    if not job:
        return None
    array, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array and task:  # an array task by the name scontrol and squeue give it
        job = f"{array}_{task}"
    return f"{job}.{os.environ.get('SLURM_STEP_ID', 'batch')}"


def slurm_global_rank() -> int:
    """The global rank of this task in its SLURM job step (0 outside SLURM)."""
    return int(os.environ.get("SLURM_PROCID", "0"))


def _job_record(runs_root: Path, name: str, step: str) -> Path:
    return runs_root / name / SLURM_JOBS / step


def _wait_for_job_record(record: Path, timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while not record.exists():
        if time.monotonic() > deadline:
            raise RunDirError(
                f"SLURM task {slurm_global_rank()} waited {timeout_s:.0f} s for rank 0 to "
                f"choose the run directory ({record} never appeared): is runs_root on a file "
                "system every node shares? (paths.runs_root, POLYMIMIC_RUNS_ROOT)"
            )
        time.sleep(0.2)
    return record.read_text().strip()


def run_dir_for(
    runs_root: str,
    name: str,
    resume: str | None,
    *,
    rendezvous_timeout_s: float = RENDEZVOUS_TIMEOUT_S,
) -> str:
    """The run directory for this launch (see the module's docstring).

    Never raises for a `resume` that cannot work: it gives a new directory, and
    checkpoint_to_resume, called by the app once Hydra has set up, names the problem
    (an exception here would reach the user as an interpolation traceback). Inside a
    SLURM job the tasks agree through a record rank 0 writes (RunDirError if it never
    comes).
    """
    root = Path(runs_root)
    step = slurm_step()
    if step is None:
        return _choose_run_dir(root, name, resume)
    record = _job_record(root, name, step)
    if slurm_global_rank() != 0:
        return _wait_for_job_record(record, rendezvous_timeout_s)
    if record.exists():  # requeued: this job step's own directory, unless it finished
        earlier = Path(record.read_text().strip())
        if earlier.is_dir() and read_record(earlier).get("state") != "finished":
            return str(earlier)
    chosen = str(Path(_choose_run_dir(root, name, resume)).resolve())
    write_text_atomic(record, chosen + "\n")
    return chosen


def requeued_into(run_dir: Path) -> bool:
    """Whether this SLURM job step ran in `run_dir` before (it was requeued) and checkpointed."""
    step = slurm_step()
    return (
        step is not None
        and read_record(run_dir).get("slurm_step") == step
        and last_checkpoint(run_dir) is not None
    )


def forget_job_choice(runs_root: str | os.PathLike[str], name: str) -> None:
    """Drop this job step's record of its run directory (rank 0 removed the directory)."""
    step = slurm_step()
    if step is not None:
        _job_record(Path(runs_root), name, step).unlink(missing_ok=True)


def _choose_run_dir(root: Path, name: str, resume: str | None) -> str:
    if resume == "latest":
        found = latest_unfinished(root, name)
        if found is not None:
            return str(found)
    elif resume is not None and resume != "auto":
        path = Path(resume).expanduser()
        if path.is_dir() and _is_run_dir(path):
            return str(path.resolve())
        if path.is_file() and (owner := run_dir_of(path)) is not None:
            return str(owner)
    return str(create_run_dir(root, name))


def _is_run_dir(path: Path) -> bool:
    return (path / RECORD).exists() or (path / CHECKPOINTS).is_dir()


def checkpoint_to_resume(resume: str | None, run_dir: Path, name: str = "") -> Path | None:
    """The checkpoint this run continues from, if any; RunDirError when `resume` is unusable.

    A requeued SLURM job continues from its own `last.ckpt`, whatever `resume` says.
    """
    if resume is None or resume == "auto" or requeued_into(run_dir):
        return last_checkpoint(run_dir)  # a requeued job's own, or none
    if resume == "latest":
        if not (run_dir / RECORD).exists():  # run_dir_for found none and made a new one
            raise RunDirError(
                f"resume=latest: no unfinished run named {name!r} under {run_dir.parent.parent} "
                "(set name= to the run's name, or resume=<run dir>)"
            )
        return last_checkpoint(run_dir)
    path = Path(resume).expanduser()
    if not path.exists():
        raise RunDirError(
            f"resume={resume}: no such checkpoint or run directory "
            "(use auto, latest, a run directory or a .ckpt file)"
        )
    if path.is_dir():
        if not _is_run_dir(path):
            raise RunDirError(f"resume={resume}: not a run directory (it has no {RECORD})")
        return last_checkpoint(path)
    return path


def start(run_dir: Path, *, resumed_from: Path | None) -> RunLock:
    """Lock the run directory and mark it running; the lock lives as long as the run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir).acquire()
    write_record(
        run_dir,
        "running",
        pid=os.getpid(),
        host=socket.gethostname(),
        resumed_from=str(resumed_from) if resumed_from else None,
        slurm_step=slurm_step(),
        error=None,  # an earlier life's, resumed from
    )
    return lock


def check_resume_fits(checkpoint: Path, policy: Any) -> None:
    """The checkpoint's policy weights have the shapes of the policy this config builds."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
    saved = {k.removeprefix("policy."): v for k, v in state["state_dict"].items()}
    saved = {k: v for k, v in saved.items() if not k.startswith("normalizer.")}
    ours = policy.state_dict()
    differ = [k for k in ours if k in saved and tuple(saved[k].shape) != tuple(ours[k].shape)]
    missing = [k for k in ours if k not in saved]
    if differ or missing:
        example = (
            f"e.g. {differ[0]}: checkpoint {tuple(saved[differ[0]].shape)}, "
            f"this config {tuple(ours[differ[0]].shape)}"
            if differ
            else f"e.g. {missing[0]} is not in the checkpoint"
        )
        raise RunDirError(
            f"resume={checkpoint}: the checkpoint does not fit this model config "
            f"({len(differ)} tensors differ in shape, {len(missing)} missing; {example}); "
            "resume with the model, data and layout config it was trained with "
            "(its run directory's config.yaml)"
        )
