"""A launcher's preemption signal, acted on between steps rather than wherever it lands.

submitit asks Slurm for a signal (`--signal=USR2@signal_delay_s`) before a job's time
limit or on preemption. Its handler, on global rank 0, checkpoints the submission, runs
`scontrol requeue` and ends the process with `sys.exit` (other ranks log and return; with
no requeue left it raises `UncompletedJobError`). Python runs a handler between any two
bytecodes, so that `SystemExit` used to surface wherever training happened to be, and
inside a C extension's argument conversion it is not even a `SystemExit`: pybind11 (under
matplotlib's step-error plot) reported it as `TypeError: affine_transform(): incompatible
function arguments`. The run then failed with an error instead of leaving for its
requeue, submitit wrote that error as the job's result, and the launcher waiting on the
job gave up.

`DeferredSignal`, around a run's work (`app.fit`: data preparation, `trainer.fit`, the
final validation and summary), takes the signal instead, notes it, and runs the launcher's
own handler at the next step boundary (`DeferredSignalCallback`: after a training or
validation batch), where nothing is half done, or as the work ends. Work between
boundaries can be long (data preparation, a video render, a closed-loop evaluation): if
the note is not honoured within `grace_s`, the handler runs where the process is, as
before, since a late requeue beats none. The handler runs at most once. Its exit is a
`LeftForRequeue`, which `app.run` records as `requeued` rather than `failed`; from the
handler on, SIGTERM is held (`_SigtermHeld`: the requeue's own SIGTERM follows). The loader's
workers ignore the signal (polymimic-data's worker setup, under Slurm): the process that
trains acts for them.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import lightning.pytorch as pl

from polymimic_train.runs.run_dirs import LeftForRequeue

log = logging.getLogger(__name__)

Handler = Callable[[int, FrameType | None], Any]


def launcher_signal() -> signal.Signals:
    """The signal submitit asks Slurm for (its `SUBMITIT_PREEMPT_SIGNAL`, USR2 by default)."""
    name = os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    return signal.Signals[name if name.startswith("SIG") else f"SIG{name}"]


class DeferredSignal:
    """Hold `signum`'s Python handler until `honour()` (or `grace_s` has passed).

    Use as a context manager in the main thread; on exit the original handler is back, and
    a signal still held is acted on there when the work ended normally. Nothing is deferred
    when the signal has no Python handler (not launched by submitit) or off the main thread.
    """

    def __init__(self, signum: int, *, grace_s: float = 60.0) -> None:
        self.signum, self.grace_s = signum, grace_s
        self._handler: Handler | None = None  # the launcher's, while deferring: put back on exit
        self._lock = threading.Lock()  # never taken in the signal handler
        self._noted = threading.Event()  # the signal came (set on exit too: wakes the watcher)
        self._closed = threading.Event()  # the context ended
        self._claimed = False  # whoever set it runs the launcher's handler: once only
        self._overdue = False

    @property
    def name(self) -> str:
        return signal.Signals(self.signum).name

    def __enter__(self) -> DeferredSignal:
        if self._closed.is_set():
            raise RuntimeError("a DeferredSignal holds one signal, once: make a new one")
        current = signal.getsignal(self.signum)
        if callable(current) and threading.current_thread() is threading.main_thread():
            self._handler = current
            signal.signal(self.signum, self._note)
            threading.Thread(target=self._watch, name="deferred-signal", daemon=True).start()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self._handler is None:  # nothing was deferred
            return
        with self._lock:  # the watcher sends nothing from here on
            try:  # a signal it sent is run by `_note` on this call at the latest (Python
                self._closed.set()  # runs pending handlers as a Python function starts)
            finally:
                signal.signal(self.signum, self._handler)
            act = self._noted.is_set() and not self._claimed
            self._claimed = True
        self._noted.set()  # the watcher wakes, sees the context closed and ends
        if act:
            if exc_type is None:  # the end of the work is a step boundary too
                log.warning("%s: acting on it as the run ends", self.name)
                self._act(None)
            else:  # already unwinding: the launcher's signal changes nothing now
                log.warning("%s came as the run failed: not acted on", self.name)

    @property
    def active(self) -> bool:
        return self._handler is not None and not self._closed.is_set()

    def _note(self, signum: int, frame: FrameType | None) -> None:
        if self._overdue:  # re-sent by the watcher, which claimed it: act here and now
            self._overdue = False
            self._act(frame)
        elif not self._noted.is_set():
            log.warning(
                "caught %s: acting on it at the next step boundary (at most %.0f s from now)",
                self.name,
                self.grace_s,
            )
            self._noted.set()

    def _watch(self) -> None:
        """(Its own thread) after a noted signal's grace, re-send it to be run undeferred."""
        self._noted.wait()
        if self._closed.wait(timeout=self.grace_s):
            return
        with self._lock:  # sent under the lock: `__exit__` cannot restore the handler between
            if self._claimed or self._closed.is_set():  # honoured or ended meanwhile
                return
            self._claimed = self._overdue = True
            log.warning("%s not honoured within %.0f s: running it where it lands",
                        self.name, self.grace_s)  # fmt: skip
            os.kill(os.getpid(), self.signum)

    def _claim(self) -> bool:
        """Whether this caller is the one to run the launcher's handler (first come)."""
        with self._lock:
            if self._claimed:
                return False
            self._claimed = True
            return True

    def honour(self) -> None:
        """At a safe point, in the main thread: run the held handler, if a signal came."""
        if self.active and self._noted.is_set() and self._claim():
            self._act(None)

    def _act(self, frame: FrameType | None) -> None:
        """Run the launcher's handler (submitit's: checkpoint, requeue, `sys.exit`).

        Its exit becomes a `LeftForRequeue`: the run's record says requeued. So does its
        `scontrol requeue` killed by a signal: the requeue takes the job step down at once
        (SIGTERM to every process in it, the command's own included), so the command may
        die before it returns and the handler raises `CalledProcessError` instead of
        exiting; the requeue has happened all the same (seen in tests-slurm). That is a
        reading of the evidence: a `scancel` or the hard time limit at that very moment
        would also kill the command, and be recorded as a requeue with no next life.
        """
        assert self._handler is not None
        held, leaving = _SigtermHeld(), True  # leaving: SIGTERM stays held (_SigtermHeld)
        try:
            self._handler(self.signum, frame)
        except SystemExit as exc:
            raise LeftForRequeue(exc.code) from exc
        except subprocess.CalledProcessError as exc:
            if exc.returncode >= 0:  # the command failed: no requeue
                leaving = False
                raise
            log.warning("%s: %s killed by signal %d as the step was taken down for its "
                        "requeue", self.name, exc.cmd, -exc.returncode)  # fmt: skip
            raise LeftForRequeue(-1) from exc
        except BaseException:
            leaving = False
            raise
        else:
            leaving = False  # the handler returned (a rank that does not requeue)
        finally:
            if not leaving:
                held.restore()


