"""Metrics per channel group of a layout, on unnormalised actions over valid chunk steps.

Each group is measured as its kind means: positions and hand keypoints as distances
(per point), rotations as the geodesic angle in degrees whatever the representation
(quaternion, yaw-pitch-roll, rot6d), grippers and joints as absolute error. So the geometric metrics
do not change when one rigid transform moves both prediction and truth, and the rotation
metrics do not change with the representation. Every metric comes as a chunk mean and at
the chunk's final valid step; every group also gets the plain MSE labs already track.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from polymimic_data.geometry import ChannelGroup, Layout, geodesic_angle, to_matrix
from polymimic_eval.array_types import numpy_or_torch

ROTATION_KINDS = {"quaternion": "quaternion", "euler": "euler", "rot6d": "rot6d"}


def _final_steps(mask: torch.Tensor) -> torch.Tensor:
    """Index of each sample's last valid step (valid steps are a prefix of the chunk)."""
    return (mask.long().sum(1) - 1).clamp_min(0)


def _reduce(per_step: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, T) values -> (mean over valid steps, mean over samples of the final valid step)."""
    weights = mask.to(per_step.dtype)
    mean = (per_step * weights).sum() / weights.sum().clamp_min(1.0)
    final = per_step.gather(1, _final_steps(mask)[:, None]).mean()
    return mean, final


def _rotation_angles(pred: torch.Tensor, target: torch.Tensor, kind: str) -> torch.Tensor:
    """(B, T) geodesic angles in degrees between predicted and true rotations."""
    representation = ROTATION_KINDS[kind]
    a = to_matrix(pred.detach().double().cpu().numpy(), representation)
    b = to_matrix(target.detach().double().cpu().numpy(), representation)
    degrees = np.degrees(geodesic_angle(a, b))
    return torch.from_numpy(degrees).to(device=pred.device, dtype=pred.dtype)


def _distances(group: ChannelGroup, pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """(B, T): positions as one point, keypoints as the mean over their points."""
    points = (pred - target).reshape(*pred.shape[:2], -1, 3)
    return points.norm(dim=-1).mean(-1)


@numpy_or_torch
def group_metrics(
    pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, layout: Layout
) -> dict[str, torch.Tensor]:
    """`<group>_<metric>` for every group: pred, target (B, T, A) unnormalised; mask (B, T).

    Metrics: `error` (metres for positions and keypoints; absolute, in the data's units,
    for grippers and joints) or
    `angle_deg` (rotations), each also as `final_...`; and `mse`, `final_mse` for all.
    Torch tensors or numpy arrays (then every value is a numpy scalar).
    """
    if pred.shape != target.shape or pred.shape[-1] != layout.dim:
        raise ValueError(
            f"pred {tuple(pred.shape)} and target {tuple(target.shape)} must be (B, T, "
            f"{layout.dim}) for layout {layout.name!r}"
        )
    out: dict[str, torch.Tensor] = {}
    for group in layout.groups:
        p, t = pred[..., group.start : group.stop], target[..., group.start : group.stop]
        if group.kind in ("position", "keypoints"):
            name, per_step = "error", _distances(group, p, t)
        elif group.kind in ROTATION_KINDS:
            name, per_step = "angle_deg", _rotation_angles(p, t, group.kind)
        else:
            name, per_step = "error", (p - t).abs().mean(-1)
        out[f"{group.name}_{name}"], out[f"{group.name}_final_{name}"] = _reduce(per_step, mask)
        mse = (p - t).pow(2).mean(-1)
        out[f"{group.name}_mse"], out[f"{group.name}_final_mse"] = _reduce(mse, mask)
    return out


@numpy_or_torch
def step_errors(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(T,) mean absolute error of each chunk step over the samples valid at it (NaN: none).

    The curve over the horizon: how error grows with distance into the future.
    """
    per_step = (pred - target).abs().mean(-1)
    weights = mask.to(per_step.dtype)
    counts = weights.sum(0)
    sums = (per_step * weights).sum(0)
    return torch.where(counts > 0, sums / counts.clamp_min(1.0), torch.full_like(sums, math.nan))
