"""A launcher's preemption signal, acted on between steps rather than wherever it lands.

submitit asks Slurm for a signal (`--signal=USR2@signal_delay_s`) before a job's time
limit or on preemption, and its handler checkpoints the submission, runs `scontrol
requeue` and ends the process with `sys.exit`. Python runs a handler between any two
bytecodes, so that `SystemExit` used to surface wherever training happened to be, and
inside a C extension's argument conversion it is not even a `SystemExit`: pybind11 (under
matplotlib's step-error plot) reported it as `TypeError: affine_transform(): incompatible
function arguments`. The run then failed with an error instead of leaving for its
requeue, submitit wrote that error as the job's result, and the launcher waiting on the
job gave up.

`DeferredSignal` takes the signal instead, notes it, and runs the launcher's own handler at
the next step boundary (`DeferredSignalCallback`: after a training or validation batch),
where nothing is half done. Work between boundaries can be long (a video render, the data
preparation before the first step): if the note is not honoured within `grace_s`, the
handler runs where the process is, as before, since a late requeue beats none.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

import lightning.pytorch as pl

log = logging.getLogger(__name__)

Handler = Callable[[int, FrameType | None], Any]


def launcher_signal() -> signal.Signals:
    """The signal submitit asks Slurm for (its `SUBMITIT_PREEMPT_SIGNAL`, USR2 by default)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]


class DeferredSignal:
    """Hold `signum`'s Python handler until `honour()` (or `grace_s` has passed).

    Use as a context manager in the main thread; on exit the original handler is back.
    Nothing is deferred when the signal has no Python handler (not launched by submitit).
    """

    def __init__(self, signum: int, *, grace_s: float = 60.0) -> None:
        self.signum, self.grace_s = signum, grace_s
        self.original: Handler | None = None
        self.noted_at: float | None = None
        self._overdue = False
        self._timer: threading.Timer | None = None

    def __enter__(self) -> DeferredSignal:
        current = signal.getsignal(self.signum)
        if callable(current):
            self.original = current
            signal.signal(self.signum, self._note)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        if self.original is not None:
            signal.signal(self.signum, self.original)
        if self.noted_at is not None:  # the work ended first; what is left is short
            log.warning("%s came as the work ended: not acted on", signal.Signals(self.signum).name)

    @property
    def active(self) -> bool:
        return self.original is not None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self._overdue:  # the grace has passed: act here and now
            self._run(frame)
            return
        if self.noted_at is not None:
            return
        self.noted_at = time.monotonic()
        log.warning(
            "caught %s: acting on it at the next step boundary (at most %.0f s from now)",
            signal.Signals(signum).name,
            self.grace_s,
        )
        self._timer = threading.Timer(self.grace_s, self._overdue_now)
        self._timer.daemon = True
        self._timer.start()

    def _overdue_now(self) -> None:
        """(Timer thread) no boundary came in time: deliver the signal again, undeferred."""
        if self.noted_at is None:  # honoured meanwhile
            return
        self._overdue = True
        log.warning(
            "%s not honoured within %.0f s: running its handler where the process is",
            signal.Signals(self.signum).name,
            self.grace_s,
        )
        os.kill(os.getpid(), self.signum)

    def honour(self) -> None:
        """At a safe point, in the main thread: run the held handler, if a signal came."""
        if self.noted_at is not None and not self._overdue:
            self._run(None)

    def _run(self, frame: FrameType | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.noted_at, self._overdue = None, False
        assert self.original is not None
        self.original(self.signum, frame)  # submitit's: checkpoint, requeue, sys.exit


class DeferredSignalCallback(pl.Callback):
    """Honours a `DeferredSignal` after every training and validation batch."""

    def __init__(self, deferred: DeferredSignal) -> None:
        self.deferred = deferred

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.deferred.honour()

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.deferred.honour()
