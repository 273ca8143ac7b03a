"""Closed-loop rollouts during training, to show when a run learns its task.

After every `every_n_validations`-th validation (0, the default, is off), the policy as
it stands acts in the simulated task for a few episodes (polymimic-sim, the
`polymimic-train[sim]` extra), from the same held-out seeds each time, and the success
rate is logged as `sim/<task>/success_rate` (with `sim/<task>/mean_return`) at the
training step, beside the offline metrics; each summary is also written to
`sim/<task>/step<N>.json` in the run directory. The task defaults to the one the data
config names (`data.sim_task`, set by the `sim_*` data configs).

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
    """Rollouts in `task` after every `every_n_validations`-th validation (see the module)."""

    def __init__(
        self,
        task: str | None = None,
        every_n_validations: int = 0,
        episodes: int = 10,
        seed: int = 1000,
        executor: str = "chunk",
        executor_options: dict[str, Any] | None = None,
        embodiment: str | None = None,
        max_steps: int | None = None,
    ) -> None:
        """`max_steps`: ticks per episode at most (None: the task's own limit)."""
        if every_n_validations < 0 or episodes < 1:
            raise ValueError(
                f"callbacks.sim_eval: every_n_validations >= 0 and episodes >= 1, got "
                f"{every_n_validations} and {episodes}"
            )
        if every_n_validations and not task:
            raise ValueError(
                "callbacks.sim_eval.task: which simulated task to roll out in, e.g. "
                "aloha/transfer_cube (or a data config with sim_task)"
            )
        self.task_name, self.every = task, every_n_validations
        self.episodes, self.seed, self.embodiment = episodes, seed, embodiment
        self.max_steps = max_steps
        self.executor, self.executor_options = executor, dict(executor_options or {})
        self.validations = 0
        self.summaries: list[dict[str, Any]] = []
        self._tasks: dict[str, Any] = {}  # made once, kept between validations

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        if self.every and stage == "fit":  # a missing extra fails now, not after an hour
            try:
                import polymimic_sim.rollouts  # noqa: F401
            except ModuleNotFoundError as exc:
                raise ModuleNotFoundError(
                    f"callbacks.sim_eval needs polymimic-sim: install polymimic-train[sim] ({exc})"
                ) from exc

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not self.every or trainer.sanity_checking:
            return
        self.validations += 1
        if self.validations % self.every == 0:
            self._roll_out(trainer, pl_module)

    @rank_zero_only
    def _roll_out(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        from polymimic_data.store import write_json_atomic
        from polymimic_serve import TrainedPolicy
        from polymimic_sim.rollouts import combine, describe
        from polymimic_sim.tasks import suite_tasks

        if not isinstance(pl_module, PolicyModule):
            raise TypeError(f"callbacks.sim_eval: a PolicyModule, got {type(pl_module).__name__}")
        record = pl_module.record
        embodiments = sorted(record.get("embodiments", {}))
        embodiment = self.embodiment or (embodiments[0] if len(embodiments) == 1 else None)
        if embodiment is None:
            raise ValueError(
                f"callbacks.sim_eval.embodiment: the run trains {embodiments}; name the one "
                f"that acts in {self.task_name}"
            )
        training = pl_module.training
        trained = TrainedPolicy(
            pl_module.policy, pl_module.normalizer, record, embodiment, trainer.global_step
        )
        names = suite_tasks(str(self.task_name))  # a suite: each of its tasks
        try:
            parts = {name: self._evaluate(trained, name) for name in names}
        finally:
            pl_module.train(training)
        summary = combine(str(self.task_name), parts) if len(names) > 1 else parts[names[0]]
        step = trainer.global_step
        summary |= {"weights_step": step}
        self.summaries.append(summary)
        prefix = f"sim/{self.task_name}"
        metrics = {f"{prefix}/success_rate": summary["success_rate"],
                   f"{prefix}/mean_return": summary["mean_return"]}  # fmt: skip
        if len(names) > 1:
            metrics |= {f"sim/{n}/success_rate": p["success_rate"] for n, p in parts.items()}
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=step)
        write_json_atomic(Path(trainer.default_root_dir) / prefix / f"step{step:06d}.json", summary)
        log.info("step %d: %s", step, describe(summary))

    def _evaluate(self, trained: Any, name: str) -> dict[str, Any]:
        from polymimic_serve import LocalPolicy
        from polymimic_sim.rollouts import evaluate
        from polymimic_sim.tasks import make_task

        if name not in self._tasks:
            self._tasks[name] = make_task(
                name, image_size=trained.image_size, cameras=trained.cameras
            )
        return evaluate(
            LocalPolicy(trained, seed=self.seed),
            self._tasks[name],
            episodes=self.episodes,
            seed=self.seed,
            executor=self.executor,
            executor_options=self.executor_options,
            max_steps=self.max_steps,
            progress=False,
        )

    def teardown(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        for task in self._tasks.values():
            task.close()
        self._tasks = {}
