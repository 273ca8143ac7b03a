"""A launcher's requeue signal runs its handler at a step boundary, not mid-computation.

submitit's handler ends the process with `sys.exit`; raised inside matplotlib's drawing
it came out as a `TypeError` and failed a SLURM run at its time limit (tests-slurm). The
handlers here stand in for submitit's: they note where they ran, then exit like it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import lightning.pytorch as pl
import pytest
import torch
from lightning.pytorch.demos.boring_classes import BoringModel

from polymimic_train.runs.preemption import (
    DeferredSignal,
    DeferredSignalCallback,
    launcher_signal,
)
from polymimic_train.runs.run_dirs import LeftForRequeue

SIG = signal.SIGUSR2


@pytest.fixture
def exits_like_submitit():
    """A Python handler on SIGUSR2 that records its calls and raises SystemExit."""
    calls: list[dict[str, Any]] = []
    state: dict[str, Any] = {"busy": False}

    def handler(signum: int, frame: Any) -> None:
        calls.append({"signum": signum, "busy": state["busy"]})
        raise SystemExit(-1)

    previous = signal.signal(SIG, handler)
    yield handler, calls, state
    signal.signal(SIG, previous)


def test_the_signal_waits_for_honour_then_runs_the_launchers_handler(exits_like_submitit):
    handler, calls, state = exits_like_submitit
    with DeferredSignal(SIG, grace_s=30) as deferred:
        assert deferred.active and signal.getsignal(SIG) != handler
        state["busy"] = True
        os.kill(os.getpid(), SIG)  # Python runs handlers right after this call returns
        time.sleep(0.05)
        state["busy"] = False  # the half-done work is done
        assert calls == []
        with pytest.raises(LeftForRequeue) as left:  # a SystemExit: the process still ends
            deferred.honour()
        assert left.value.code == -1  # the launcher's own exit code
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is handler  # restored
    deferred.honour()  # nothing pending: nothing runs
    assert len(calls) == 1


@pytest.mark.parametrize("returncode", [-signal.SIGTERM, 1])
def test_a_requeue_command_killed_by_the_requeue_is_a_requeue_a_failed_one_is_not(returncode):
    """`scontrol requeue` takes the step down at once, itself included: killed by SIGTERM
    before it returned, submitit's handler raised `CalledProcessError`, not its exit."""

    def requeue_then_exit(signum: int, frame: Any) -> None:
        subprocess.check_call(["sh", "-c", f"kill -{abs(returncode)} $$" if returncode < 0
                               else f"exit {returncode}"])  # fmt: skip
        raise SystemExit(-1)  # not reached

    previous = signal.signal(SIG, requeue_then_exit)
    try:
        with DeferredSignal(SIG, grace_s=30) as deferred:
            os.kill(os.getpid(), SIG)
            time.sleep(0.05)
            expected = LeftForRequeue if returncode < 0 else subprocess.CalledProcessError
            with pytest.raises(expected):
                deferred.honour()
    finally:
        signal.signal(SIG, previous)


@pytest.fixture(autouse=True)
def sigterm_as_it_was():
    """SIGTERM's handler put back after each test (a requeue's exit leaves it held)."""
    previous = signal.getsignal(signal.SIGTERM)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def lightnings_sigterm():
    """SIGTERM's handler as Lightning's is in a run of several processes: it broadcasts to
    the other ranks, a collective that a rank leaving for its requeue cannot complete (here
    it raises at once; under Slurm it waited for the step's kill). Records its calls."""
    calls: list[int] = []

    def broadcasts(signum: int, frame: Any) -> None:
        calls.append(signum)
        raise RuntimeError("a broadcast to ranks that left the loop")

    signal.signal(signal.SIGTERM, broadcasts)
    return broadcasts, calls


