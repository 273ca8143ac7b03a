"""`train`: the recipe, in running order: check, data, policy, fit.

1. `checked_config`: every check that needs neither data nor weights (numbers, names,
   choices, loggers, the model's own config), before anything is listed or loaded;
2. `checked_data`: each dataset's episodes (an object store's mirrored into the cache),
   then the checks that needed them (embodiments that episodes declare);
3. `built_policy`: the policy from its config and the data's embodiments;
4. `components`: the prepared data module and the policy module;
5. `fit`: train, validate the final weights, summarise;
and `run`, which does the five in a run directory that is kept only once they can work.

Importing this module loads Hydra and OmegaConf only, so `train --help` answers at once
and a misconfiguration is reported before torch, Lightning or any data load.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import hydra
from omegaconf import DictConfig, OmegaConf

from polymimic_train import resolvers  # noqa: F401  (the configs' ${polymimic.*} resolvers)
from polymimic_train.run_config import ConfigError, check_config, check_datasets
from polymimic_train.runs import run_dirs

if TYPE_CHECKING:
    from polymimic_data import Normalizer
    from polymimic_policies import Policy, PolicyConfig
    from polymimic_train.lightning.data_module import EmbodimentDataModule
    from polymimic_train.lightning.policy_module import PolicyModule
    from polymimic_train.run_episodes import DatasetEpisodes

log = logging.getLogger("polymimic_train")


# -- 1. the config --------------------------------------------------------------------------------


def checked_config(cfg: DictConfig, *, initial_weights: bool = True) -> PolicyConfig:
    """Every check that needs no data: the run's fields, then the model's config, built.

    Nothing is listed, read or made: a misconfigured run with an object-store root ends
    here before the store is asked anything. `initial_weights`: the policy will be built
    afresh (its local weights must be there), not loaded from a checkpoint. The model's
    own complaints name its field (`model.d_model: ...`).
    """
    from hydra.errors import InstantiationException
    from hydra.utils import instantiate

    from polymimic_policies import PolicyConfig

    check_config(cfg, initial_weights=initial_weights, resolved=False)
    try:
        config = instantiate(cfg.model)
    except InstantiationException as exc:
        cause = exc.__cause__
        if isinstance(cause, ValueError | TypeError):
            raise ConfigError(f"model.{cause}") from cause
        raise
    assert isinstance(config, PolicyConfig)
    return config if initial_weights else config.without_initial_weights()


# -- 2. the data ----------------------------------------------------------------------------------


def checked_data(cfg: DictConfig) -> tuple[dict[str, Any], DatasetEpisodes | None]:
    """Each dataset's episodes under `data.roots`, then the dataset checks that needed them.

    Resolved once per dataset (`auto` embodiments named in `cfg.data`, in place);
    generated episodes are made and resolved by the data module, after every check.
    Returns the data config as plain data, and the episodes (None if generated).
    """
    from polymimic_train.run_episodes import resolve_real_datasets

    episodes = None
    if not cfg.data.get("synthetic"):
        episodes = resolve_real_datasets(cfg.data, cfg.paths.cache_dir)
    check_datasets(cfg)
    data_cfg = OmegaConf.to_container(cfg.data, resolve=True)
    assert isinstance(data_cfg, dict)
    return {str(k): v for k, v in data_cfg.items()}, episodes


# -- 3. the policy --------------------------------------------------------------------------------


def built_policy(
    cfg: DictConfig, config: PolicyConfig, data_cfg: dict[str, Any], resume_from: Path | None
) -> Policy:
    """The policy from its config and the datasets' embodiments (seeded by `cfg.seed`).

    A resumed run's checkpoint must fit it (one line naming what differs); its config
    reads no initial weights (pretrained parts, PaliGemma's base weights): the checkpoint
    has them.
    """
    import torch

    from polymimic_data.embodiments import policy_embodiments
    from polymimic_policies import build_policy

    torch.manual_seed(cfg.seed)  # the initial weights (Lightning seeds the rest later)
    try:
        policy = build_policy(config, policy_embodiments(data_cfg))
    except ValueError as exc:
        raise ConfigError(f"model.{exc}") from exc
    if resume_from is not None:
        run_dirs.check_resume_fits(resume_from, policy)
    return policy


# -- 4. the data module and the policy module -----------------------------------------------------


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
        loss_weights=datamodule.loss_weights(),
        **cfg.optim,
    )
    return datamodule, module


def _policy_record(
    data_cfg: dict[str, Any], policy: Policy, datamodule: EmbodimentDataModule
) -> dict[str, Any]:
    """What a checkpoint carries for `load_policy`: plain data only."""
    from polymimic_data.embodiments import action_rates, policy_embodiments
    from polymimic_serve import checkpoint_record

    return checkpoint_record(
        policy=policy,
        embodiments=policy_embodiments(data_cfg),
        layouts=datamodule.layouts,
        norm_stats=datamodule.norm_stats,
        norm_mode=data_cfg["norm"]["mode"],
        image_size=data_cfg["image_size"],
        fps=action_rates(data_cfg),
    )


# -- 5. fit ---------------------------------------------------------------------------------------


def fit(
    cfg: DictConfig,
    run_dir: Path,
    resume_from: Path | None,
    data_cfg: dict[str, Any],
    episodes: DatasetEpisodes | None,
    policy: Policy,
) -> dict[str, Any]:
    """Prepare the data, fit, validate the final weights, and write the run's summary."""
    import lightning.pytorch as pl
    from hydra.utils import instantiate

    from polymimic_data.store import write_json_atomic
    from polymimic_strategies import fit_torch_threads, reap_stale_gpu_processes
    from polymimic_train.runs.preemption import (
        DeferredSignal,
        DeferredSignalCallback,
        launcher_signal,
    )
    from polymimic_train.runs.run_record import record_run_start, summarise

    if cfg.reap_stale_gpu_processes and "SLURM_JOB_ID" in os.environ and _first_on_node():
        reap_stale_gpu_processes()  # once per node: every node's GPUs, not only node 0's
    fit_torch_threads()  # a container's CPU quota, not the host's cores
    pl.seed_everything(cfg.seed, workers=True)
    # a launcher's requeue signal (submitit's) acts between steps, not mid-computation
    preemption = DeferredSignal(launcher_signal(), grace_s=cfg.preemption_grace_s)
    with preemption:
        datamodule, module = components(cfg, data_cfg, episodes, policy)
        callbacks, loggers = _callbacks_and_loggers(cfg)
        callbacks.append(DeferredSignalCallback(preemption))
        trainer: pl.Trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers)
        if trainer.is_global_zero:
            stats = {n: s.to_json() for n, s in datamodule.norm_stats.items()}
            record_run_start(run_dir, cfg, stats)
        trainer.fit(module, datamodule=datamodule, ckpt_path=resume_from)
        if module.validated_at_step != trainer.global_step:  # the summary: the final weights
            trainer.validate(module, datamodule=datamodule, verbose=False)
        summary = summarise(trainer, run_dir)
        if trainer.is_global_zero:
            write_json_atomic(run_dir / "summary.json", summary)
    if trainer.is_global_zero:
        print(f"run dir: {run_dir.resolve()}")
        print(
            f"val_action_error {summary['val_action_error']:.4f} vs predict-the-mean "
            f"baseline_action_error {summary['baseline_action_error']:.4f}"
        )
    return summary


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


