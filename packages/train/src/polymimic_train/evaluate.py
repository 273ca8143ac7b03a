"""`evaluate checkpoint=<path> [override ...]`: a checkpoint's validation, without training.

`evaluate checkpoint=<path> sim=<task> [sim.episodes=50] [sim.seed=1000]
[sim.executor=chunk|temporal_ensemble|rtc] [sim.n_action_steps=N] [sim.delay=D]
[sim.workers=2] [sim.videos=3] [sim.via_server=true] [sim.realtime=true]
[sim.inference_slowdown=K] [sim.rerun=true] [sim.weights_dir=DIR]`: closed-loop rollouts in
simulation instead (polymimic-sim, the `sim` extra; a task such as aloha/transfer_cube or a
suite such as metaworld/mt10), `sim.workers` simulators at once with the policy batched
across them: the success rate with its 95% Wilson interval in `summary.json`, mp4s of the
first `sim.videos` episodes in `videos/`, every episode in `rollouts.rrd` with
`sim.rerun=true` (frames, actions, each predicted chunk; open it with `rerun`). With
`sim.realtime=true` one simulator runs at wall-clock rate while inference runs beside it
(polymimic-serve's RealTimeRunner): the delay is measured, and `sim.inference_slowdown=K`
makes the model K times slower.

The run's own composition is replayed (its `.hydra/overrides.yaml`, then yours), so the
validation set, its noise seeds and the metrics are the run's; the weights and the
normalisation statistics come from the checkpoint (see trained_policy). Metrics, the
per-step error curve and the overlay videos go to `<run dir>/eval/<date>_<time>_<id>/`,
with `summary.json`; the final validation of a finished run is reproduced exactly.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from polymimic_train.runs.run_dirs import checkpoint_home, create_run_dir, run_dir_of


def _compose(checkpoint: Path, overrides: list[str]) -> DictConfig:
    """The run's composition (its recorded overrides, then `overrides`) for `checkpoint`."""
    from hydra import compose, initialize_config_module

    run_dir = run_dir_of(checkpoint)
    recorded = run_dir / ".hydra" / "overrides.yaml" if run_dir is not None else None
    before = []
    if recorded is not None and recorded.exists():
        before = [str(o) for o in OmegaConf.load(recorded)]  # type: ignore[union-attr]
    wanted = [o for o in before if not o.startswith(("resume=", "trainer."))] + overrides
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        return compose("train", overrides=[*wanted, "name=evaluate", "paths.run_dir=."])


def evaluate(checkpoint: str | Path, overrides: list[str] | None = None) -> dict[str, Any]:
    """Validate `checkpoint` as its run did; returns the summary written beside the results."""
    import lightning.pytorch as pl
    from hydra.utils import instantiate

    from polymimic_data.store import write_json_atomic
    from polymimic_serve import load_policy
    from polymimic_train.app import checked_config, checked_data, components
    from polymimic_train.runs.run_record import summarise

    checkpoint = Path(checkpoint)
    cfg = _compose(checkpoint, list(overrides or []))
    # As train checks and resolves them; the weights come from the checkpoint.
    checked_config(cfg, initial_weights=False)
    data_cfg, episodes = checked_data(cfg)
    out = create_run_dir(checkpoint_home(checkpoint) / "eval", ".")
    # the run's own config names the folder a Pi policy reads PaliGemma's config from
    weights_dir = OmegaConf.select(cfg, "model.paligemma_path", default=None)
    trained = load_policy(
        checkpoint, embodiment=next(iter(data_cfg["datasets"])), weights_dir=weights_dir
    )
    datamodule, module = components(
        cfg,
        data_cfg,
        episodes,
        trained.policy,
        normalizer=trained.normalizer,  # the checkpoint's statistics, not recomputed ones
    )
    callbacks = [  # the pictures of a validation, as training draws them
        instantiate(cfg.callbacks[name], at_step=trained.step)
        for name in ("trajectory_video", "step_error_plot")
        if cfg.callbacks.get(name)
    ]
    loggers = [instantiate(cfg.logger.csv, save_dir=str(out))]
    trainer = pl.Trainer(
        accelerator=cfg.trainer.accelerator,
        devices=1,
        logger=loggers,
        callbacks=callbacks,
        default_root_dir=str(out),
        enable_progress_bar=False,
    )
    trainer.validate(module, datamodule=datamodule, verbose=False)
    summary = summarise(trainer, out) | {
        "checkpoint": str(checkpoint.resolve()),
        "steps": trained.step,  # the weights' training step, not this validation's
    }
    write_json_atomic(out / "summary.json", summary)
    print(f"eval dir: {out}")
    print(
        f"val_action_error {summary['val_action_error']:.6f} vs predict-the-mean "
        f"baseline_action_error {summary['baseline_action_error']:.6f}"
    )
    return summary


def evaluate_in_sim(checkpoint: Path, options: dict[str, str]) -> dict[str, Any]:
    """Rollouts of `checkpoint` in `options["sim"]` (see the module docstring)."""
    try:
        from polymimic_sim import RolloutSettings, describe, evaluate_checkpoint
    except ModuleNotFoundError as exc:
        raise SystemExit(
            f"error: sim= needs polymimic-sim: install polymimic-train[sim] ({exc})"
        ) from exc
    given = {k.removeprefix("sim."): v for k, v in options.items() if k != "sim"}
    weights_dir = given.pop("weights_dir", None)
    try:
        settings = RolloutSettings.parse(given)
    except ValueError as exc:
        raise SystemExit(f"error: sim.{exc}") from exc
    out = create_run_dir(checkpoint_home(checkpoint) / "eval", ".")
    summary = evaluate_checkpoint(
        checkpoint, options["sim"], settings, out=out, weights_dir=weights_dir
    )
    print(f"eval dir: {out}")
    print(describe(summary))
    return summary


def main(argv: list[str] | None = None) -> None:
    """The `evaluate` command: `checkpoint=<path>` and overrides (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    given = [a for a in args if a.startswith("checkpoint=")]
    if len(given) != 1 or args[0] in ("-h", "--help"):
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    checkpoint = Path(given[0].removeprefix("checkpoint="))
    if not checkpoint.is_file():
        print(f"error: checkpoint={checkpoint}: no such file", file=sys.stderr)
        sys.exit(2)
    rest = [a for a in args if not a.startswith("checkpoint=")]
    sim = [a for a in rest if a.startswith(("sim=", "sim."))]
    if sim:
        if len(sim) != len(rest) or not any(a.startswith("sim=") for a in sim):
            print("error: sim=<task> takes sim.* options only, and needs sim=", file=sys.stderr)
            sys.exit(2)
        evaluate_in_sim(checkpoint, dict(a.split("=", 1) for a in sim))
        return
    evaluate(checkpoint, rest)


if __name__ == "__main__":
    main()