def test_the_requeues_sigterm_does_not_reach_lightnings_handler(lightnings_sigterm):
    """`scontrol requeue` takes the step down with SIGTERM as the exit unwinds. Under load
    (tests-slurm in three CI lanes) it reached Lightning's handler inside `fit`, whose
    broadcast waited for the step's kill, and `run.json` never said `requeued`."""
    _, calls = lightnings_sigterm

    def requeue_then_exit(signum: int, frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the takedown, landing before the exit
        raise SystemExit(-1)

    previous = signal.signal(SIG, requeue_then_exit)
    try:
        with DeferredSignal(SIG, grace_s=30) as deferred:
            os.kill(os.getpid(), SIG)
            time.sleep(0.05)
            with pytest.raises(LeftForRequeue):
                deferred.honour()
            os.kill(os.getpid(), signal.SIGTERM)  # another, as the run is being recorded
            time.sleep(0.05)
        assert calls == []
        held = signal.getsignal(signal.SIGTERM)
        assert getattr(held, "__qualname__", "") == "_SigtermHeld._note"  # leaving: held
    finally:
        signal.signal(SIG, previous)


def test_a_handler_that_does_not_requeue_gives_sigterm_back_and_what_came() -> None:
    """On a rank other than 0 submitit's handler logs and returns: the run goes on, SIGTERM
    is Lightning's again, and one that came while it ran is handed to it, not lost."""
    calls: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, frame: calls.append(signum))
    handler = signal.getsignal(signal.SIGTERM)

    def logs_and_returns(signum: int, frame: Any) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the step taken down meanwhile

    previous = signal.signal(SIG, logs_and_returns)
    try:
        with DeferredSignal(SIG, grace_s=30) as deferred:
            os.kill(os.getpid(), SIG)
            time.sleep(0.05)
            deferred.honour()
            time.sleep(0.05)
            assert signal.getsignal(signal.SIGTERM) is handler
            assert calls == [signal.SIGTERM]  # held while the handler ran, then handed on
    finally:
        signal.signal(SIG, previous)


def test_a_signal_never_honoured_runs_where_the_process_is_after_the_grace(exits_like_submitit):
    _, calls, state = exits_like_submitit
    with DeferredSignal(SIG, grace_s=0.3):
        state["busy"] = True
        os.kill(os.getpid(), SIG)
        started = time.monotonic()
        with pytest.raises(LeftForRequeue):
            while time.monotonic() - started < 10:  # a long render with no step boundary
                time.sleep(0.01)
        elapsed = time.monotonic() - started
    assert calls == [{"signum": SIG, "busy": True}]
    assert 0.25 < elapsed < 5, elapsed


def test_a_signal_held_as_the_work_ends_is_acted_on_there_once(exits_like_submitit):
    handler, calls, _ = exits_like_submitit
    deferred = DeferredSignal(SIG, grace_s=0.3)
    with pytest.raises(LeftForRequeue), deferred:
        os.kill(os.getpid(), SIG)
        time.sleep(0.05)
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is handler
    time.sleep(0.6)  # past the grace: the watcher re-sends nothing
    deferred.honour()  # nor does a late boundary (a validation after fit) run it again
    assert len(calls) == 1


def test_a_deferred_signal_is_used_once(exits_like_submitit):
    _, calls, _ = exits_like_submitit
    deferred = DeferredSignal(SIG, grace_s=30)
    with deferred:
        pass
    with pytest.raises(RuntimeError, match="once"), deferred:
        pass
    assert calls == []


def test_a_signal_held_as_the_work_fails_is_not_acted_on(exits_like_submitit):
    _, calls, _ = exits_like_submitit
    with pytest.raises(ValueError, match="the work failed"), DeferredSignal(SIG, grace_s=0.3):
        os.kill(os.getpid(), SIG)
        raise ValueError("the work failed")
    time.sleep(0.6)
    assert calls == []


def test_honoured_just_as_the_grace_ends_the_handler_runs_once(exits_like_submitit):
    """The boundary and the watcher race for it: whoever claims it first runs it."""
    _, calls, _ = exits_like_submitit
    for _ in range(5):
        calls.clear()
        with DeferredSignal(SIG, grace_s=0.05) as deferred:
            os.kill(os.getpid(), SIG)
            started = time.monotonic()
            with contextlib.suppress(SystemExit):
                while time.monotonic() - started < 3:
                    deferred.honour()  # a boundary at every instant, the watcher beside it
            with contextlib.suppress(SystemExit):
                time.sleep(0.2)  # a re-sent signal would land here
        assert len(calls) == 1


