"""Action metrics, computed on unnormalised actions over the valid steps of each chunk."""

from __future__ import annotations

import torch

from polymimic_eval.array_types import numpy_or_torch


def _valid_mean(per_step: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.to(per_step.dtype)
    return (per_step * weights).sum() / weights.sum().clamp_min(1.0)


@numpy_or_torch
def action_error(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean absolute error per channel over valid steps: pred, target (B, T, A); mask (B, T).

    Torch tensors or numpy arrays (then the result is a numpy scalar).
    """
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    return _valid_mean((pred - target).abs().mean(-1), mask)
