"""An export of an untrained policy: a robot's plumbing tested before any policy is trained.

`write_untrained_export(out, embodiment=...)` writes what `export` writes (see checkpoints)
for a policy of random weights, with the embodiment's real layout, cameras and frame rate
and unit normalisation statistics. Served, it speaks exactly as a trained one would (the
same metadata, shapes and errors); its actions mean nothing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch

from polymimic_data import embodiment_specs, get_embodiment
from polymimic_data.samples import Normalizer, NormStats, VectorStats
from polymimic_policies import HPTConfig, PolicyConfig, build_policy
from polymimic_serve.checkpoints import checkpoint_record, write_export


def small_hpt() -> HPTConfig:
    """A small HPT: a CPU answers in milliseconds."""
    return HPTConfig(d_model=64, num_heads=2, trunk_layers=1, image_tokens=2, head_layers=1)


def _unit_stats(dim: int) -> NormStats:
    unit = VectorStats(*(np.full(dim, v) for v in (0.0, 1.0, -3.0, 3.0, -2.33, 2.33)))
    return NormStats(unit, unit)


def write_untrained_export(
    out: str | os.PathLike[str],
    *,
    embodiment: str = "eva_bimanual",
    layout: str | None = None,
    cameras: Sequence[str] = ("front_1",),
    history: int = 2,
    horizon: int = 16,
    image_size: Sequence[int] = (64, 80),
    config: PolicyConfig | None = None,
    seed: int = 0,
    overwrite: bool = False,
) -> Path:
    """Write an export of a policy of random weights (`config`, else a small HPT); `out`."""
    torch.manual_seed(seed)
    spec = {"embodiment": embodiment, "layout": layout, "cameras": list(cameras)}
    specs = embodiment_specs({embodiment: spec}, history=history, horizon=horizon)
    policy = build_policy(config if config is not None else small_hpt(), specs)
    registered = get_embodiment(embodiment)
    chosen = registered.layout(layout)
    stats = {embodiment: _unit_stats(chosen.dim)}
    normalizer = Normalizer(stats, {embodiment: chosen})
    record = checkpoint_record(
        policy=policy,
        embodiments=specs,
        layouts={embodiment: chosen},
        norm_stats=stats,
        norm_mode="zscore",
        image_size=image_size,
        fps={embodiment: registered.fps},
    )
    state = {f"policy.{k}": v for k, v in policy.state_dict().items()}
    state |= {f"normalizer.{k}": v for k, v in normalizer.state_dict().items()}
    return write_export(record, state, 0, out, source="untrained", overwrite=overwrite)
