"""A tiny trained policy on disk, as `train` records one: an HPT of random weights for eva.

Written through polymimic_serve's own export writer from a real layout, real normalisation
statistics and a registered policy, so every test loads it through `load_policy`.
(tests/test_serve_end_to_end.py serves a checkpoint that `train` itself wrote.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from polymimic_data import embodiment_specs, get_embodiment
from polymimic_data.samples import Normalizer, NormStats, VectorStats
from polymimic_policies import HPTConfig, build_policy
from polymimic_serve import checkpoint_record, load_policy, write_export
from polymimic_serve.trained_policy import TrainedPolicy

EMBODIMENT, LAYOUT = "eva_bimanual", "eva_cartesian_quat"
HISTORY, HORIZON = 2, 8
TINY = {"d_model": 32, "num_heads": 2, "trunk_layers": 1, "image_tokens": 2, "head_layers": 1}


def _stats(dim: int, seed: int) -> NormStats:
    values = np.random.default_rng(seed).normal(size=(256, dim)) * 0.1 + 0.5
    return NormStats(VectorStats.of(values), VectorStats.of(values))


def write_tiny_export(out: Path, *, head: str = "flow", cameras: tuple[str, ...] = ("front_1",)):
    torch.manual_seed(0)
    datasets = {EMBODIMENT: {"embodiment": EMBODIMENT, "layout": LAYOUT, "cameras": list(cameras)}}
    specs = embodiment_specs(datasets, history=HISTORY, horizon=HORIZON)
    policy = build_policy(HPTConfig(**TINY, head=head, sample_steps=4), specs)
    layout = get_embodiment(EMBODIMENT).layout(LAYOUT)
    stats = {EMBODIMENT: _stats(layout.dim, 0)}
    normalizer = Normalizer(stats, {EMBODIMENT: layout})
    record = checkpoint_record(
        policy=policy,
        embodiments=specs,
        layouts={EMBODIMENT: layout},
        norm_stats=stats,
        norm_mode="zscore",
        image_size=(32, 40),
        fps={EMBODIMENT: 30.0},
    )
    state: dict[str, Any] = {f"policy.{k}": v for k, v in policy.state_dict().items()}
    state |= {f"normalizer.{k}": v for k, v in normalizer.state_dict().items()}
    return write_export(record, state, 123, out)


@pytest.fixture(scope="session")
def tiny_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_export(tmp_path_factory.mktemp("export") / "tiny")


@pytest.fixture(scope="session")
def regression_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_export(tmp_path_factory.mktemp("export") / "regression", head="regression")


@pytest.fixture
def tiny_policy(tiny_export: Path) -> TrainedPolicy:
    return load_policy(tiny_export)


def aloha_observation(seed: int = 0, *, size=(48, 64), chw: bool = True, **extra: Any) -> dict:
    """An observation as openpi's ALOHA runtime sends one: state (S,), CHW uint8 frames."""
    rng = np.random.default_rng(seed)
    image = rng.integers(0, 256, (3, *size) if chw else (*size, 3), dtype=np.uint8)
    state = (0.5 + 0.1 * rng.normal(size=16)).astype(np.float64)
    return {"state": state, "images": {"cam_high": image}, **extra}


@pytest.fixture
def observation():
    """`observation(seed, size=, chw=, **extra)`: see aloha_observation."""
    return aloha_observation
