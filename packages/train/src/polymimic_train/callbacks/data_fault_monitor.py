"""Reports the bad samples the loaders replaced (training and validation); stops at too many."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl

from polymimic_data.samples import FaultLedger


def _batches(batch: Any) -> list[Mapping[str, Any]]:
    """A training batch is one batch per embodiment (or a single one)."""
    if isinstance(batch, Mapping) and "embodiment" in batch:
        return [batch]
    return list(batch.values()) if isinstance(batch, Mapping) else []


def _record(ledger: FaultLedger, batch: Any) -> None:
    for part in _batches(batch):
        ledger.record(part.get("data_faults", ()), samples=len(part["state"]))
    ledger.check()


class DataFaultMonitor(pl.Callback):
    """One ledger for training samples, one for validation samples; the same limit for both."""

    def __init__(self, max_bad_fraction: float, min_samples: int = 1000) -> None:
        self.ledger = FaultLedger(max_bad_fraction=max_bad_fraction, min_samples=min_samples)
        self.val_ledger = FaultLedger(max_bad_fraction=max_bad_fraction, min_samples=min_samples)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        _record(self.ledger, batch)

    def on_validation_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
        dataloader_idx: int = 0,
    ) -> None:
        _record(self.val_ledger, batch)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.ledger.end_epoch("in this training epoch")
        pl_module.log("data/bad_fraction", self.ledger.bad_fraction)

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.val_ledger.end_epoch("in validation")
        if not trainer.sanity_checking:
            pl_module.log("data/val_bad_fraction", self.val_ledger.bad_fraction)

    def counts(self) -> dict[str, int]:
        """Bad samples met so far, for the run's summary."""
        return {
            "train_samples": self.ledger.samples,
            "train_bad_samples": self.ledger.bad_samples,
            "val_samples": self.val_ledger.samples,
            "val_bad_samples": self.val_ledger.bad_samples,
        }
