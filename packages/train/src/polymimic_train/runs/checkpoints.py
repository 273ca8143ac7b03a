"""Checkpoints a killed run can always resume from, exactly.

- Every checkpoint file is written whole or not at all: to a hidden temporary file beside
  it, synced, then renamed over it (Lightning's own writer stages in the system temp dir,
  which is a non-atomic copy when that is another file system, and leaks on a kill).
- `last.ckpt` is a relative symlink to the newest complete checkpoint, replaced
  atomically (never removed first), and checkpoints are never renamed `-vN`: a resumed
  run overwrites what the killed one wrote past its last checkpoint.
- A checkpoint also carries what Lightning leaves out: the random number generators'
  states and how many metric rows had been written, so a resumed run draws the same
  noise and its metrics continue the same timeline (see ResumeState).
"""

from __future__ import annotations

import logging
import os
import random
import uuid
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import ModelCheckpoint

log = logging.getLogger(__name__)
_TMP_PREFIX = ".tmp-"


def _tmp_beside(path: Path) -> Path:
    return path.with_name(f"{_TMP_PREFIX}{path.name}-{uuid.uuid4().hex[:8]}")


class AtomicCheckpointIO(TorchCheckpointIO):
    """torch.save into a temporary file in the checkpoint's own folder, then rename."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError("AtomicCheckpointIO takes no storage_options")
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = _tmp_beside(path)
        try:
            with open(tmp, "wb") as f:
                torch.save(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)


def link_atomically(target: Path, link: Path) -> None:
    """Point `link` at `target` by a relative symlink, replacing any old link in one step."""
    tmp = _tmp_beside(link)
    os.symlink(os.path.relpath(target, link.parent), tmp)
    os.replace(tmp, link)


class RunCheckpoint(ModelCheckpoint):
    """ModelCheckpoint with an atomic `last.ckpt` link, no `-vN` copies, and the final weights."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(save_last="link", enable_version_counter=False, **kwargs)

    @staticmethod
    def _link_checkpoint(trainer: pl.Trainer, filepath: str, linkpath: str) -> None:
        if trainer.is_global_zero and os.path.abspath(filepath) != os.path.abspath(linkpath):
            link_atomically(Path(filepath), Path(linkpath))
        trainer.strategy.barrier()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """The final weights too, when the last step was not a validation step."""
        if self._should_skip_saving_checkpoint(trainer):  # e.g. already saved at this step
            return
        candidates = self._monitor_candidates(trainer)
        self._save_topk_checkpoint(trainer, candidates)
        self._save_last_checkpoint(trainer, candidates)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        if trainer.is_global_zero and self.dirpath and os.path.isdir(self.dirpath):
            for stale in Path(self.dirpath).glob(f"{_TMP_PREFIX}*"):  # left by a kill
                stale.unlink(missing_ok=True)


def _rng_states() -> dict[str, Any]:
    """Every generator's state as tensors and plain values (checkpoints load weights_only)."""
    legacy = np.random.get_state(legacy=True)
    assert isinstance(legacy, tuple)  # (legacy=True: the MT19937 tuple, never a dict)
    name, keys, pos, has_gauss, cached = legacy
    states: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": [name, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, cached],
        "python": random.getstate(),
    }
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state_all()
    return states


def _set_rng_states(states: dict[str, Any]) -> None:
    torch.set_rng_state(states["torch"])
    name, keys, pos, has_gauss, cached = states["numpy"]
    np.random.set_state((name, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
    version, internal, gauss = states["python"]
    random.setstate((version, tuple(internal), gauss))
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(states["cuda"])


class ResumeState(pl.Callback):
    """Saves RNG states and metric rows written with each checkpoint; restores them.

    Restored at the start of training, after Lightning has rebuilt everything else, so
    nothing between the restore and the first step draws from the generators.
    """

    def __init__(self) -> None:
        self._loaded: dict[str, Any] | None = None

    @staticmethod
    def _metric_logs(trainer: pl.Trainer) -> list[Any]:
        return [lg for lg in trainer.loggers if hasattr(lg, "truncate_rows")]

    def state_dict(self) -> dict[str, Any]:
        trainer = getattr(self, "_trainer", None)
        rows = [lg.rows_written for lg in self._metric_logs(trainer)] if trainer else []
        return {"rng": _rng_states(), "metric_rows": rows}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._loaded = state_dict

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._trainer = trainer

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self._loaded is None:
            return
        _set_rng_states(self._loaded["rng"])
        for logger, rows in zip(
            self._metric_logs(trainer), self._loaded["metric_rows"], strict=False
        ):
            logger.truncate_rows(rows)
        self._loaded = None
