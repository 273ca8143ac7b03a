"""Every config in every group composes, and every model trains on every data source."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate
from lightning.pytorch.strategies import Strategy

import polymimic_train.configs

CONFIGS = Path(polymimic_train.configs.__file__).parent


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def test_groups_are_not_empty() -> None:
    assert {"synthetic_eva", "synthetic_aria"} <= set(_options("data"))
    assert {"default", "ddp"} <= set(_options("trainer"))
    assert "hpt_small" in _options("model")


KNOBS = {
    "accelerator",
    "devices",
    "num_nodes",
    "strategy",
    "precision",
    "max_steps",
    "val_check_interval",
    "gradient_clip_val",
    "accumulate_grad_batches",
    "log_every_n_steps",
}


@pytest.mark.parametrize("trainer", _options("trainer"))
def test_every_trainer_config_exposes_the_same_knobs_and_builds(
    tmp_path: Path, trainer: str, compose_train
) -> None:
    cfg = compose_train(tmp_path, f"trainer={trainer}", "trainer.gradient_clip_val=0.5")
    assert set(cfg.trainer) >= KNOBS, f"trainer/{trainer}.yaml lacks {KNOBS - set(cfg.trainer)}"
    assert cfg.trainer.gradient_clip_val == 0.5
    if cfg.trainer.accelerator == "gpu":  # no GPU here: build the strategy alone
        strategy = instantiate(cfg.trainer.strategy)
        assert isinstance(strategy, Strategy)
        return
    built = instantiate(cfg.trainer, logger=False, enable_checkpointing=False)
    assert built.max_steps == cfg.trainer.max_steps and built.gradient_clip_val == 0.5


def test_slurm_launcher_is_generic_and_follows_the_trainer(tmp_path: Path, compose_train) -> None:
    cfg = compose_train(
        tmp_path,
        "hydra/launcher=slurm",
        "trainer=ddp",
        "trainer.devices=4",
        "trainer.num_nodes=2",
        return_hydra_config=True,
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.nodes, launcher.tasks_per_node, launcher.gpus_per_node) == (2, 4, 4)
    assert launcher.account is None and launcher.partition is None  # cluster-specific: overrides
    assert launcher.max_num_timeout > 0
