"""A tiny policy on disk, as `export` writes one: an HPT of random weights for eva.

Written by `write_untrained_export` (a real layout, cameras and frame rate, a registered
policy), so every test loads it through `load_policy`. tests/test_serve_end_to_end.py
serves a checkpoint that `train` itself wrote.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polymimic_policies import HPTConfig
from polymimic_serve import load_policy, write_untrained_export
from polymimic_serve.trained_policy import TrainedPolicy

EMBODIMENT, LAYOUT = "eva_bimanual", "eva_cartesian_quat"
HISTORY, HORIZON = 2, 8
TINY = {"d_model": 32, "num_heads": 2, "trunk_layers": 1, "image_tokens": 2, "head_layers": 1}


def write_tiny_export(out: Path, *, head: str = "flow") -> Path:
    config = HPTConfig(**TINY, head=head, sample_steps=4)
    return write_untrained_export(
        out, layout=LAYOUT, history=HISTORY, horizon=HORIZON, image_size=(32, 40), config=config
    )


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
