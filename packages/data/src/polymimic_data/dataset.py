"""A map-style dataset over episodes of one embodiment, yielding samples of the batch contract.

Per worker, each episode is opened once and its numeric arrays (small) are read whole into
a bounded cache, checked for bad values once, vectorised over time. JPEGs are read by byte
range and decoded at the model's resolution. A bad sample is replaced by a valid one and
reported in the sample's `faults`; an episode with too many faults is dropped.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset, default_collate

from polymimic_data.data_faults import (
    DataFault,
    EpisodeFaults,
    NoValidSampleError,
    SampleFault,
    frame_faults,
    read_fault,
)
from polymimic_data.declared_embodiments import declare_from
from polymimic_data.embodiments import LayoutRecipe, VectorRecipe, get_embodiment
from polymimic_data.episode_index import EpisodeIndex, EpisodeInfo
from polymimic_data.episode_store import EpisodeReader
from polymimic_data.frames import express_in, points_in_frame
from polymimic_data.jpeg_decode import decode_jpeg
from polymimic_data.layouts import Layout
from polymimic_data.rotations import convert, slerp

log = logging.getLogger(__name__)

Sample = dict[str, Any]
_MAX_REPLACEMENTS = 32


@dataclass
class _LoadedEpisode:
    reader: EpisodeReader
    arrays: dict[str, np.ndarray]
    annotations: list[dict[str, Any]]
    bad: dict[str, tuple[np.ndarray, list[str]]]  # key -> (bad per frame, reason per frame)
    fixed_reference: np.ndarray | None  # a layout frame that does not move (camera extrinsics)


class _EpisodeCache:
    """Per worker: readers opened once, numeric arrays read whole and checked, bounded LRU."""

    def __init__(
        self,
        episodes: Sequence[EpisodeInfo],
        keys: Sequence[str],
        fixed_reference: Callable[[EpisodeInfo], np.ndarray | None],
        capacity: int,
    ) -> None:
        self._episodes = episodes
        self._keys = tuple(keys)
        self._fixed_reference = fixed_reference
        self._capacity = capacity
        self._entries: OrderedDict[int, _LoadedEpisode] = OrderedDict()

    def get(self, episode: int) -> _LoadedEpisode:
        entry = self._entries.get(episode)
        if entry is not None:
            self._entries.move_to_end(episode)
            return entry
        info = self._episodes[episode]
        key = "*"
        try:
            reader = EpisodeReader(info.path)
            arrays, bad = {}, {}
            for key in self._keys:
                arrays[key] = reader.read_numeric(key)
                if len(arrays[key]) < reader.total_frames:
                    raise ValueError(
                        f"{len(arrays[key])} frames, total_frames is {reader.total_frames}"
                    )
                mask, reasons = frame_faults(key, arrays[key])
                if mask.any():
                    bad[key] = (mask, reasons)
            key = "annotations"
            annotations = reader.read_annotations()
            key = "camera_extrinsics"
            reference = self._fixed_reference(info)
            entry = _LoadedEpisode(reader, arrays, annotations, bad, reference)
        except Exception as exc:
            fault = DataFault(info.hash, key, -1, f"episode unreadable: {exc}")
            raise SampleFault(fault, whole_episode=True) from exc
        self._entries[episode] = entry
        if len(self._entries) > self._capacity:
            self._entries.popitem(last=False)
        return entry


def _frames_of(recipe: VectorRecipe, frames: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Integer frames each key is read at, clamped; both neighbours of fractional frames."""
    if frames.dtype.kind == "f":
        frames = np.concatenate([np.floor(frames), np.ceil(frames)]).astype(np.int64)
    by_offset: dict[int, np.ndarray] = {}
    for offset in {o for _, o in recipe.entries}:
        shifted = frames + offset
        by_offset[offset] = np.minimum(np.maximum(shifted, 0), n - 1)
    return {key: by_offset[offset] for key, offset in recipe.entries}


