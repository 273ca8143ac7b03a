"""The LightningModule: normalise on the device, call the policy, measure in unnormalised units."""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from typing import Any

import lightning.pytorch as pl
import torch
from torch import nn
from torchmetrics import MeanMetric

from polymimic_data import Layout, Normalizer
from polymimic_eval import action_error, group_metrics, step_errors
from polymimic_policies import Policy


class PolicyModule(pl.LightningModule):
    """One policy's training and validation under Lightning (see the module docstring)."""

    def __init__(
        self,
        policy: Policy,
        normalizer: Normalizer,
        layouts: Mapping[str, Layout],
        *,
        lr: float,
        backbone_lr: float,
        weight_decay: float,
        warmup_steps: int,
        val_sample_seed: int = 0,
        augmentation: nn.Module | None = None,
        record: Mapping[str, Any] | None = None,
        loss_weights: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.record = dict(record or {})  # plain data for every checkpoint (trained_policy)
        if not isinstance(policy, nn.Module):
            raise TypeError(
                f"policy: an nn.Module implementing Policy, got {type(policy).__name__}"
            )
        self.policy: Policy = policy  # a submodule (Lightning moves it and saves its weights)
        self.normalizer = normalizer  # a submodule: its statistics go into every checkpoint
        self.layouts = dict(layouts)
        self.lr, self.backbone_lr, self.weight_decay = lr, backbone_lr, weight_decay
        self.warmup_steps = warmup_steps
        self.val_sample_seed = val_sample_seed
        self.augmentation = augmentation  # on the device, batched; a no-op in eval mode
        self.loss_weights = dict(loss_weights or {})  # per embodiment; 1 where not given
        # Pooled over every validation loader (embodiment) and synced over ranks.
        self.val_error, self.val_baseline = MeanMetric(), MeanMetric()
        self.validated_at_step: int | None = None  # the step the logged metrics belong to

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        if self.record:
            checkpoint["polymimic"] = self.record

    def training_step(self, batches: Mapping[str, dict[str, Any]], batch_idx: int) -> torch.Tensor:
        total, weights = torch.zeros((), device=self.device), 0.0
        for name, batch in batches.items():
            if self.augmentation is not None:
                batch = batch | {
                    k: self.augmentation(v) for k, v in batch.items() if k.startswith("images.")
                }
            parts = self.policy.compute_loss(self.normalizer.normalize_batch(batch))
            size = batch["state"].shape[0]
            for key, value in parts.items():
                self.log(f"train/{name}/{key}", value, batch_size=size)
            weight = self.loss_weights.get(name, 1.0)
            total, weights = total + weight * parts["loss"], weights + weight
        loss = total / weights  # the embodiments' losses, each by its loss weight
        self.log("train/loss", loss, prog_bar=True, batch_size=1)
        return loss

    def sample_noise(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Initial noise per sample, seeded by (val_sample_seed, episode, frame).

        Validation then gives the same predictions however samples are batched or sharded
        over ranks, so every trainer config reports the same metrics for the same weights.
        """
        shape = tuple(batch["actions"].shape[1:])
        noise = []
        for episode, frame in zip(batch["episode"], batch["frame"].tolist(), strict=True):
            key = zlib.crc32(f"{self.val_sample_seed}:{episode}:{frame}".encode())
            noise.append(torch.randn(shape, generator=torch.Generator().manual_seed(key)))
        return torch.stack(noise).to(self.device)

    def predict_actions(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Unnormalised action chunks for a raw batch, deterministic per sample."""
        embodiment = batch["embodiment"]
        normalised = self.normalizer.normalize_batch(dict(batch))
        sampled = self.policy.sample_actions(normalised, noise=self.sample_noise(batch))
        return self.normalizer.denormalize_actions(embodiment, sampled)

    def validation_step(
        self, batch: dict[str, Any], batch_idx: int, dataloader_idx: int = 0
    ) -> None:
        embodiment = batch["embodiment"]
        pred = self.predict_actions(batch)
        target, mask = batch["actions"], batch["action_mask"]
        size = target.shape[0]
        baseline = self.normalizer.mean_actions(embodiment, target)
        error, baseline_error = (
            action_error(pred, target, mask),
            action_error(baseline, target, mask),
        )
        # Weighted by valid steps, the pooled value is the masked mean over all samples,
        # however they were grouped into batches or ranks.
        steps = mask.sum()
        self.val_error.update(error, weight=steps)
        self.val_baseline.update(baseline_error, weight=steps)
        metrics = {
            f"val/{embodiment}/action_error": error,
            f"val/{embodiment}/baseline_action_error": baseline_error,
        }
        for key, value in group_metrics(pred, target, mask, self.layouts[embodiment]).items():
            metrics[f"val/{embodiment}/{key}"] = value
        self.log_dict(metrics, batch_size=size, add_dataloader_idx=False, sync_dist=True)
        # The error curve over the horizon, each step weighted by the samples valid at it.
        # Every step is logged on every rank, with weight 0 where none of this batch's
        # samples reaches it: under DDP the ranks must log the same keys, or their
        # end-of-epoch reductions wait on each other for ever. (A step no sample reached
        # on any rank comes out NaN, as the step-error plot expects.)
        for step, (value, count) in enumerate(
            zip(step_errors(pred, target, mask), mask.sum(0).tolist(), strict=True)
        ):
            self.log(
                f"val/{embodiment}/step_error/{step:03d}",
                value if count else torch.zeros_like(value),
                batch_size=count,
                add_dataloader_idx=False,
                sync_dist=True,
            )

    def on_validation_epoch_end(self) -> None:
        # compute() has already reduced over ranks; sync_dist then averages equal values.
        self.log("val_action_error", self.val_error.compute(), sync_dist=True)
        self.log("baseline_action_error", self.val_baseline.compute(), sync_dist=True)
        self.val_error.reset()
        self.val_baseline.reset()
        if not self.trainer.sanity_checking:
            self.validated_at_step = self.global_step

    def configure_optimizers(self) -> Any:
        groups = self.policy.param_groups(self.lr, self.backbone_lr)
        optimizer = torch.optim.AdamW(groups, weight_decay=self.weight_decay)
        total = max(int(self.trainer.estimated_stepping_batches), self.warmup_steps + 1)

        def schedule(step: int) -> float:
            if step < self.warmup_steps:
                return (step + 1) / self.warmup_steps
            progress = (step - self.warmup_steps) / max(1, total - self.warmup_steps)
            return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }
