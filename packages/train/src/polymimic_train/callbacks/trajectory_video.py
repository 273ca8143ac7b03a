"""Overlay videos: predicted against true action chunks over pinned episodes.

After a validation that is due (every `every_n_validations`), for each embodiment, one
validation episode and one training episode are played from their start, contiguous
frames at the episode's own frame rate, with every frame's predicted and true chunk
drawn by polymimic-eval's renderer (horizon traces, hand skeletons, the prompt). The
episodes are pinned: the first readable one of each split, the same at every validation,
so videos compare across steps.

Under DDP each rank renders a share of the frames; rank 0 gathers them in order and is
the only writer: `videos/<embodiment>/step<N>-<split>.mp4`, and the same clip as an
animated image in TensorBoard and as a video in W&B (`logger=wandb`), both under
`videos/<embodiment>/<split>`. Nothing is loaded and no batch is built when no video is due.
"""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
import torch.distributed as dist
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from PIL import Image

from polymimic_data import EpisodeDataset, collate_samples
from polymimic_data.embodiments import camera_intrinsics
from polymimic_data.samples import NoValidSampleError, resize_uint8
from polymimic_eval import render_overlay, write_video

log = logging.getLogger(__name__)

SPLITS = ("val", "train")
Frames = list[tuple[int, Any]]  # (index in the episode, what is drawn of that frame)