def _read(values: np.ndarray, frames: np.ndarray, pose: bool) -> np.ndarray:
    """Rows at (clamped) frames; fractional frames interpolate.

    Linearly, and by SLERP for the quaternion of a pose.
    """
    n = len(values)
    if frames.dtype.kind != "f":  # (np.clip costs more than the read itself)
        return values[np.minimum(np.maximum(frames, 0), n - 1)].reshape(len(frames), -1)
    frames = np.minimum(np.maximum(frames, 0), n - 1)
    lo = np.floor(frames).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    w = (frames - lo)[:, None]
    a, b = values[lo].reshape(len(frames), -1), values[hi].reshape(len(frames), -1)
    out = a * (1 - w) + b * w
    if pose:
        out[:, 3:7] = slerp(a[:, 3:7], b[:, 3:7], w[:, 0])
    return out


def _assemble(
    recipe: LayoutRecipe,
    vector: VectorRecipe,
    arrays: dict[str, np.ndarray],
    frames: np.ndarray,
    reference: np.ndarray | None,
) -> np.ndarray:
    """(len(frames), D) per the recipe (see LayoutRecipe).

    Keys are read at frames + offsets, clamped to the episode; poses go into `reference`'s
    frame and `recipe.rotation`.
    """
    parts: list[np.ndarray] = []
    wrist: np.ndarray | None = None
    for key, offset in vector.entries:
        values = _read(arrays[key], frames + offset, pose=key.endswith("_pose"))
        if key.endswith("_pose") and (reference is not None or recipe.rotation != "quaternion"):
            wrist = values
            pose = express_in(reference, values) if reference is not None else values
            parts += [pose[:, :3], convert(pose[:, 3:7], "quaternion", recipe.rotation)]
        elif key.endswith("_keypoints") and wrist is not None:
            points = points_in_frame(wrist, values.reshape(len(frames), -1, 3))
            parts.append(points.reshape(len(frames), -1))
        else:
            wrist = values if key.endswith("_pose") else wrist
            parts.append(values)
    return np.concatenate(parts, axis=1, dtype=np.float32)


def prompt_at(annotations: list[dict[str, Any]], frame: int) -> str:
    """The text of the first span [start_idx, end_idx) covering `frame`, else ""."""
    for span in annotations:
        if int(span.get("start_idx", 0)) <= frame < int(span.get("end_idx", -1)):
            return str(span.get("text", ""))
    return ""