def test_without_a_python_handler_nothing_is_deferred():
    previous = signal.signal(SIG, signal.SIG_IGN)
    try:
        with DeferredSignal(SIG) as deferred:
            assert not deferred.active and signal.getsignal(SIG) == signal.SIG_IGN
            deferred.honour()
    finally:
        signal.signal(SIG, previous)


def test_launcher_signal_follows_submitits_variable(monkeypatch):
    monkeypatch.delenv("SUBMITIT_PREEMPT_SIGNAL", raising=False)
    assert launcher_signal() == signal.SIGUSR2
    monkeypatch.setenv("SUBMITIT_PREEMPT_SIGNAL", "USR1")
    assert launcher_signal() == signal.SIGUSR1


class SignalledDuringAPlot(pl.Callback):
    """The signal arrives in the middle of post-validation work (the step-error plot)."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.state.get("sent"):
            return
        self.state["busy"], self.state["sent"] = True, trainer.global_step
        os.kill(os.getpid(), SIG)
        self.state["drawn"] = torch.ones(64, 64) @ torch.ones(64, 64)  # the rest of the drawing
        self.state["busy"] = False


def test_in_a_fit_the_handler_runs_after_the_next_batch_not_inside_the_callback(
    exits_like_submitit, tmp_path
):
    _, calls, state = exits_like_submitit
    with DeferredSignal(SIG, grace_s=30) as deferred:
        trainer = pl.Trainer(
            default_root_dir=tmp_path,
            max_steps=20,
            val_check_interval=4,
            limit_val_batches=2,
            num_sanity_val_steps=0,
            callbacks=[SignalledDuringAPlot(state), DeferredSignalCallback(deferred)],
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            accelerator="cpu",
        )
        with pytest.raises(LeftForRequeue):
            trainer.fit(BoringModel())
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is exits_like_submitit[0]
    # the first step boundary after the signal (sent after step 4's validation): step 5
    assert state["sent"] == 4 and trainer.global_step == 5


# `train` with a stand-in for submitit's handler on USR2, and a callback that sends USR2 after
# training step 3 (from a module the test writes: Hydra instantiates it by name)
_SUBMITIT_LIKE = """
import runpy, signal, sys
signal.signal(signal.SIGUSR2, lambda signum, frame: sys.exit(-1))  # requeued; now leave
runpy.run_module("polymimic_train", run_name="__main__")
"""
_PROBE = """
import os, signal
import lightning.pytorch as pl

class SignalAtStep(pl.Callback):
    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, *args):
        if trainer.global_step == self.step:
            os.kill(os.getpid(), signal.SIGUSR2)
"""


def test_a_run_left_for_its_requeue_is_recorded_requeued_not_failed(
    tmp_path, train_argv, train_environment
):
    """Between a requeued job's lives its `run.json` said `failed: SystemExit: -1`."""
    (tmp_path / "probe").mkdir()
    (tmp_path / "probe" / "requeue_probe.py").write_text(_PROBE)
    run_dir = tmp_path / "run"
    argv = train_argv(
        f"hydra.run.dir={run_dir}",
        "data.synthetic.episodes=4",
        "data.synthetic.frames=20",
        "trainer.max_steps=8",
        "+callbacks.probe._target_=requeue_probe.SignalAtStep",
        "+callbacks.probe.step=3",
    )
    assert argv[1:3] == ["-m", "polymimic_train"]
    env = train_environment(tmp_path) | {"PYTHONPATH": str(tmp_path / "probe")}
    result = subprocess.run(
        [sys.executable, "-c", _SUBMITIT_LIKE, *argv[3:]],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 255, result.stderr[-3000:]  # sys.exit(-1), as the launcher
    assert "acting on it at the next step boundary" in (run_dir / "app.log").read_text()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["state"] == "requeued" and record["requeues"] == 1, record
    assert "error" not in record or record["error"] is None, record