def _gather_to_zero(frames: Frames, failure: str | None) -> tuple[Frames, list[str]] | None:
    """On rank 0: every rank's frames (by index) and failures; elsewhere None."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return frames, [failure] if failure else []
    gathered: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object((frames, failure), gathered, dst=0)
    if gathered is None:
        return None
    every = [f for part, _ in gathered for f in part]
    return every, [fail for _, fail in gathered if fail]


def _share() -> tuple[int, int]:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def tensorboard_clip(frames: list[np.ndarray], fps: float, width: int) -> Any:
    """A TensorBoard image summary value holding the clip as an animated GIF."""
    # (protobuf-generated: its classes are made at import, so no checker sees them)
    from tensorboard.compat.proto.summary_pb2 import (
        Summary,  # pyright: ignore[reportAttributeAccessIssue]
    )

    h, w = frames[0].shape[:2]
    size = (min(width, w), round(h * min(width, w) / w))
    images = [Image.fromarray(f).resize(size, Image.Resampling.BILINEAR) for f in frames]
    buffer = io.BytesIO()
    images[0].save(
        buffer,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=round(1000 / fps),
        loop=0,
    )
    return Summary.Image(
        height=size[1], width=size[0], colorspace=3, encoded_image_string=buffer.getvalue()
    )


class TrajectoryVideoCallback(pl.Callback):
    """Overlay videos of predicted against true trajectories after due validations."""

    def __init__(
        self,
        *,
        max_frames: int = 80,
        fps: float | None = None,
        batch_size: int = 16,
        every_n_validations: int = 1,
        splits: tuple[str, ...] | list[str] = SPLITS,
        tensorboard_width: int = 320,
        at_step: int | None = None,
    ) -> None:
        """Videos of pinned episodes after every `every_n_validations`-th validation.

        `fps` overrides the episode's own rate (its `fps` attribute) when set; `at_step`
        names the files by a given training step (evaluate), else by the trainer's.
        """
        unknown = set(splits) - set(SPLITS)
        if unknown or every_n_validations < 1:
            raise ValueError(
                f"trajectory_video: splits must be among {SPLITS} (got {list(splits)}) and "
                f"every_n_validations >= 1 (got {every_n_validations})"
            )
        self.max_frames, self.fps, self.batch_size = max_frames, fps, batch_size
        self.every_n_validations, self.splits = every_n_validations, tuple(splits)
        self.tensorboard_width, self.at_step = tensorboard_width, at_step
        self.validations = 0
        self.pinned: dict[tuple[str, str], int] = {}  # (embodiment, split) -> episode index
        self.written: list[Path] = []

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self.validations += 1
        if (self.validations - 1) % self.every_n_validations:
            return
        datamodule: Any = trainer.datamodule  # type: ignore[attr-defined]
        for name in datamodule.cfg["datasets"]:
            for split in self.splits:
                self._video(trainer, pl_module, datamodule, name, split)

    def _video(
        self, trainer: pl.Trainer, module: Any, datamodule: Any, name: str, split: str
    ) -> None:
        """The pinned episode, or the next readable one; every rank takes part."""
        step = trainer.global_step if self.at_step is None else self.at_step
        path = self._destination(Path(trainer.default_root_dir), name, split, step)

        episodes = datamodule.episodes(name, split)
        for episode in range(self.pinned.get((name, split), 0), len(episodes)):
            dataset = datamodule.video_dataset(name, episode, split)
            frames, failure = self._render_share(dataset, datamodule, module)
            gathered = _gather_to_zero(frames, failure)
            failures = gathered[1] if gathered is not None else []
            # Every rank must move on together: rank 0 decides.
            failed = trainer.strategy.broadcast(bool(failures), src=0)
            if failed:
                if trainer.is_global_zero:
                    log.warning(
                        "no video of %s episode %s of %s: %s",
                        split,
                        episodes[episode].hash,
                        name,
                        failures[0],
                    )
                continue
            self.pinned[(name, split)] = episode
            if gathered is not None:
                ordered = [f for _, f in sorted(gathered[0], key=lambda item: item[0])]
                fps = self.fps or float(dataset.episodes[0].attrs.get("fps") or 30.0)
                self._write(trainer, path, ordered, fps, name, split, step)
            return

    def _destination(self, run_dir: Path, name: str, split: str, step: int) -> Path:
        return run_dir / "videos" / name / f"step{step:06d}-{split}.mp4"

    def _write(
        self,
        trainer: pl.Trainer,
        path: Path,
        frames: list[np.ndarray],
        fps: float,
        name: str,
        split: str,
        step: int,
    ) -> None:
        tag = f"videos/{name}/{split}"
        write_video(path, frames, fps)
        self.written.append(path)
        log.info("wrote %s", path)
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):
                # (protobuf-generated: its classes are made at import, so no checker sees them)
                from tensorboard.compat.proto.summary_pb2 import (
                    Summary,  # pyright: ignore[reportAttributeAccessIssue]
                )

                clip = tensorboard_clip(frames, fps, self.tensorboard_width)
                summary = Summary(value=[Summary.Value(tag=tag, image=clip)])
                # SummaryWriter.add_video needs moviepy; the GIF it would write is made here.
                logger.experiment._get_file_writer().add_summary(summary, step)
            elif isinstance(logger, WandbLogger):  # the mp4 itself, as a wandb.Video
                logger.log_video(tag, videos=[str(path)], step=step, caption=[f"step {step}"])

    def _render_share(
        self, dataset: EpisodeDataset, datamodule: Any, module: Any
    ) -> tuple[Frames, str | None]:
        """The frames of this rank's share (every world-th), or why they could not be read."""
        rank, world = _share()
        indices = list(range(min(self.max_frames, len(dataset))))[rank::world]
        try:
            return self._render(dataset, indices, datamodule, module), None
        except NoValidSampleError as exc:  # a broken episode: the caller tries the next
            return [], str(exc)

    @torch.no_grad()
    def _predicted(
        self, dataset: EpisodeDataset, indices: list[int], datamodule: Any, module: Any
    ) -> Iterator[tuple[list[int], dict[str, Any], np.ndarray, np.ndarray, torch.Tensor]]:
        """Per batch of `indices`: them, the batch, the predicted and true chunks, the images.

        The images are the first camera's at their stored size, (B, 3, H, W) uint8.
        """
        model_size = tuple(datamodule.cfg["image_size"])
        for start in range(0, len(indices), self.batch_size):
            chunk = indices[start : start + self.batch_size]
            batch = collate_samples([dataset[i] for i in chunk])
            display = batch[f"images.{dataset.cameras[0]}"]
            for cam in dataset.cameras:  # the policy sees images at its own resolution
                key = f"images.{cam}"
                batch[key] = resize_uint8(batch[key], model_size)
            batch = {
                k: v.to(module.device) if isinstance(v, torch.Tensor) else v
                for k, v in batch.items()
            }
            pred = module.predict_actions(batch).float().cpu().numpy()
            true = batch["actions"].float().cpu().numpy()
            yield chunk, batch, pred, true, display

    def _render(
        self, dataset: EpisodeDataset, indices: list[int], datamodule: Any, module: Any
    ) -> Frames:
        camera = dataset.cameras[0]
        try:
            intrinsics = camera_intrinsics(dataset.spec, dataset.episodes[0].attrs, camera)
        except KeyError:  # an uncalibrated camera (LeRobot's): the frames, and the prompt
            intrinsics = None
        frames: Frames = []
        for chunk, batch, pred, true, display in self._predicted(
            dataset, indices, datamodule, module
        ):
            for j, index in enumerate(chunk):
                image = display[j].permute(1, 2, 0).numpy()
                frame = render_overlay(
                    image,
                    intrinsics,
                    dataset.layout,
                    true=true[j],
                    pred=pred[j],
                    prompt=str(batch["prompt"][j]),
                )
                frames.append((index, frame))
        return frames
