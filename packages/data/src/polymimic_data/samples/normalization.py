"""Normalisation statistics from state and actions only, and the Normalizer that applies them.

Statistics never decode an image. A Normalizer holds them as buffers, so every
checkpoint carries them; it runs on the device and inverts exactly, except on an action
channel that never moves in the statistics, which it returns as its value.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import torch
from torch import nn

from polymimic_data.geometry.layouts import Layout
from polymimic_data.samples.dataset import EpisodeDataset
from polymimic_data.samples.faults import SampleFault
from polymimic_data.store.atomic_files import write_json_atomic

log = logging.getLogger(__name__)

NormMode = Literal["zscore", "minmax", "quantile"]
_DEGENERATE_SCALE = 1e-4
_STAT_NAMES = ("mean", "std", "min", "max", "q01", "q99")


@dataclass(frozen=True)
class VectorStats:
    """Per-channel statistics of one vector (state or actions)."""

    mean: np.ndarray
    std: np.ndarray
    min: np.ndarray
    max: np.ndarray
    q01: np.ndarray
    q99: np.ndarray

    @classmethod
    def of(cls, values: np.ndarray) -> VectorStats:
        """Statistics over the rows of a (N, D) array."""
        q01, q99 = np.quantile(values, [0.01, 0.99], axis=0)
        return cls(values.mean(0), values.std(0), values.min(0), values.max(0), q01, q99)

    def to_json(self) -> dict[str, list[float]]:
        return {name: getattr(self, name).tolist() for name in _STAT_NAMES}

    @classmethod
    def from_json(cls, data: Mapping[str, list[float]]) -> VectorStats:
        return cls(**{n: np.asarray(data[n], dtype=np.float64) for n in _STAT_NAMES})


@dataclass(frozen=True)
class NormStats:
    """The statistics of state and of actions, as a Normalizer applies them."""

    state: VectorStats
    actions: VectorStats

    def to_json(self) -> dict[str, dict[str, list[float]]]:
        return {"state": self.state.to_json(), "actions": self.actions.to_json()}

    @classmethod
    def from_json(cls, data: Mapping[str, Mapping[str, list[float]]]) -> NormStats:
        return cls(VectorStats.from_json(data["state"]), VectorStats.from_json(data["actions"]))


def compute_norm_stats(dataset: EpisodeDataset, *, num_samples: int, seed: int) -> NormStats:
    """Stream a seeded sample of frames; actions pool over the horizon's valid steps."""
    rng = np.random.default_rng(seed)
    count = min(num_samples, len(dataset))
    indices = rng.choice(len(dataset), size=count, replace=False)
    states, actions, skipped = [], [], 0
    for i in np.sort(indices):
        try:
            state, chunk, mask = dataset.numeric_sample(int(i))
        except SampleFault:
            skipped += 1
            continue
        states.append(state)
        actions.append(chunk[mask])
    if skipped:
        log.warning("normalisation statistics skipped %d bad samples of %d", skipped, count)
    if not states:
        raise ValueError(f"no valid sample among {count} drawn for statistics")
    return NormStats(
        VectorStats.of(np.concatenate(states).astype(np.float64)),
        VectorStats.of(np.concatenate(actions).astype(np.float64)),
    )


