"""Reports the bad samples the loaders replaced, and stops a run that has too many."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl

from polymimic_data.data_faults import FaultLedger


def _batches(batch: Any) -> list[Mapping[str, Any]]:
    """A training batch is one batch per embodiment (or a single one)."""
    if isinstance(batch, Mapping) and "embodiment" in batch:
        return [batch]
    return list(batch.values()) if isinstance(batch, Mapping) else []


class DataFaultMonitor(pl.Callback):
    def __init__(self, max_bad_fraction: float) -> None:
        self.ledger = FaultLedger(max_bad_fraction=max_bad_fraction)

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        for part in _batches(batch):
            self.ledger.record(part.get("data_faults", ()), samples=len(part["state"]))
        self.ledger.check()

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.ledger.end_epoch()
        pl_module.log("data/bad_fraction", self.ledger.bad_fraction)
