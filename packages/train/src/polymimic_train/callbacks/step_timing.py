"""Where a training step's time goes: computing, or waiting for the next batch.

The wait is the time from the end of one step to the start of the next (the loader's
`next`, plus Lightning's own bookkeeping); gaps that hold a validation are left out. The
progress bar shows samples/s and the waiting share over the last `window` steps; the
run's summary gets both over the whole run, and the peak memory.
"""

from __future__ import annotations

import resource
import time
from collections import deque
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch


def _batch_samples(batch: Any) -> int:
    """Samples in a step's batch: one batch per embodiment, or a single one."""
    parts = [batch] if isinstance(batch, Mapping) and "state" in batch else batch.values()
    return sum(len(part["state"]) for part in parts)


class StepTimer(pl.Callback):
    """Samples/s and the share of time spent waiting for data (see the module docstring)."""

    def __init__(self, window: int = 50) -> None:
        self._steps: deque[tuple[float, float, int]] = deque(maxlen=window)  # wait, step, samples
        self.totals = {"wait_s": 0.0, "step_s": 0.0, "samples": 0}
        self._last_end: float | None = None
        self._started: float | None = None
        self._train_started = time.perf_counter()
        self.train_s = 0.0  # fit's training loop, validations included

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        self._started = time.perf_counter()
        self._wait = self._started - self._last_end if self._last_end is not None else 0.0

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        if self._started is None:
            return
        end = time.perf_counter()
        step, samples = end - self._started, _batch_samples(batch)
        self._steps.append((self._wait, step, samples))
        self.totals["wait_s"] += self._wait
        self.totals["step_s"] += step
        self.totals["samples"] += samples
        self._last_end = end
        wait = sum(w for w, _, _ in self._steps)
        busy = sum(s for _, s, _ in self._steps)
        pl_module.log_dict(
            {
                "samples_per_s": sum(n for _, _, n in self._steps) / max(wait + busy, 1e-9),
                "data_wait": wait / max(wait + busy, 1e-9),
            },
            prog_bar=True,
            batch_size=samples,
        )

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None  # the next gap holds this validation: not a data wait

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._last_end = None
        self._train_started = time.perf_counter()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.train_s = time.perf_counter() - self._train_started

    def summary(self) -> dict[str, float]:
        """samples/s, the share of step time spent waiting for data, and peak memory."""
        total = self.totals["wait_s"] + self.totals["step_s"]
        figures = {
            "train_s": self.train_s,
            "samples_per_s": self.totals["samples"] / total if total else 0.0,
            "data_wait_fraction": self.totals["wait_s"] / total if total else 0.0,
            "peak_cpu_memory_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        }
        if torch.cuda.is_available():
            figures["peak_gpu_memory_mb"] = torch.cuda.max_memory_allocated() / 2**20
        return figures