def norm_stats_key(dataset: EpisodeDataset, *, num_samples: int, seed: int) -> str:
    """A key that changes whenever the episode set or what is sampled from it changes."""
    parts = [
        dataset.spec.name,
        dataset.recipe.layout,
        str(dataset.history),
        str(dataset.horizon),
        str(num_samples),
        str(seed),
        *(f"{e.hash}:{e.total_frames}" for e in dataset.episodes),
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def load_or_compute_norm_stats(
    dataset: EpisodeDataset, *, cache_dir: str | os.PathLike[str], num_samples: int, seed: int
) -> tuple[NormStats, Path]:
    """Load cached statistics for this dataset, or compute and cache them atomically."""
    key = norm_stats_key(dataset, num_samples=num_samples, seed=seed)
    path = Path(cache_dir) / f"norm_stats-{dataset.spec.name}-{key}.json"
    if path.exists():
        log.info("loaded normalisation statistics from %s", path)
        return NormStats.from_json(json.loads(path.read_text())), path
    stats = compute_norm_stats(dataset, num_samples=num_samples, seed=seed)
    write_json_atomic(path, stats.to_json())
    log.info("computed normalisation statistics from %d samples into %s", num_samples, path)
    return stats, path


def _center_scale(
    stats: VectorStats, layout: Layout, mode: NormMode, what: str, *, hold_constant: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per channel (center, scale): x normalised is (x - center) / scale.

    A channel too narrow to scale passes through (center 0, scale 1). With
    `hold_constant` (actions), a channel that never moves in the statistics' samples
    (max - min below the same bound) is held:
    center its value, scale 0, so the policy outputs it exactly whatever its head says (a
    head is accurate to a fraction of a unit: a unit of metres is centimetres off).
    """
    if mode == "zscore":
        center, scale = stats.mean, stats.std
    elif mode == "minmax":
        center, scale = (stats.max + stats.min) / 2, (stats.max - stats.min) / 2
    elif mode == "quantile":
        center, scale = (stats.q99 + stats.q01) / 2, (stats.q99 - stats.q01) / 2
    else:
        raise ValueError(f"unknown normalisation mode {mode!r}; use zscore, minmax or quantile")
    center, scale = center.astype(np.float64).copy(), scale.astype(np.float64).copy()
    keep = np.asarray(layout.normalised_mask())
    held = (stats.max - stats.min < _DEGENERATE_SCALE) & hold_constant
    degenerate = keep & (scale < _DEGENERATE_SCALE) & ~held
    for mask, fate in ((held, "are held at that value"), (degenerate, "pass through unnormalised")):
        if mask.any():
            names = [
                f"{g.name}[{c - g.start}]"
                for g in layout.groups
                for c in range(g.start, g.stop)
                if mask[c]
            ]
            warnings.warn(
                f"{layout.name} {what}: channels {names} are (nearly) constant; they {fate}",
                stacklevel=3,
            )
    passthrough = ~keep | degenerate
    center[passthrough], scale[passthrough] = 0.0, 1.0
    center[held], scale[held] = stats.mean[held], 0.0
    return torch.tensor(center, dtype=torch.float32), torch.tensor(scale, dtype=torch.float32)


class _EmbodimentNorm(nn.Module):
    state_center: torch.Tensor
    state_scale: torch.Tensor
    action_center: torch.Tensor
    action_scale: torch.Tensor
    action_mean: torch.Tensor

    def __init__(
        self, stats: NormStats, state_layout: Layout, action_layout: Layout, mode: NormMode
    ):
        super().__init__()
        # a state channel that never moves is a harmless input: only actions are held
        for prefix, vector, layout, hold in (
            ("state", stats.state, state_layout, False),
            ("action", stats.actions, action_layout, True),
        ):
            center, scale = _center_scale(vector, layout, mode, prefix, hold_constant=hold)
            self.register_buffer(f"{prefix}_center", center)
            self.register_buffer(f"{prefix}_scale", scale)
        self.register_buffer("action_mean", torch.tensor(stats.actions.mean, dtype=torch.float32))


class Normalizer(nn.Module):
    """Normalises state and actions per embodiment on the device; inverts actions exactly."""

    def __init__(
        self,
        stats: Mapping[str, NormStats],
        layouts: Mapping[str, Layout],
        mode: NormMode = "zscore",
    ) -> None:
        super().__init__()
        self.mode = mode
        self.per_embodiment = nn.ModuleDict(
            {
                name: _EmbodimentNorm(s, layouts[name], layouts[name], mode)
                for name, s in stats.items()
            }
        )

    def _get(self, embodiment: str) -> _EmbodimentNorm:
        if embodiment not in self.per_embodiment:
            raise KeyError(
                f"no normalisation statistics for embodiment {embodiment!r}; "
                f"have {list(self.per_embodiment.keys())}"
            )
        return self.per_embodiment[embodiment]  # type: ignore[return-value]

    def normalize_state(self, embodiment: str, state: torch.Tensor) -> torch.Tensor:
        n = self._get(embodiment)
        return (state - n.state_center) / n.state_scale

    def normalize_actions(self, embodiment: str, actions: torch.Tensor) -> torch.Tensor:
        """Actions normalised; a held channel (scale 0) is its offset from its value."""
        n = self._get(embodiment)
        scale = torch.where(n.action_scale > 0, n.action_scale, torch.ones_like(n.action_scale))
        return (actions - n.action_center) / scale

    def denormalize_actions(self, embodiment: str, actions: torch.Tensor) -> torch.Tensor:
        """Normalised actions back in the data's units; a held channel comes out as its value."""
        n = self._get(embodiment)
        return actions * n.action_scale + n.action_center

    def mean_actions(self, embodiment: str, like: torch.Tensor) -> torch.Tensor:
        """The predict-the-mean baseline, unnormalised, shaped like `like` (B, T, A)."""
        return self._get(embodiment).action_mean.expand_as(like)

    def normalize_observation(self, embodiment: str, state: torch.Tensor) -> dict:
        """`state` (B, K, S) normalised, and its latest step as an action (`action_anchor`).

        `action_anchor` (B, 1, A) is the latest state normalised with the actions'
        statistics: what a residual policy predicts its chunk relative to, in the units of
        its head. The state's own statistics differ (a channel held exactly still in the
        actions passes through unnormalised while the measured state jitters and is
        scaled by its std). State and actions share the embodiment's layout.
        """
        return {
            "state": self.normalize_state(embodiment, state),
            "action_anchor": self.normalize_actions(embodiment, state[:, -1:]),
        }

    def normalize_batch(self, batch: dict) -> dict:
        """A copy of `batch`: state and actions normalised, `action_anchor`; images untouched."""
        emb = batch["embodiment"]
        return (
            batch
            | self.normalize_observation(emb, batch["state"])
            | {"actions": self.normalize_actions(emb, batch["actions"])}
        )
