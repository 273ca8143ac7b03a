"""A map-style dataset over episodes of one embodiment, yielding samples of the batch contract."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

from polymimic_data.embodiments import VectorRecipe, get_embodiment
from polymimic_data.episode_index import EpisodeIndex, EpisodeInfo
from polymimic_data.episode_store import EpisodeReader
from polymimic_data.jpeg_decode import decode_jpeg
from polymimic_data.layouts import Layout

Sample = dict[str, Any]


class _EpisodeCache:
    """Per-worker: readers opened once, small numeric arrays read whole, bounded LRU."""

    def __init__(self, episodes: Sequence[EpisodeInfo], keys: Sequence[str], capacity: int) -> None:
        self._episodes = episodes
        self._keys = tuple(keys)
        self._capacity = capacity
        self._entries: OrderedDict[int, tuple[EpisodeReader, dict[str, np.ndarray], list]] = (
            OrderedDict()
        )

    def get(self, episode: int) -> tuple[EpisodeReader, dict[str, np.ndarray], list]:
        entry = self._entries.get(episode)
        if entry is not None:
            self._entries.move_to_end(episode)
            return entry
        reader = EpisodeReader(self._episodes[episode].path)
        arrays = {k: reader.read_numeric(k) for k in self._keys}
        entry = (reader, arrays, reader.read_annotations())
        self._entries[episode] = entry
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return entry


def _assemble(
    recipe: VectorRecipe, arrays: dict[str, np.ndarray], frames: np.ndarray
) -> np.ndarray:
    """(len(frames), D): each recipe key read at frames + its offset, clamped to the episode."""
    parts = []
    for key, offset in recipe.entries:
        arr = arrays[key]
        idx = np.clip(frames + offset, 0, len(arr) - 1)
        parts.append(arr[idx].reshape(len(frames), -1))
    return np.concatenate(parts, axis=1)


def prompt_at(annotations: list[dict[str, Any]], frame: int) -> str:
    """The text of the first span [start_idx, end_idx) covering `frame`, else ""."""
    for span in annotations:
        if int(span.get("start_idx", 0)) <= frame < int(span.get("end_idx", -1)):
            return str(span.get("text", ""))
    return ""


class EpisodeDataset(Dataset[Sample]):
    """Samples of one embodiment: images, K-step state history and a T-step action chunk.

    `frames`, when given, restricts the dataset to those (episode, frame) pairs (for
    validation subsampling or contiguous video episodes); otherwise every frame is a sample.
    """

    def __init__(
        self,
        episodes: Sequence[EpisodeInfo],
        *,
        embodiment: str,
        layout: str | None = None,
        cameras: Sequence[str] = ("front_1",),
        image_size: tuple[int, int] | None = None,
        history: int = 1,
        horizon: int = 16,
        frames: Sequence[tuple[int, int]] | None = None,
        cache_episodes: int = 256,
    ) -> None:
        if history < 1 or horizon < 1:
            raise ValueError(f"history and horizon must be >= 1, got {history} and {horizon}")
        self.spec = get_embodiment(embodiment)
        self.episodes = list(episodes)
        wrong = [e.hash for e in self.episodes if e.embodiment != self.spec.name]
        if wrong:
            raise ValueError(f"episodes {wrong[:5]} are not of embodiment {self.spec.name!r}")
        unknown = [c for c in cameras if c not in self.spec.cameras]
        if unknown:
            raise ValueError(
                f"cameras {unknown} are not cameras of {self.spec.name} ({list(self.spec.cameras)})"
            )
        self.recipe = self.spec.recipe(layout or self.spec.default_layout)
        self.layout: Layout = self.spec.layout(self.recipe.layout)
        self.cameras = tuple(cameras)
        self.image_size = tuple(image_size) if image_size is not None else None
        self.history = history
        self.horizon = horizon
        self._index = EpisodeIndex([e.total_frames for e in self.episodes])
        self._frames = list(frames) if frames is not None else None
        keys = set(self.recipe.state.keys) | set(self.recipe.actions.keys)
        self._cache = _EpisodeCache(self.episodes, sorted(keys), cache_episodes)

    def __len__(self) -> int:
        return len(self._frames) if self._frames is not None else len(self._index)

    def locate(self, index: int) -> tuple[int, int]:
        if self._frames is not None:
            return self._frames[index]
        return self._index.locate(index)

    def numeric_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """State (K, S), actions (T, A) and action mask (T,), without touching images."""
        episode, frame = self.locate(index)
        _, arrays, _ = self._cache.get(episode)
        n = self.episodes[episode].total_frames
        state = _assemble(self.recipe.state, arrays, frame + np.arange(1 - self.history, 1))
        steps = frame + np.arange(self.horizon)
        actions = _assemble(self.recipe.actions, arrays, steps)
        last_offset = max(off for _, off in self.recipe.actions.entries)
        mask = steps + last_offset <= n - 1
        if not mask[0]:
            mask[0] = True  # the first step always exists: it repeats the episode's last
        return state, actions, mask

    def __getitem__(self, index: int) -> Sample:
        episode, frame = self.locate(index)
        reader, _, annotations = self._cache.get(episode)
        state, actions, mask = self.numeric_sample(index)
        sample: Sample = {
            "embodiment": self.spec.name,
            "state": torch.from_numpy(state.astype(np.float32)),
            "actions": torch.from_numpy(actions.astype(np.float32)),
            "action_mask": torch.from_numpy(mask),
            "prompt": prompt_at(annotations, frame),
            "episode": self.episodes[episode].hash,
            "frame": frame,
        }
        for camera in self.cameras:
            (jpeg,) = reader.read_jpegs(camera, frame, frame + 1)
            sample[f"images.{camera}"] = decode_jpeg(jpeg, self.image_size)  # type: ignore[arg-type]
        return sample


def collate_samples(samples: list[Sample]) -> dict[str, Any]:
    """Stack samples of one embodiment into a batch of the contract in DESIGN.md."""
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    embodiments = {s["embodiment"] for s in samples}
    if len(embodiments) != 1:
        raise ValueError(f"a batch holds one embodiment, got {sorted(embodiments)}")
    batch: dict[str, Any] = {"embodiment": samples[0]["embodiment"]}
    for key, value in samples[0].items():
        if key == "embodiment":
            continue
        if isinstance(value, torch.Tensor):
            batch[key] = torch.stack([s[key] for s in samples])
        elif key == "frame":
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.long)
        else:
            batch[key] = [s[key] for s in samples]
    return batch


def subsample_frames(episodes: Sequence[EpisodeInfo], per_episode: int) -> list[tuple[int, int]]:
    """`per_episode` evenly spaced (episode, frame) pairs from each episode."""
    out: list[tuple[int, int]] = []
    for i, ep in enumerate(episodes):
        count = min(per_episode, ep.total_frames)
        out += [(i, int(f)) for f in np.linspace(0, ep.total_frames - 1, count).round()]
    return out
