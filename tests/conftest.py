"""Shared scaffolding for the cross-package tests: the train config, composed in a tmp dir."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from omegaconf import DictConfig

import polymimic_train.app  # noqa: F401  (registers the config resolvers)
from polymimic_train.lightning.data_module import EmbodimentDataModule

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
