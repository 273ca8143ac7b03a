"""`train`: compose data, policy, strategy, callbacks and loggers from Hydra config, then fit.

Importing this module loads Hydra and OmegaConf only, so `train --help` answers at once
and a misconfiguration is reported before torch, Lightning or any data load.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
import platformdirs
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from polymimic_train.run_config import ConfigError, check_config
from polymimic_train.runs import run_dirs

if TYPE_CHECKING:
    from polymimic_data import Normalizer
    from polymimic_policies import Policy
    from polymimic_train.lightning.data_module import EmbodimentDataModule
    from polymimic_train.lightning.policy_module import PolicyModule
    from polymimic_train.run_episodes import DatasetEpisodes

log = logging.getLogger("polymimic_train")

OmegaConf.register_new_resolver(
    "polymimic.user_cache",
    lambda sub: str(Path(platformdirs.user_cache_dir("polymimic")) / sub),
    replace=True,
)


def _tiny_paligemma(cache_dir: str) -> str:
    """A tiny PaliGemma for model=pi_tiny, made in the cache on first use.

    Transformers loads only when a config asks for it.
    """
    from polymimic_policies.paligemma_loading import ensure_tiny_paligemma

    return str(ensure_tiny_paligemma(cache_dir))


OmegaConf.register_new_resolver(
    "polymimic.tiny_paligemma", _tiny_paligemma, replace=True, use_cache=True
)


def _gpus_per_node(accelerator: str, devices: Any) -> int | None:
    """What the SLURM launcher asks for per node: the trainer's devices, none on a CPU."""
    return None if str(accelerator) == "cpu" else int(devices)


OmegaConf.register_new_resolver("polymimic.gpus_per_node", _gpus_per_node, replace=True)


def _sweep_name(*, _root_: DictConfig) -> str:
    """The run's `name` for a multirun's folder, resolved where `${hydra:...}` cannot be.

    A multirun's launcher is built (and its folder named) before Hydra's config is set,
    so the default name, `${hydra:runtime.choices.model}-...`, fails there; the same
    choices are read from the config's own `hydra` node instead.
    """
    try:
        return str(_root_.name)
    except InterpolationResolutionError:
        choices = _root_.hydra.runtime.choices
        return f"{choices.model}-{choices.data}"


OmegaConf.register_new_resolver("polymimic.sweep_name", _sweep_name, replace=True)
# Cached: Hydra reads the run directory more than once; it must be made once.
OmegaConf.register_new_resolver(
    "polymimic.run_dir", run_dirs.run_dir_for, replace=True, use_cache=True
)