# -- the run --------------------------------------------------------------------------------------


def run(cfg: DictConfig) -> dict[str, Any]:
    """Train per `cfg` in its run directory; returns the summary also in `summary.json`.

    A misconfiguration ends before anything heavy, and leaves no new run directory
    behind (nor touches the record of a run it was asked to resume).
    """
    run_dir = Path(cfg.paths.run_dir)
    fresh = not (run_dir / run_dirs.RECORD).exists() and run_dirs.last_checkpoint(run_dir) is None
    try:
        resume_from = run_dirs.checkpoint_to_resume(cfg.resume, run_dir, cfg.name)
        config = checked_config(cfg, initial_weights=resume_from is None)
        data_cfg, episodes = checked_data(cfg)
        policy = built_policy(cfg, config, data_cfg, resume_from)
    except (ConfigError, run_dirs.RunDirError):
        if fresh and _launched_rank_zero():
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dirs.forget_job_choice(cfg.paths.runs_root, cfg.name)
        raise
    if not _launched_rank_zero():
        return fit(cfg, run_dir, resume_from, data_cfg, episodes, policy)
    if resume_from is not None:
        log.info("resuming from %s", resume_from.resolve())
    lock = run_dirs.start(run_dir, resumed_from=resume_from)
    try:
        summary = fit(cfg, run_dir, resume_from, data_cfg, episodes, policy)
        run_dirs.write_record(run_dir, "finished", steps=summary["steps"])
    except run_dirs.LeftForRequeue:  # the launcher's requeue: the next life resumes this directory
        requeues = run_dirs.read_record(run_dir).get("requeues", 0) + 1
        run_dirs.write_record(run_dir, "requeued", requeues=requeues)
        raise
    except BaseException as exc:
        error = "stopped by SIGTERM" if _sigterm(exc) else f"{type(exc).__name__}: {exc}"
        run_dirs.write_record(run_dir, "failed", error=error)
        raise
    finally:
        lock.release()
    return summary


def _sigterm(exc: BaseException) -> bool:
    """Whether `exc` is Lightning's SIGTERMException.

    Of `lightning` or the standalone `pytorch_lightning`, whichever a config's trainer comes
    from. It is a SystemExit without a code, which would end the process with status 0, as if the
    run had finished. Neither module is imported here: one not imported raised nothing.
    """
    for name in ("lightning.pytorch", "pytorch_lightning"):
        exceptions = sys.modules.get(f"{name}.utilities.exceptions")
        if exceptions is not None and isinstance(exc, exceptions.SIGTERMException):
            return True
    return False


def _launched_rank_zero() -> bool:
    """The process that owns the run directory (other ranks are launched into it)."""
    return all(os.environ.get(v, "0") == "0" for v in ("LOCAL_RANK", "NODE_RANK", "SLURM_PROCID"))


@hydra.main(version_base="1.3", config_path="configs", config_name="train")
def main(cfg: DictConfig) -> None:
    """Hydra's entry: train per the composed config.

    A config error is one line, exit 2; a run stopped by SIGTERM exits 143 (128 + SIGTERM,
    a shell's status for it), not 0.
    """
    try:
        run(cfg)
    except (ConfigError, run_dirs.RunDirError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as exc:
        if not _sigterm(exc):
            raise
        resume = "resume=latest (or resume=<that folder>)"
        print(f"error: stopped by SIGTERM; {cfg.paths.run_dir} goes on from its last "
              f"checkpoint with {resume}", file=sys.stderr)  # fmt: skip
        sys.exit(128 + signal.SIGTERM)


def cli() -> None:
    """The `train` command: `--version`, or Hydra's command line."""
    if sys.argv[1:] == ["--version"]:
        from polymimic_train import __version__

        print(f"polymimic-train {__version__}")
        return
    main()
