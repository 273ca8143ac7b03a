"""After each validation, the error per chunk step as a plot in the run directory.

The policy module logs `val/<embodiment>/step_error/<step>` (each step averaged over the
samples valid at it, over every rank); this callback draws one curve per embodiment into
`plots/step_error/step<N>.png` and the same picture into TensorBoard and W&B (`val/step_error`).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from PIL import Image

from polymimic_eval import plot_step_errors

log = logging.getLogger(__name__)

STEP_ERROR = re.compile(r"^val/(?P<embodiment>[^/]+)/step_error/(?P<step>\d+)$")


def step_error_curves(metrics: dict[str, float]) -> dict[str, list[float]]:
    """{embodiment: error per chunk step (NaN where no sample was valid)} from logged metrics."""
    points: dict[str, dict[int, float]] = {}
    for key, value in metrics.items():
        match = STEP_ERROR.match(key)
        if match:
            points.setdefault(match["embodiment"], {})[int(match["step"])] = float(value)
    return {
        name: [steps.get(t, math.nan) for t in range(max(steps) + 1)]
        for name, steps in sorted(points.items())
    }


class StepErrorPlot(pl.Callback):
    """After each validation, the error per chunk step as `plots/step_error/step<N>.png`."""

    def __init__(self, at_step: int | None = None) -> None:
        """`at_step` names the files by a given training step (evaluate), else the trainer's."""
        self.at_step = at_step
        self.written: list[Path] = []

    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
        curves = step_error_curves(metrics)
        if not curves:
            return
        step = trainer.global_step if self.at_step is None else self.at_step
        path = Path(trainer.default_root_dir) / "plots" / "step_error" / f"step{step:06d}.png"
        plot_step_errors(curves, path, title=f"error over the chunk, step {step}")
        self.written.append(path)
        log.info("wrote %s", path)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                with Image.open(path) as image:
                    pixels = np.asarray(image.convert("RGB"))
                logger.experiment.add_image("val/step_error", pixels, step, dataformats="HWC")
            elif isinstance(logger, WandbLogger):
                logger.log_image("val/step_error", images=[str(path)], step=step)
