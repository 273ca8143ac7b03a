"""Which frames a sample reads, and its vectors assembled from them.

`WindowSampler` plans: which samples exist (every frame of every episode, or the given
(episode, frame) pairs), the frames each one's history and action windows read, and, per
episode, the row tables of the vectors that only copy rows. The dataset assembles samples
from that plan. History and action windows are clamped to the episode (repeat-last padding
past its end); fractional frames interpolate (SLERP for quaternions); poses go into the
layout's frame and rotation representation; a frame's prompt is the first annotation span
covering it.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from polymimic_data.embodiments.registry import LayoutRecipe, VectorRecipe
from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.geometry.poses import express_in, points_in_frame
from polymimic_data.geometry.rotations import convert, slerp
from polymimic_data.samples.sample_index import EpisodeIndex


def frames_of(recipe: VectorRecipe, frames: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Integer frames each key is read at, clamped; both neighbours of fractional frames."""
    if frames.dtype.kind == "f":
        frames = np.concatenate([np.floor(frames), np.ceil(frames)]).astype(np.int64)
    by_offset: dict[int, np.ndarray] = {}
    for offset in {o for _, o in recipe.entries}:
        shifted = frames + offset
        by_offset[offset] = np.minimum(np.maximum(shifted, 0), n - 1)
    return {key: by_offset[offset] for key, offset in recipe.entries}


def read_at(values: np.ndarray, frames: np.ndarray, pose: bool) -> np.ndarray:
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


def assemble(
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
        values = read_at(arrays[key], frames + offset, pose=key.endswith("_pose"))
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


def copies_rows(recipe: LayoutRecipe, vector: VectorRecipe) -> bool:
    """Whether `assemble` without a reference only copies rows (no pose or keypoint maths)."""
    pose_before = False
    for key, _ in vector.entries:
        if key.endswith("_pose") and recipe.rotation != "quaternion":
            return False  # converted to another rotation
        if key.endswith("_keypoints") and pose_before:
            return False  # expressed in the wrist's frame
        pose_before = pose_before or key.endswith("_pose")
    return True


def prompt_at(annotations: list[dict[str, Any]], frame: int) -> str:
    """The text of the first span [start_idx, end_idx) covering `frame`, else ""."""
    for span in annotations:
        if int(span.get("start_idx", 0)) <= frame < int(span.get("end_idx", -1)):
            return str(span.get("text", ""))
    return ""


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


def _span(offsets: np.ndarray, step: int) -> slice:
    """Evenly spaced integer `offsets` (`step` apart) as a slice from the smallest (row 0)."""
    return slice(0, int(offsets[-1] - offsets[0]) + 1, step)


class WindowSampler:
    """The plan of a dataset's samples: which exist, and which frames each one reads.

    As diffusion_policy's SequenceSampler under its dataset: the sampler plans indices, the
    dataset reads and assembles. A sample is an (episode, frame): every frame of every
    episode, or only `frames` when given. Its state history reads frames t - history + 1 .. t;
    action step j reads t + j * action_stride, or, with `action_window` W, the chunk spans
    t .. t + W - 1 resampled to `horizon` steps (fractional frames). Vectors of `recipe`
    that only copy rows (integer frames, no pose maths) are read, where a sample has no
    reference pose, as one slice of a per-episode table of their rows (`row_tables`).
    """

    def __init__(
        self,
        frames_per_episode: Sequence[int],
        recipe: LayoutRecipe,
        *,
        history: int,
        horizon: int,
        action_stride: int,
        action_window: int | None,
        frames: Sequence[tuple[int, int]] | None = None,
    ) -> None:
        self.recipe = recipe
        self.frames_per_episode = [int(n) for n in frames_per_episode]
        self._index = EpisodeIndex(self.frames_per_episode)
        self._frames = list(frames) if frames is not None else None
        self.last_offset = max(off for _, off in recipe.actions.entries)
        # Window offsets from a sample's frame, made once (the same values every sample).
        self.history_offsets = np.arange(1 - history, 1)
        if action_window is None:
            self.step_offsets = np.arange(horizon) * action_stride
        else:
            # an offset linspace makes a hair off a whole frame (29.000000000000004) is that
            # frame: read there, and inside the episode where that frame is
            offsets = np.linspace(0.0, action_window - 1, horizon)
            whole = np.round(offsets)
            self.step_offsets = np.where(np.abs(offsets - whole) < 1e-9, whole, offsets)
        self._step_offsets: Sequence[float] = self.step_offsets.tolist()
        steps = np.arange(horizon)
        self._masks = [steps < k for k in range(horizon + 1)]  # the first k steps (action_mask)
        # A window's rows of a table (row 0 is frame + offsets.min() at frame 0: row_tables),
        # from the sample's frame: its offsets, evenly spaced, as a slice (copied: cheaper
        # than indexing by an array of rows).
        self.state_rows = _span(self.history_offsets, 1)
        self.action_rows = slice(0, 0)
        self.row_windows: dict[str, tuple[VectorRecipe, np.ndarray]] = {}
        if action_window is None:
            self.action_rows = _span(self.step_offsets, action_stride)
            for name, vector, offsets in (
                ("state", recipe.state, self.history_offsets),
                ("actions", recipe.actions, self.step_offsets),
            ):
                if copies_rows(recipe, vector):
                    self.row_windows[name] = (vector, offsets)

    def __len__(self) -> int:
        return len(self._frames) if self._frames is not None else len(self._index)

    def locate(self, index: int) -> tuple[int, int]:
        """The (episode, frame) of sample `index`."""
        if self._frames is not None:
            return self._frames[index]
        return self._index.locate(index)

    def sample_episodes(self) -> np.ndarray:
        """The episode (its number) of every sample, in index order."""
        if self._frames is not None:
            return np.array([episode for episode, _ in self._frames], dtype=np.int64)
        counts = self.frames_per_episode
        return np.repeat(np.arange(len(counts), dtype=np.int64), counts)

    def windows(self, frame: int) -> tuple[np.ndarray, np.ndarray]:
        """Frames of the state history and of the action steps (fractional when resampled)."""
        return frame + self.history_offsets, frame + self.step_offsets

    @staticmethod
    def rows_at(table: np.ndarray, frame: int, rows: slice) -> np.ndarray:
        """A copy of `table`'s `rows` (state_rows, action_rows) of the window at `frame`."""
        return table[frame + rows.start : frame + rows.stop : rows.step].copy()

    def action_mask(self, frame: int, n: int) -> np.ndarray:
        """Which action steps of the sample at `frame` lie inside an episode of `n` frames.

        Step j does where frame + step_offsets[j] + last_offset <= n - 1; the first always
        does (at the very end it repeats the last). The offsets rise, so a mask is its first
        k steps: one of `horizon` masks made once, copied (a sample's own to keep).
        """
        room = n - 1 - self.last_offset - frame
        return self._masks[max(1, bisect.bisect_right(self._step_offsets, room))].copy()

    def row_tables(
        self, tables: dict[str, np.ndarray], arrays: dict[str, np.ndarray], n: int
    ) -> dict[str, np.ndarray]:
        """Rows of the vectors that only copy rows, at every frame a window can read.

        Filled into `tables` (an episode's, kept with it) by `assemble` over that range, once
        per episode: its rows do not depend on each other.
        """
        if len(tables) != len(self.row_windows):
            for name, (vector, offsets) in self.row_windows.items():
                frames = np.arange(int(offsets.min()), n + int(offsets.max()))
                tables[name] = assemble(self.recipe, vector, arrays, frames, None)
        return tables
