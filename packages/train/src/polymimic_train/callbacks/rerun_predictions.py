"""Validation predictions in rerun: a run's progress, scrubbed frame by frame.

The pinned episodes of the overlay videos (TrajectoryVideoCallback: per embodiment the
first readable validation episode, and a training one with `splits: [val, train]`), their
first `max_frames` frames, after every `every_n_validations`-th validation (0: off, the
default; `callbacks.rerun.every_n_validations=1` turns it on). Each validation writes
`rerun/<embodiment>/step<N>-<split>.rrd` (whole or not at all), holding, under
`<embodiment>/<split>/` on the `frame` timeline:

- `image`: the first camera's frame;
- `true/<channel>`: the true chunk from each frame, as the future it holds;
- `step<N>/<channel>`: the chunk the policy predicted there at training step N;
- `mean_abs_error`: the mean absolute difference of those chunks over their valid steps,
  in the channels' own units (metres, radians, gripper), on the `step` timeline; not the
  normalised `val_action_error`.

Channels are named by the layout's groups (`left_position/x`, `left_gripper`, ...). Every
file of a run shares one recording id, so opening them together (`rerun
runs/<run>/rerun/**/*.rrd`) gives one recording in which each validation's predictions are
a series of their own beside the truth: the policy's progress, step by step. Needs
rerun-sdk (`polymimic-train[viz]`); nothing is imported while it is off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np

from polymimic_data import EpisodeDataset
from polymimic_data.episodes import RecordingFile, log_chunk, require_rerun
from polymimic_train.callbacks.trajectory_video import Frames, TrajectoryVideoCallback

APPLICATION = "polymimic_train_validation"


def chunk_spacing(dataset: EpisodeDataset) -> float:
    """Frames between a chunk's action steps."""
    if dataset.action_window is not None and dataset.horizon > 1:
        return (dataset.action_window - 1) / (dataset.horizon - 1)
    return float(dataset.action_stride)


class RerunPredictions(TrajectoryVideoCallback):
    """Predicted against true chunks of the pinned episodes, one rerun file per validation."""

    def __init__(
        self,
        *,
        every_n_validations: int = 0,
        max_frames: int = 80,
        batch_size: int = 16,
        splits: tuple[str, ...] | list[str] = ("val",),
    ) -> None:
        if every_n_validations < 0:
            raise ValueError(
                f"callbacks.rerun.every_n_validations: 0 (off) or more, got {every_n_validations}"
            )
        every = max(every_n_validations, 1)
        super().__init__(max_frames=max_frames, batch_size=batch_size, every_n_validations=every,
                         splits=splits)  # fmt: skip
        self.enabled = every_n_validations > 0
        self.rr: Any = (
            require_rerun("callbacks.rerun", "polymimic-train[viz]") if self.enabled else None
        )
        # the channel names and chunk spacing of the episode being rendered: set by _render,
        # read by the _write that follows it in the same _video call (on rank 0, which
        # renders a share too)
        self.channels: tuple[list[str], float] = ([], 1.0)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.enabled:
            super().on_validation_end(trainer, pl_module)

    def _destination(self, run_dir: Path, name: str, split: str, step: int) -> Path:
        return run_dir / "rerun" / name / f"step{step:06d}-{split}.rrd"

    def _render(
        self, dataset: EpisodeDataset, indices: list[int], datamodule: Any, module: Any
    ) -> Frames:
        """Per frame: the first camera's image (H, W, 3), the true and the predicted chunks.

        The true chunk's steps past the episode's end are cut off.
        """
        self.channels = (dataset.layout.channel_names(), chunk_spacing(dataset))
        frames: Frames = []
        for chunk, batch, pred, true, display in self._predicted(
            dataset, indices, datamodule, module
        ):
            valid = batch["action_mask"].bool().cpu().numpy()
            for j, index in enumerate(chunk):
                image = display[j].permute(1, 2, 0).numpy()
                frames.append((index, (image, true[j][valid[j]], pred[j])))
        return frames

    def _write(self, trainer: pl.Trainer, path: Path, frames: list[Any], fps: float, name: str,
               split: str, step: int) -> None:  # fmt: skip
        """The frames' chunks into `path` (rank 0 only)."""
        rr = self.rr
        names, spacing = self.channels
        root = f"{name}/{split}"
        out = RecordingFile(path, APPLICATION, f"validation-{trainer.default_root_dir}", rr)
        rec = out.rec
        try:
            errors = []
            for frame, (image, true, pred) in enumerate(frames):
                rec.set_time("frame", sequence=frame)
                rec.log(f"{root}/image", rr.Image(image).compress(jpeg_quality=85))
                log_chunk(rec, f"{root}/true", frame, true, spacing=spacing, names=names)
                log_chunk(rec, f"{root}/step{step:06d}", frame, pred, spacing=spacing,
                          names=names)  # fmt: skip
                errors.append(float(np.abs(pred[: len(true)] - true).mean()))
            rec.reset_time()
            rec.set_time("step", sequence=step)
            rec.log(f"{root}/mean_abs_error", rr.Scalars(float(np.mean(errors))))
        except BaseException:
            out.abort()
            raise
        self.written.append(out.close())