def _launched_rank_zero() -> bool:
    """The process that owns the run directory (other ranks are launched into it)."""
    return all(os.environ.get(v, "0") == "0" for v in ("LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


def _first_on_node() -> bool:
    """The first process of this node (SLURM's local id 0, and no launcher-spawned rank)."""
    return all(os.environ.get(v, "0") == "0" for v in ("LOCAL_RANK", "SLURM_LOCALID"))


def _callbacks_and_loggers(cfg: DictConfig) -> tuple[list[Any], list[Any]]:
    from hydra.utils import instantiate

    from polymimic_train.runs.wandb_run import RunWandbLogger

    def build(group: DictConfig | None) -> list[Any]:
        return [instantiate(c) for c in (group or {}).values() if c is not None]

    loggers = build(cfg.logger)
    for logger in loggers:
        if isinstance(logger, RunWandbLogger):  # the W&B run's config: the composed one
            resolved = OmegaConf.to_container(cfg, resolve=True)
            assert isinstance(resolved, dict)
            logger.log_run_config({str(k): v for k, v in resolved.items()})
    return build(cfg.callbacks), loggers


def checked_data(
    cfg: DictConfig, *, initial_weights: bool = True
) -> tuple[dict[str, Any], DatasetEpisodes | None]:
    """Every check of the config that needs no model, with each dataset's episodes.

    Episodes under `data.roots` are resolved here, once per dataset (naming `auto`
    embodiments); generated ones are made and resolved by the data module, after every
    check. Returns the data config as plain data, and the episodes (None if generated).
    `initial_weights`: the policy will be built afresh, not loaded from a checkpoint.
    """
    from polymimic_train.run_episodes import resolve_real_datasets

    episodes = None
    if not cfg.data.get("synthetic"):
        episodes = resolve_real_datasets(cfg.data, cfg.paths.cache_dir)
    check_config(cfg, initial_weights=initial_weights)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data_cfg, dict)
    return {str(k): v for k, v in data_cfg.items()}, episodes


def _checked(
    cfg: DictConfig, resume_from: Path | None
) -> tuple[dict[str, Any], DatasetEpisodes | None, Policy]:
    """Every check that can fail before data preparation; the data, its episodes, the policy."""
    data_cfg, episodes = checked_data(cfg, initial_weights=resume_from is None)
    policy = _build_policy(cfg, data_cfg, resuming=resume_from is not None)
    if resume_from is not None:
        from polymimic_train.runs.run_dirs import check_resume_fits

        check_resume_fits(resume_from, policy)
    return data_cfg, episodes, policy


def components(
    cfg: DictConfig,
    data_cfg: dict[str, Any],
    episodes: DatasetEpisodes | None,
    policy: Policy,
    normalizer: Normalizer | None = None,
) -> tuple[EmbodimentDataModule, PolicyModule]:
    """The data module (prepared) and the policy module, as training and evaluation use them.

    `normalizer`: a trained policy's (evaluate); without it, the one of the statistics
    computed from the training episodes, recorded into every checkpoint.
    """
    from polymimic_data.samples import ImageAugmentation
    from polymimic_train.lightning.data_module import EmbodimentDataModule
    from polymimic_train.lightning.policy_module import PolicyModule

    datamodule = EmbodimentDataModule(
        data_cfg,
        data_root=cfg.paths.data_root,
        cache_dir=cfg.paths.cache_dir,
        seed=cfg.seed,
        episodes=episodes,
    )
    datamodule.prepare()
    assert datamodule.normalizer is not None
    augment = data_cfg.get("augment")
    module = PolicyModule(
        policy,
        normalizer if normalizer is not None else datamodule.normalizer,
        datamodule.layouts,
        val_sample_seed=cfg.val_sample_seed,
        augmentation=ImageAugmentation(**augment) if augment else None,
        record=None if normalizer is not None else _policy_record(data_cfg, policy, datamodule),
        **cfg.optim,
    )
    return datamodule, module


def _fit(
    cfg: DictConfig,
    run_dir: Path,
    resume_from: Path | None,
    checked: tuple[dict[str, Any], DatasetEpisodes | None, Policy],
) -> dict[str, Any]:
    """Prepare the data, fit, and summarise the final weights."""
    import lightning.pytorch as pl
    from hydra.utils import instantiate

    from polymimic_data.store import write_json_atomic
    from polymimic_strategies import fit_torch_threads, reap_stale_gpu_processes
    from polymimic_train.runs.run_record import record_run_start, summarise

    if cfg.reap_stale_gpu_processes and "SLURM_JOB_ID" in os.environ and _first_on_node():
        reap_stale_gpu_processes()  # once per node: every node's GPUs, not only node 0's
    fit_torch_threads()  # a container's CPU quota, not the host's cores
    pl.seed_everything(cfg.seed, workers=True)
    datamodule, module = components(cfg, *checked)
    callbacks, loggers = _callbacks_and_loggers(cfg)
    trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
    if trainer.is_global_zero:
        record_run_start(run_dir, cfg, {n: s.to_json() for n, s in datamodule.norm_stats.items()})
    trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
    if module.validated_at_step != trainer.global_step:  # the summary is of the final weights
        trainer.validate(module, datamodule=datamodule, verbose=False)
    summary = summarise(trainer, run_dir)
    if trainer.is_global_zero:
        write_json_atomic(run_dir / "summary.json", summary)
        print(f"run dir: {run_dir.resolve()}")
        print(
            f"val_action_error {summary['val_action_error']:.4f} vs predict-the-mean "
            f"baseline_action_error {summary['baseline_action_error']:.4f}"
        )
    return summary


def policy_embodiments(data_cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the policy is told of each dataset's embodiment, from the data config alone."""
    from polymimic_data import embodiment_specs

    return embodiment_specs(
        data_cfg["datasets"], history=int(data_cfg["history"]), horizon=int(data_cfg["horizon"])
    )


def _policy_record(
    data_cfg: dict[str, Any], policy: Policy, datamodule: EmbodimentDataModule
) -> dict[str, Any]:
    """What a checkpoint carries for `load_policy`: plain data only."""
    from polymimic_serve.checkpoints import checkpoint_record

    return checkpoint_record(
        policy=policy,
        embodiments=policy_embodiments(data_cfg),
        layouts=datamodule.layouts,
        norm_stats=datamodule.norm_stats,
        norm_mode=data_cfg["norm"]["mode"],
        image_size=data_cfg["image_size"],
        fps=action_rates(data_cfg),
    )


def action_rates(data_cfg: Mapping[str, Any]) -> dict[str, float]:
    """Per dataset, the action steps per second of its chunks: the rate to execute them at.

    The episodes' frame rate over the frames one action step spans.
    """
    from polymimic_data.embodiments import get_embodiment

    window = data_cfg.get("action_window")
    frames_per_step = (
        float(window) / int(data_cfg["horizon"]) if window else int(data_cfg["action_stride"])
    )
    return {
        name: get_embodiment(str(spec["embodiment"])).fps / frames_per_step
        for name, spec in data_cfg["datasets"].items()
    }


def _build_policy(cfg: DictConfig, data_cfg: dict[str, Any], resuming: bool = False) -> Policy:
    """The policy, from config alone; its own complaints name the model field.

    A resumed run reads no initial weights (pretrained parts, PaliGemma's base weights):
    the checkpoint has them.
    """
    import torch
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from polymimic_policies import PolicyConfig, build_policy

    torch.manual_seed(cfg.seed)  # the initial weights (Lightning seeds the rest later)
    try:
        config = instantiate(cfg.model)
        assert isinstance(config, PolicyConfig)
        if resuming:
            config = config.without_initial_weights()
        return build_policy(config, policy_embodiments(data_cfg))
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError | TypeError):
            raise ConfigError(f"model.{cause}") from cause
        raise
    except ValueError as exc:
        raise ConfigError(f"model.{exc}") from exc


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train per `cfg` in its run directory; returns the summary also in `summary.json`.

    A misconfiguration ends here before anything heavy, and leaves no new run directory
    behind (nor touches the record of a run it was asked to resume).
    """
    run_dir = Path(cfg.paths.run_dir)
    fresh = not (run_dir / run_dirs.RECORD).exists() and run_dirs.last_checkpoint(run_dir) is None
    try:
        resume_from = run_dirs.checkpoint_to_resume(cfg.resume, run_dir, cfg.name)
        checked = _checked(cfg, resume_from)
    except (ConfigError, run_dirs.RunDirError):
        if fresh and _launched_rank_zero():
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dirs.forget_job_choice(cfg.paths.runs_root, cfg.name)
        raise
    if not _launched_rank_zero():
        return _fit(cfg, run_dir, resume_from, checked)
    if resume_from is not None:
        log.info("resuming from %s", resume_from.resolve())
    lock = run_dirs.start(run_dir, resumed_from=resume_from)
    try:
        summary = _fit(cfg, run_dir, resume_from, checked)
        run_dirs.write_record(run_dir, "finished", steps=summary["steps"])
    except BaseException as exc:
        run_dirs.write_record(run_dir, "failed", error=f"{type(exc).__name__}: {exc}")
        raise
    finally:
        lock.release()
    return summary


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> None:
    """Hydra's entry: train per the composed config; a config error is one line, exit 2."""
    try:
        run(cfg)
    except (ConfigError, run_dirs.RunDirError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)


def cli() -> None:
    """The `train` command: `--version`, or Hydra's command line."""
    if sys.argv[1:] == ["--version"]:
        from polymimic_train import __version__

        print(f"polymimic-train {__version__}")
        return
    main()
