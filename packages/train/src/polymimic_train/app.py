"""`train`: compose data, policy, strategy, callbacks and loggers from Hydra config, then fit."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

import hydra
import lightning.pytorch as pl
import platformdirs
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from polymimic_data.atomic_files import write_json_atomic
from polymimic_data.image_augmentation import ImageAugmentation
from polymimic_strategies import reap_stale_gpu_processes
from polymimic_train.data_fault_monitor import DataFaultMonitor
from polymimic_train.data_module import EmbodimentDataModule
from polymimic_train.policy_module import PolicyModule
from polymimic_train.run_record import record_run_start

log = logging.getLogger("polymimic_train")

OmegaConf.register_new_resolver(
    "polymimic.user_cache",
    lambda sub: str(Path(platformdirs.user_cache_dir("polymimic")) / sub),
    replace=True,
)


def _instantiate_all(group: DictConfig | None) -> list[Any]:
    return [instantiate(c) for c in (group or {}).values() if c is not None]


def _resume_path(resume: str | None, run_dir: Path) -> str | None:
    if resume != "auto":
        return resume
    last = run_dir / "checkpoints" / "last.ckpt"
    if last.exists():
        log.info("resuming from %s", last.resolve())
        return str(last)
    return None


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train per `cfg`; returns the summary also written to `<run_dir>/summary.json`."""
    run_dir = Path(cfg.paths.run_dir)
    on_slurm_node_leader = (
        "SLURM_JOB_ID" in os.environ and os.environ.get("SLURM_LOCALID", "0") == "0"
    )
    if cfg.reap_stale_gpu_processes and on_slurm_node_leader:  # once per node
        reap_stale_gpu_processes()
    pl.seed_everything(cfg.seed, workers=True)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data_cfg, dict)
    datamodule = EmbodimentDataModule(
        data_cfg, data_root=cfg.paths.data_root, cache_dir=cfg.paths.cache_dir
    )
    datamodule.prepare()
    assert datamodule.normalizer is not None
    policy = instantiate(cfg.model, embodiments=datamodule.embodiment_specs())
    module = PolicyModule(
        policy,
        datamodule.normalizer,
        datamodule.layouts,
        val_sample_seed=cfg.val_sample_seed,
        augmentation=ImageAugmentation(**data_cfg["augment"]) if data_cfg.get("augment") else None,
        **cfg.optim,
    )
    trainer: pl.Trainer = instantiate(
        cfg.trainer, callbacks=_instantiate_all(cfg.callbacks), logger=_instantiate_all(cfg.logger)
    )
    if trainer.is_global_zero:
        record_run_start(run_dir, cfg, {n: s.to_json() for n, s in datamodule.norm_stats.items()})
    trainer.fit(module, datamodule=datamodule, ckpt_path=_resume_path(cfg.resume, run_dir))
    if module.validated_at_step != trainer.global_step:  # the summary is of the final weights
        trainer.validate(module, datamodule=datamodule, verbose=False)

    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    summary = {
        "val_action_error": metrics.get("val_action_error"),
        "baseline_action_error": metrics.get("baseline_action_error"),
        "steps": trainer.global_step,
        "run_dir": str(run_dir.resolve()),
        "metrics": metrics,
    }
    for callback in trainer.callbacks:  # type: ignore[attr-defined]
        if isinstance(callback, DataFaultMonitor):
            summary["data_faults"] = callback.counts()
    if trainer.is_global_zero:
        write_json_atomic(run_dir / "summary.json", summary)
        print(f"run dir: {run_dir.resolve()}")
        print(
            f"val_action_error {summary['val_action_error']:.4f} vs predict-the-mean "
            f"baseline_action_error {summary['baseline_action_error']:.4f}"
        )
    return summary


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> None:
    run(cfg)