class EpisodeDataset(Dataset[Sample]):
    """Samples of one embodiment: images, K-step state history and a T-step action chunk.

    Action step j of a sample at frame t reads frame t + j * action_stride; or, with
    `action_window` W, the chunk spans frames t .. t + W - 1 resampled to `horizon` steps
    (linear interpolation, SLERP for quaternions). `frames`, when
    given, restricts the dataset to those (episode, frame) pairs (validation subsampling,
    contiguous video episodes); otherwise every frame is a sample.
    """

    def __init__(
        self,
        episodes: Sequence[EpisodeInfo],
        *,
        embodiment: str,
        layout: str | None = None,
        cameras: Sequence[str] = ("front_1",),
        image_size: tuple[int, int] | Sequence[int] | None = None,
        history: int = 1,
        horizon: int = 16,
        action_stride: int = 1,
        action_window: int | None = None,
        frames: Sequence[tuple[int, int]] | None = None,
        cache_episodes: int = 256,
        max_bad_fraction_per_episode: float = 0.2,
    ) -> None:
        if history < 1 or horizon < 1 or action_stride < 1:
            raise ValueError(
                "history, horizon and action_stride must be >= 1, got "
                f"{history}, {horizon}, {action_stride}"
            )
        self.episodes = list(episodes)
        declare_from((str(e.path), e.attrs) for e in self.episodes)
        self.spec = get_embodiment(embodiment)
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
        self.image_size = (
            (int(image_size[0]), int(image_size[1])) if image_size is not None else None
        )
        self.history, self.horizon, self.action_stride = history, horizon, action_stride
        if action_window is not None and action_window < 2:
            raise ValueError(f"action_window must span at least 2 frames, got {action_window}")
        self.action_window = action_window
        self.max_bad_fraction_per_episode = max_bad_fraction_per_episode
        self._index = EpisodeIndex([e.total_frames for e in self.episodes])
        self._frames = list(frames) if frames is not None else None
        frame_key = (
            self.recipe.frame if self.recipe.frame and ":" not in self.recipe.frame else None
        )
        keys = sorted(
            set(self.recipe.state.keys) | set(self.recipe.actions.keys) | ({frame_key} - {None})
        )
        self._cache = _EpisodeCache(self.episodes, keys, self._camera_reference, cache_episodes)
        self._last_offset = max(off for _, off in self.recipe.actions.entries)
        self._faults = EpisodeFaults(
            [e.hash for e in self.episodes],
            [e.total_frames for e in self.episodes],
            max_bad_fraction=max_bad_fraction_per_episode,
            describe=lambda episode: str(self.episodes[episode].path),
        )

    def __len__(self) -> int:
        return len(self._frames) if self._frames is not None else len(self._index)

    def locate(self, index: int) -> tuple[int, int]:
        if self._frames is not None:
            return self._frames[index]
        return self._index.locate(index)

    def _windows(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """Frames of the state history and of the action steps (fractional when resampled)."""
        history = frame + np.arange(1 - self.history, 1)
        if self.action_window is not None:
            return history, frame + np.linspace(0.0, self.action_window - 1, self.horizon)
        return history, frame + np.arange(self.horizon) * self.action_stride

    def _check_numeric(self, episode: int, frame: int, loaded: _LoadedEpisode) -> None:
        if not loaded.bad:
            return
        n = self.episodes[episode].total_frames
        history, steps = self._windows(frame)
        if self.recipe.frame in loaded.bad and loaded.bad[self.recipe.frame][0][frame]:
            reason = loaded.bad[self.recipe.frame][1][frame]
            raise SampleFault(
                DataFault(self.episodes[episode].hash, self.recipe.frame, frame, reason)
            )
        for recipe, frames in ((self.recipe.state, history), (self.recipe.actions, steps)):
            for key, idx in _frames_of(recipe, frames, n).items():
                if key in loaded.bad:
                    mask, reasons = loaded.bad[key]
                    hits = idx[mask[idx]]
                    if len(hits):
                        bad_frame = int(hits[0])
                        fault = DataFault(
                            self.episodes[episode].hash, key, bad_frame, reasons[bad_frame]
                        )
                        raise SampleFault(fault)

    def _camera_reference(self, info: EpisodeInfo) -> np.ndarray | None:
        """An episode's camera pose for `camera:` layout frames (None when the identity)."""
        if not (self.recipe.frame or "").startswith("camera:"):
            return None
        pose = self.spec.camera_pose(info.attrs, self.recipe.frame.removeprefix("camera:"))
        return None if np.array_equal(pose, [0.0, 0, 0, 1, 0, 0, 0]) else pose

    def _reference(self, frame: int, loaded: _LoadedEpisode) -> np.ndarray | None:
        """The pose the sample's vectors are expressed in, if the layout has a frame."""
        if not self.recipe.frame or self.recipe.frame.startswith("camera:"):
            return loaded.fixed_reference
        return loaded.arrays[self.recipe.frame][frame]

    def numeric_sample(self, index: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """State (K, S), actions (T, A) and action mask (T,), without touching images.

        Raises SampleFault when the window touches bad values.
        """
        episode, frame = self.locate(index)
        return self._numeric(episode, frame, self._cache.get(episode))

    def _numeric(
        self, episode: int, frame: int, loaded: _LoadedEpisode
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        self._check_numeric(episode, frame, loaded)
        n = self.episodes[episode].total_frames
        history, steps = self._windows(frame)
        reference = self._reference(frame, loaded)
        state = _assemble(self.recipe, self.recipe.state, loaded.arrays, history, reference)
        actions = _assemble(self.recipe, self.recipe.actions, loaded.arrays, steps, reference)
        mask = steps + self._last_offset <= n - 1
        mask[0] = True  # the first step always exists: at the very end it repeats the last
        return state, actions, mask

    def _build(self, index: int) -> Sample:
        episode, frame = self.locate(index)
        self._faults.check_not_dropped(episode, frame)
        loaded = self._cache.get(episode)
        state, actions, mask = self._numeric(episode, frame, loaded)
        sample: Sample = {
            "embodiment": self.spec.name,
            "state": torch.from_numpy(state),
            "actions": torch.from_numpy(actions),
            "action_mask": torch.from_numpy(mask),
            "prompt": prompt_at(loaded.annotations, frame),
            "episode": self.episodes[episode].hash,
            "frame": frame,
        }
        for camera in self.cameras:
            try:
                jpeg = loaded.reader.read_jpeg(camera, frame)
                sample[f"images.{camera}"] = decode_jpeg(jpeg, self.image_size)
            except Exception as exc:
                hash_ = self.episodes[episode].hash
                raise read_fault(hash_, f"images.{camera}", frame, exc) from exc
        return sample

    def __getitem__(self, index: int) -> Sample:
        """The sample at `index`, or a stand-in for it; `faults` lists what was met on the way."""
        faults: list[DataFault] = []
        current = index
        for attempt in range(1, _MAX_REPLACEMENTS + 1):
            try:
                sample = self._build(current)
            except SampleFault as exc:
                fault = self._faults.note(exc, self.locate(current)[0])
                if fault is not None:
                    faults.append(fault)
                current = self._faults.replacement(
                    index, attempt, len(self), lambda i: self.locate(i)[0]
                )
                continue
            sample["faults"] = [f.to_dict() for f in faults]
            return sample
        raise NoValidSampleError(
            f"no valid sample found in {_MAX_REPLACEMENTS} tries for sample {index} of "
            f"{len(self)} ({len(self._faults.dropped)} of {len(self.episodes)} episodes dropped);"
            " faults: "
            + "; ".join(str(SampleFault(f)) for f in faults[:5])
            + ". `polymimic-data validate ROOT --deep` lists every bad frame."
        )


def collate_samples(samples: list[Sample]) -> dict[str, Any]:
    """Stack samples of one embodiment into a batch of the contract in DESIGN.md.

    `data_faults` has one entry per sample that was replaced: the faults met replacing it.
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    embodiments = {s["embodiment"] for s in samples}
    if len(embodiments) != 1:
        raise ValueError(f"a batch holds one embodiment, got {sorted(embodiments)}")
    batch: dict[str, Any] = {"embodiment": samples[0]["embodiment"]}
    for key, value in samples[0].items():
        if key in ("embodiment", "faults"):
            continue
        if key.startswith("images."):
            # Decoded images are (3, H, W) views of HWC memory: stack them as HWC (a plain
            # copy, into shared memory inside a worker) and hand out the channels-last view.
            hwc = default_collate([s[key].permute(1, 2, 0) for s in samples])
            batch[key] = hwc.permute(0, 3, 1, 2)
        elif isinstance(value, torch.Tensor):
            batch[key] = default_collate([s[key] for s in samples])
        elif key == "frame":
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.long)
        else:
            batch[key] = [s[key] for s in samples]
    batch["data_faults"] = [s["faults"] for s in samples if s.get("faults")]
    return batch


def subsample_frames(
    episodes: Sequence[EpisodeInfo], per_episode: int | str
) -> list[tuple[int, int]]:
    """Evenly spaced (episode, frame) pairs from each episode.

    `per_episode="auto"` aims at about 1024 frames in all, at least one per episode.
    """
    if per_episode == "auto":
        per_episode = max(1, math.ceil(1024 / max(len(episodes), 1)))
    elif not isinstance(per_episode, int) or per_episode < 1:
        raise ValueError(
            f"frames per episode must be a positive integer or 'auto', got {per_episode!r}"
        )
    out: list[tuple[int, int]] = []
    for i, ep in enumerate(episodes):
        count = min(per_episode, ep.total_frames)
        out += [(i, int(f)) for f in np.linspace(0, ep.total_frames - 1, count).round()]
    return out
