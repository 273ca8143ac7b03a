"""A launcher's requeue signal runs its handler at a step boundary, not mid-computation.

submitit's handler ends the process with `sys.exit`; raised inside matplotlib's drawing
it came out as a `TypeError` and failed a SLURM run at its time limit (tests-slurm). The
handlers here stand in for submitit's: they note where they ran, then exit like it.
"""

from __future__ import annotations

import contextlib
import os
import signal
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
        with pytest.raises(SystemExit):
            deferred.honour()
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is handler  # restored
    deferred.honour()  # nothing pending: nothing runs
    assert len(calls) == 1


def test_a_signal_never_honoured_runs_where_the_process_is_after_the_grace(exits_like_submitit):
    _, calls, state = exits_like_submitit
    with DeferredSignal(SIG, grace_s=0.3):
        state["busy"] = True
        os.kill(os.getpid(), SIG)
        started = time.monotonic()
        with pytest.raises(SystemExit):
            while time.monotonic() - started < 10:  # a long render with no step boundary
                time.sleep(0.01)
        elapsed = time.monotonic() - started
    assert calls == [{"signum": SIG, "busy": True}]
    assert 0.25 < elapsed < 5, elapsed


def test_a_signal_held_as_the_work_ends_is_acted_on_there_once(exits_like_submitit):
    handler, calls, _ = exits_like_submitit
    deferred = DeferredSignal(SIG, grace_s=0.3)
    with pytest.raises(SystemExit), deferred:
        os.kill(os.getpid(), SIG)
        time.sleep(0.05)
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is handler
    time.sleep(0.6)  # past the grace: the watcher re-sends nothing
    deferred.honour()  # nor does a late boundary (a validation after fit) run it again
    assert len(calls) == 1


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
        with pytest.raises(SystemExit):
            trainer.fit(BoringModel())
    assert calls == [{"signum": SIG, "busy": False}]
    assert signal.getsignal(SIG) is exits_like_submitit[0]
    # the first step boundary after the signal (sent after step 4's validation): step 5
    assert state["sent"] == 4 and trainer.global_step == 5
