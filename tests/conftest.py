"""Shared scaffolding for the cross-package tests: the train config, composed in a tmp dir,
and a checkpoint that `train` wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

import polymimic_train.configs  # noqa: F401  (registers the config resolvers)
from polymimic_train.lightning import EmbodimentDataModule

ComposeTrain = Callable[..., DictConfig]


def _compose_train(tmp: Path, *overrides: str, return_hydra_config: bool = False) -> DictConfig:
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        return compose(
            "train",
            overrides=[
                f"paths.run_dir={tmp / 'run'}",
                f"paths.data_root={tmp / 'data'}",
                f"paths.cache_dir={tmp / 'cache'}",
                *overrides,
            ],
            return_hydra_config=return_hydra_config,
        )


def _prepared_data(cfg: DictConfig) -> EmbodimentDataModule:
    datamodule = EmbodimentDataModule(
        cfg.data, data_root=cfg.paths.data_root, cache_dir=cfg.paths.cache_dir
    )
    datamodule.prepare()
    assert datamodule.normalizer is not None
    return datamodule


@pytest.fixture(scope="session")
def compose_train() -> ComposeTrain:
    """compose_train(tmp, *overrides): the train config with paths under `tmp`."""
    return _compose_train


@pytest.fixture(scope="session")
def prepared_data() -> Callable[[DictConfig], EmbodimentDataModule]:
    """prepared_data(cfg): the data module of a composed config, generated and prepared."""
    return _prepared_data


SMALL_TRAIN = [
    "trainer.max_steps=4",
    "trainer.val_check_interval=4",
    "trainer.enable_progress_bar=false",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=50",
    "data.synthetic.episodes=3",
    "data.synthetic.frames=20",
    "data.synthetic.height=48",
    "data.synthetic.width=64",
    "model.d_model=32",
    "model.num_heads=2",
    "model.image_tokens=2",
    "callbacks.trajectory_video.max_frames=4",
]


@pytest.fixture(scope="session")
def trained_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The last.ckpt of `train` at a tiny size (4 steps of a 2-layer HPT on eva)."""
    tmp = tmp_path_factory.mktemp("trained")
    env = os.environ | {
        "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
        "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
        "POLYMIMIC_RUNS_ROOT": str(tmp / "runs"),
        "CUDA_VISIBLE_DEVICES": "",
    }
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train", *SMALL_TRAIN],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    (last,) = (tmp / "runs").glob("*/*/checkpoints/last.ckpt")
    return last