class _SigtermHeld:
    """SIGTERM logged and kept, not acted on, from the launcher's handler on (main thread).

    The requeue (`scontrol requeue`, in submitit's handler) takes the job step down with
    SIGTERM about 0.1 s after it returns. On a quiet machine rank 0 has left `fit` by then,
    and Lightning's teardown has put back the SIGTERM handler from before it (submitit's,
    which logs). Under load the signal came while the exit still unwound inside `fit`, and
    Lightning's own handler ran: in a run of several processes it broadcasts to the other
    ranks, and the rank leaving has left the loop they are in. The broadcast waited until
    Slurm killed the step (its 4 s KillWait), so `app.run` never wrote `requeued`; the next
    life's record had no `requeues` (tests-slurm's time-limit test, in a CI of three
    lanes). Held from the handler on, SIGTERM reaches no broadcast; Lightning's teardown
    replaces the hold with the handler from before `fit` as before. A Python handler, not
    SIG_IGN: children (the `scontrol` command) keep SIGTERM's default, and Slurm's SIGKILL
    still ends a process that hangs. `restore()` (the handler did not leave) puts SIGTERM's
    handler back and sends a SIGTERM that came meanwhile again, so it is not lost.
    """

    def __init__(self) -> None:
        self._held = threading.current_thread() is threading.main_thread()
        self._came = False
        self._previous: Any = signal.signal(signal.SIGTERM, self._note) if self._held else None

    def _note(self, signum: int, frame: FrameType | None) -> None:
        self._came = True
        log.warning("SIGTERM as the run leaves for its requeue: held, leaving as requeued")

    def restore(self) -> None:
        if not self._held:
            return
        self._held = False
        previous = signal.SIG_DFL if self._previous is None else self._previous  # None: not
        signal.signal(signal.SIGTERM, previous)  # set from Python, so the default
        if self._came:
            os.kill(os.getpid(), signal.SIGTERM)


class DeferredSignalCallback(pl.Callback):
    """Honours a `DeferredSignal` after every training and validation batch."""

    def __init__(self, deferred: DeferredSignal) -> None:
        self.deferred = deferred

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.deferred.honour()

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.deferred.honour()
