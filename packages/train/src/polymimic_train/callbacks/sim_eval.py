"""Closed-loop rollouts during training, to show when a run learns its task.

After every `every_n_validations`-th validation (0, the default, is off), the policy as
it stands acts in the simulated task for a few episodes (polymimic-sim, the
`polymimic-train[sim]` extra), from the same held-out seeds each time, and the success
rate is logged as `sim/<task>/success_rate` (with `sim/<task>/strict_success_rate` and
`sim/<task>/mean_return`) at the training step, beside the offline metrics; each summary
is also written to `sim/<task>/step<N>.json` in the run directory. The task defaults to
the one the data config names (`data.sim_task`, set by the `sim_*` data configs).

Rank 0 runs the rollouts (the other ranks wait at their next collective). The policy is
used in place, in eval mode, and put back in training mode after.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
from lightning.pytorch.utilities import rank_zero_only

from polymimic_train.lightning.policy_module import PolicyModule

log = logging.getLogger(__name__)


class SimEval(pl.Callback):
    """Rollouts in `task` after every `every_n_validations`-th validation (see the module).

    `rollouts`: polymimic-sim's RolloutSettings, as flat options (`episodes`, `seed`,
    `executor`, `n_action_steps`, `max_steps`, `workers`, ...); what is not given is the
    settings' default. `embodiment`: the one that acts, when the run trains several
    (default: the task's, e.g. sim/aloha_ee of a robot cotrained with sim/hands).
    """

    def __init__(
        self,
        task: str | None = None,
        every_n_validations: int = 0,
        embodiment: str | None = None,
        **rollouts: Any,
    ) -> None:
        if every_n_validations < 0:
            raise ValueError(
                f"callbacks.sim_eval.every_n_validations: >= 0, got {every_n_validations}"
            )
        if every_n_validations and not task:
            raise ValueError(
                "callbacks.sim_eval.task: which simulated task to roll out in, e.g. "
                "aloha/transfer_cube (or a data config with sim_task)"
            )
        self.task_name, self.every, self.embodiment = task, every_n_validations, embodiment
        self.rollouts = rollouts
        self.settings: Any = None  # polymimic-sim's RolloutSettings, made in setup
        self.validations = 0
        self.summaries: list[dict[str, Any]] = []
        self._tasks: dict[str, Any] = {}  # made once, kept between validations

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """A missing extra or a rollout option that cannot work fails now, not after an hour."""
        if not self.every or stage != "fit":
            return
        try:
            from polymimic_sim import RolloutSettings
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(
                f"callbacks.sim_eval needs polymimic-sim: install polymimic-train[sim] ({exc})"
            ) from exc
        try:
            self.settings = RolloutSettings.parse({"progress": False} | self.rollouts)
        except ValueError as exc:
            raise ValueError(f"callbacks.sim_eval.{exc}") from exc

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        """Roll out after every `every_n_validations`-th validation (not the sanity check)."""
        if not self.every or trainer.sanity_checking:
            return
        self.validations += 1
        if self.validations % self.every == 0:
            self._roll_out(trainer, pl_module)

    @rank_zero_only
    def _roll_out(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from polymimic_data.store import write_json_atomic
        from polymimic_serve import TrainedPolicy
        from polymimic_sim import describe, evaluate_policy, suite_tasks, task_embodiment

        if not isinstance(pl_module, PolicyModule):
            raise TypeError(f"callbacks.sim_eval: a PolicyModule, got {type(pl_module).__name__}")
        record = pl_module.record
        embodiments = sorted(record.get("embodiments", {}))
        acting = task_embodiment(suite_tasks(str(self.task_name))[0])
        embodiment = self.embodiment or (
            embodiments[0] if len(embodiments) == 1 else acting if acting in embodiments else None
        )
        if embodiment is None:
            raise ValueError(
                f"callbacks.sim_eval.embodiment: the run trains {embodiments}; name the one "
                f"that acts in {self.task_name}"
            )
        training = pl_module.training
        trained = TrainedPolicy(
            pl_module.policy, pl_module.normalizer, record, embodiment, trainer.global_step
        )
        try:
            summary = evaluate_policy(
                trained, str(self.task_name), self.settings, tasks=self._tasks
            )
        finally:
            pl_module.train(training)
        step = trainer.global_step
        self.summaries.append(summary)
        prefix = f"sim/{self.task_name}"
        metrics = {f"{prefix}/{key}": summary[key]
                   for key in ("success_rate", "strict_success_rate", "mean_return")}  # fmt: skip
        for key in ("success_rate", "strict_success_rate"):  # a suite: each of its tasks
            per_task = summary.get(f"{key}_per_task", {})
            metrics |= {f"sim/{name}/{key}": rate for name, rate in per_task.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        write_json_atomic(Path(trainer.default_root_dir) / prefix / f"step{step:06d}.json", summary)
        log.info("step %d: %s", step, describe(summary))

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        """Close the simulators kept between validations."""
        for task in self._tasks.values():
            task.close()
        self._tasks = {}
