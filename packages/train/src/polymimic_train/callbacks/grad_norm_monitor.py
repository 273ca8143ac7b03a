"""Gradient-norm statistics for diagnosis: median, MAD and spikes over a window.

The global norm of the gradients is taken just before each optimizer step (after AMP
unscaling, before gradient clipping), kept on the device, and brought to the host once
every `log_every_n_steps`, so watching never stalls the step. Under FSDP, where each rank
holds a shard of the gradients, the squared norms are summed over ranks at that point (one
collective per logging interval). The callback only reads gradients; training is the same
with it or without it.
"""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl
import torch
from lightning.pytorch.strategies import FSDPStrategy

from polymimic_eval import GradNormStats


class GradNormMonitor(pl.Callback):
    """Logs `grad_norm/{last,median,mad,spikes,nonfinite}` (see the module docstring)."""

    def __init__(
        self,
        window: int = 200,
        k: float = 6.0,
        min_history: int = 20,
        log_every_n_steps: int | None = None,
    ) -> None:
        """Logs `grad_norm/{last,median,mad,spikes,nonfinite}`.

        `log_every_n_steps` defaults to the trainer's.
        """
        self.stats = GradNormStats(window=window, k=k, min_history=min_history)
        self.log_every_n_steps = log_every_n_steps
        self.pending: list[torch.Tensor] = []

    def on_before_optimizer_step(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, optimizer: Any
    ) -> None:
        grads = [p.grad.detach() for p in pl_module.parameters() if p.grad is not None]
        if grads:
            total_norm = getattr(torch.nn.utils, "get_total_norm", None)  # torch >= 2.6
            if total_norm is not None:
                norm = total_norm(grads, foreach=True)
            else:
                norm = torch.linalg.vector_norm(
                    torch.stack([torch.linalg.vector_norm(g.float()) for g in grads])
                )
            self.pending.append(norm.float().square())

    def on_train_batch_end(
        self,
        trainer: pl.Trainer,
        pl_module: pl.LightningModule,
        outputs: Any,
        batch: Any,
        batch_idx: int,
    ) -> None:
        # (Lightning's logger connector sets the trainer's log_every_n_steps at init.)
        every = self.log_every_n_steps or trainer.log_every_n_steps  # pyright: ignore[reportAttributeAccessIssue]
        if not self.pending or trainer.global_step % every:
            return
        squares = torch.stack(self.pending)
        if isinstance(trainer.strategy, FSDPStrategy):  # each rank holds a shard
            squares = trainer.strategy.reduce(squares, reduce_op="sum")
        self.stats.update(squares.sqrt().cpu().tolist())
        self.pending.clear()
        pl_module.log_dict(
            {f"grad_norm/{k}": v for k, v in self.stats.summary().items()},
            on_step=True,
            on_epoch=False,
            batch_size=1,
        )

    def state_dict(self) -> dict[str, Any]:
        return self.stats.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.stats.load_state_dict(state_dict)
