"""A callback that renders predicted against true action chunks over a validation episode."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_only

from polymimic_data import EpisodeDataset, collate_samples
from polymimic_data.data_faults import NoValidSampleError
from polymimic_data.embodiments import camera_intrinsics
from polymimic_eval import draw_chunk_overlay, write_video

log = logging.getLogger(__name__)


class TrajectoryVideoCallback(pl.Callback):
    """After each validation, one mp4 per embodiment in `<run>/videos/`."""

    def __init__(
        self, *, max_frames: int = 80, fps: float | None = None, batch_size: int = 16
    ) -> None:
        """Contiguous frames from the episode's start, at the episode's frame rate.

        `fps` overrides the rate; None plays at the episode's own (its `fps` attribute).
        """
        self.max_frames, self.fps, self.batch_size = max_frames, fps, batch_size
        self.written: list[Path] = []

    @rank_zero_only
    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        datamodule: Any = trainer.datamodule  # type: ignore[attr-defined]
        for name in datamodule.val_episodes:
            if not datamodule.val_episodes[name]:
                continue
            path = (
                Path(trainer.default_root_dir)
                / "videos"
                / f"{name}-step{trainer.global_step:06d}.mp4"
            )
            for episode in range(len(datamodule.val_episodes[name])):
                try:
                    self._render(
                        datamodule.video_dataset(name, episode), datamodule, pl_module, path
                    )
                except NoValidSampleError as exc:  # a broken episode: show the next one
                    log.warning("no video of validation episode %d of %s: %s", episode, name, exc)
                    continue
                self.written.append(path)
                log.info("wrote %s", path)
                break

    @torch.no_grad()
    def _render(self, dataset: EpisodeDataset, datamodule: Any, module: Any, path: Path) -> None:
        camera = dataset.cameras[0]
        model_size = tuple(datamodule.cfg["image_size"])
        episode = dataset.episodes[0]
        intrinsics = camera_intrinsics(dataset.spec, episode.attrs, camera)
        indices = np.arange(min(self.max_frames, len(dataset)))  # contiguous: real time
        frames = []
        for start in range(0, len(indices), self.batch_size):
            batch = collate_samples(
                [dataset[int(i)] for i in indices[start : start + self.batch_size]]
            )
            display = batch[f"images.{camera}"]
            for cam in dataset.cameras:  # the policy sees images at its own resolution
                key = f"images.{cam}"
                batch[key] = (
                    F.interpolate(
                        batch[key].float(), size=model_size, mode="bilinear", antialias=True
                    )
                    .round()
                    .to(torch.uint8)
                )
            batch = {
                k: v.to(module.device) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()
            }
            pred = module.predict_actions(batch).cpu().numpy()
            true = batch["actions"].cpu().numpy()
            for j in range(len(pred)):
                image = display[j].permute(1, 2, 0).numpy()
                frames.append(
                    draw_chunk_overlay(image, pred[j], true[j], dataset.layout, intrinsics)
                )
        write_video(path, frames, self.fps or float(episode.attrs.get("fps") or 30.0))
