"""The Lightning data module: one polymimic-data dataset per embodiment of the data config."""

from __future__ import annotations

import logging
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
from lightning.pytorch.utilities import CombinedLoader
from torch.utils.data import DataLoader

from polymimic_data import (
    EpisodeDataset,
    EpisodeInfo,
    Layout,
    Normalizer,
    NormStats,
    load_or_compute_norm_stats,
    split_episodes,
)
from polymimic_data.embodiments import dataset_cameras
from polymimic_data.samples import default_workers, make_dataloader, subsample_frames
from polymimic_train.run_episodes import resolve_datasets, split_filtered

log = logging.getLogger(__name__)


class EmbodimentDataModule(pl.LightningDataModule):
    """Train and validation loaders per embodiment; a training step gets one batch of each."""

    def __init__(
        self,
        cfg: Mapping[str, Any],
        *,
        data_root: str,
        cache_dir: str,
        seed: int = 0,
        episodes: Mapping[str, Sequence[EpisodeInfo]] | None = None,
    ) -> None:
        """`episodes`: each dataset's, as the run resolved them (see run_episodes).

        Without them, `prepare` resolves each dataset once itself.
        """
        super().__init__()
        self.cfg = cfg
        self.seed = seed
        self.data_root = Path(data_root)
        self.cache_dir = Path(cache_dir)
        self.resolved = {n: list(e) for n, e in episodes.items()} if episodes is not None else None
        self.train_sets: dict[str, EpisodeDataset] = {}
        self.val_sets: dict[str, EpisodeDataset] = {}
        self.train_episodes: dict[str, list[EpisodeInfo]] = {}
        self.val_episodes: dict[str, list[EpisodeInfo]] = {}
        self.normalizer: Normalizer | None = None
        self.norm_stats: dict[str, NormStats] = {}
        self.train_groups: dict[str, np.ndarray] = {}  # under data.balance_by

    def _dataset(self, name: str, episodes: list[EpisodeInfo], **overrides: Any) -> EpisodeDataset:
        spec = self.cfg["datasets"][name]
        kwargs: dict[str, Any] = {
            "embodiment": spec["embodiment"],
            "layout": spec.get("layout"),
            "cameras": dataset_cameras(spec),
            "image_size": tuple(self.cfg["image_size"]),
            "history": int(self.cfg["history"]),
            "horizon": int(self.cfg["horizon"]),
            "action_stride": int(self.cfg.get("action_stride", 1)),
            "action_window": spec.get("action_window", self.cfg.get("action_window")),
            "max_bad_fraction_per_episode": float(
                self.cfg.get("faults", {}).get("max_bad_fraction_per_episode", 0.2)
            ),
        }
        return EpisodeDataset(episodes, **(kwargs | overrides))

    def _split(self, name: str) -> tuple[list[EpisodeInfo], list[EpisodeInfo]]:
        """Train and validation episodes: named splits by filters, else by val_fraction."""
        if self.resolved is None:
            self.resolved = resolve_datasets(
                dict(self.cfg), data_root=self.data_root, cache_dir=self.cache_dir
            )
        episodes = self.resolved[name]
        splits = self.cfg.get("splits")
        if splits:
            return split_filtered(name, episodes, splits)
        return split_episodes(
            episodes, val_fraction=float(self.cfg["val_fraction"]), seed=int(self.cfg["split_seed"])
        )

    def prepare(self) -> None:
        """Generate (if synthetic), resolve, split and compute statistics. Idempotent."""
        if self.normalizer is not None:
            return
        stats, layouts = {}, {}
        for name in self.cfg["datasets"]:
            train, val = self._split(name)
            self.train_sets[name] = self._dataset(name, train)
            # Before statistics and loaders. Episodes under data.roots that lack the
            # attribute were refused at resolve time (run_episodes); generated ones, here.
            groups = self._groups(name, self.train_sets[name])
            if groups is not None:
                self.train_groups[name] = groups
            self.train_episodes[name] = train
            self.val_episodes[name] = val
            frames = subsample_frames(val, self.cfg["val_frames_per_episode"])
            self.val_sets[name] = self._dataset(name, val, frames=frames)
            if self.cfg.get("numeric_pack", True):  # opens read no array files (polymimic-data)
                for dataset in (self.train_sets[name], self.val_sets[name]):
                    dataset.use_numeric_pack(self.cache_dir / "numeric_pack")
            norm = self.cfg["norm"]
            stats[name], path = load_or_compute_norm_stats(
                self.train_sets[name],
                cache_dir=self.cache_dir / "norm_stats",
                num_samples=int(norm["num_samples"]),
                seed=int(self.cfg["split_seed"]),
            )
            layouts[name] = self.train_sets[name].layout
            log.info(
                "%s: %d train / %d val episodes, %d train samples; stats %s",
                name,
                len(train),
                len(val),
                len(self.train_sets[name]),
                path,
            )
        self.norm_stats = stats
        self.normalizer = Normalizer(stats, layouts, mode=self.cfg["norm"]["mode"])

    def setup(self, stage: str) -> None:
        self.prepare()

    @property
    def layouts(self) -> dict[str, Layout]:
        return {name: ds.layout for name, ds in self.train_sets.items()}

    def _loader(
        self, name: str, dataset: EpisodeDataset, *, shuffle: bool, batch_size: int | None = None
    ) -> DataLoader:
        accelerator = self.trainer.accelerator if self.trainer is not None else None
        return make_dataloader(
            dataset,
            batch_size=batch_size or int(self.cfg["batch_size"]),
            shuffle=shuffle,
            num_workers=self._workers(),
            pin_memory=type(accelerator).__name__ == "CUDAAccelerator",
            seed=zlib.crc32(f"{self.seed}:{name}".encode()),  # each embodiment its own order
            episodes_per_block=self.cfg.get("episodes_per_block") if shuffle else None,
            groups=self.train_groups.get(name) if shuffle else None,
        )

    def _groups(self, name: str, dataset: EpisodeDataset) -> np.ndarray | None:
        """Each training sample's group under `data.balance_by` (None: a uniform shuffle)."""
        attribute = self.cfg.get("balance_by")
        if not attribute:
            return None
        groups, labels = dataset.sample_groups(str(attribute))
        if len(labels) < 2:
            log.warning(
                "%s: data.balance_by %s: every training episode has %s %r; nothing to balance",
                name, attribute, attribute, labels[0] if labels else None,
            )  # fmt: skip
        shares = np.bincount(groups, minlength=len(labels)) / max(1, len(groups))
        log.info(
            "%s: balanced by %s over %d groups, each 1/%d of a pass (their share of the "
            "samples: %s)",
            name,
            attribute,
            len(labels),
            len(labels),
            ", ".join(f"{label} {share:.1%}" for label, share in zip(labels, shares, strict=True)),
        )
        return groups

    def _workers(self) -> int:
        """Each loader's workers: `data.num_workers`, or polymimic-data's default_workers.

        With `auto`: the cores this process gets, shared among its training loaders.
        """
        workers = self.cfg["num_workers"]
        if workers != "auto":
            return int(workers)
        devices = self.trainer.num_devices if self.trainer is not None else None
        loaders = sum(1 for size in self.batch_sizes().values() if size)
        return default_workers(loaders=max(1, loaders), processes=devices)

    def batch_sizes(self) -> dict[str, int]:
        """Each dataset's share of a step's `batch_size`, by its `weight` (at least one).

        A dataset of weight 0 is held out of training: its statistics and its validation
        stay, but no step samples it (its share is 0, it has no training loader), so its
        own stems, readout and head stay as initialised; only what it shares with a trained
        embodiment (model.shared_stems, model.shared_head) learns.
        """
        weights = {n: float(self.cfg["datasets"][n].get("weight", 1.0)) for n in self.train_sets}
        if any(w < 0 for w in weights.values()) or not any(weights.values()):
            raise ValueError(
                f"data.datasets weights must be 0 or more, one at least positive, got {weights}"
            )
        total = sum(weights.values())
        batch = int(self.cfg["batch_size"])
        return {n: max(1, round(batch * w / total)) if w else 0 for n, w in weights.items()}

    def loss_weights(self) -> dict[str, float]:
        """Each dataset's `loss_weight` (1 by default): its loss's weight in a step's mean.

        `weight` sets how many of a step's samples a dataset gets; this sets how much its
        loss counts, whatever its share (a noisy embodiment's loss can swamp a clean one's).
        """
        return {n: float(self.cfg["datasets"][n].get("loss_weight", 1.0)) for n in self.train_sets}

    def train_dataloader(self) -> CombinedLoader:
        loaders = {
            n: self._loader(n, self.train_sets[n], shuffle=True, batch_size=size)
            for n, size in self.batch_sizes().items()
            if size
        }
        return CombinedLoader(loaders, mode="max_size_cycle")

    def val_dataloader(self) -> list[DataLoader]:
        return [self._loader(n, ds, shuffle=False) for n, ds in self.val_sets.items()]

    def episodes(self, name: str, split: str) -> list[EpisodeInfo]:
        """The episodes of one dataset's split ("train" or "val")."""
        return {"train": self.train_episodes, "val": self.val_episodes}[split][name]

    def video_dataset(self, name: str, episode: int = 0, split: str = "val") -> EpisodeDataset:
        """One whole episode of a split at its stored resolution, frame by frame."""
        ep = self.episodes(name, split)[episode]
        return self._dataset(
            name, [ep], image_size=None, frames=[(0, f) for f in range(ep.total_frames)]
        )
