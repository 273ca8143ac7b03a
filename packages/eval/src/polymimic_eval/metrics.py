"""Action metrics, computed on unnormalised actions over the valid steps of each chunk."""

from __future__ import annotations

import torch

from polymimic_data.layouts import Layout


def _valid_mean(per_step: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    weights = mask.to(per_step.dtype)
    return (per_step * weights).sum() / weights.sum().clamp_min(1.0)


def action_error(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean absolute error per channel over valid steps: pred, target (B, T, A); mask (B, T)."""
    if pred.shape != target.shape:
        raise ValueError(f"pred {tuple(pred.shape)} and target {tuple(target.shape)} differ")
    return _valid_mean((pred - target).abs().mean(-1), mask)


def position_error(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, layout: Layout
) -> dict[str, torch.Tensor]:
    """Euclidean error of each position group (e.g. metres), averaged over valid steps."""
    return {
        f"{g.name}_error": _valid_mean(
            (pred[..., g.start : g.stop] - target[..., g.start : g.stop]).norm(dim=-1), mask
        )
        for g in layout.groups_of_kind("position")
    }
