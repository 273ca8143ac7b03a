"""A global sample index mapped to (episode, frame)."""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np


class EpisodeIndex:
    """Global sample index -> (episode, frame), by cumulative offsets and binary search.

    Memory grows with the number of episodes, not frames.
    """

    def __init__(self, frames_per_episode: Sequence[int]) -> None:
        counts = np.asarray(frames_per_episode, dtype=np.int64)
        if (counts < 0).any():
            raise ValueError("frame counts must be non-negative")
        # Python ints: a lookup per sample is a bisect of a list, not a numpy call (0.3 us
        # against 3 us).
        self._ends_list: list[int] = np.cumsum(counts).tolist()
        self._len = self._ends_list[-1] if self._ends_list else 0

    def __len__(self) -> int:
        return self._len

    def locate(self, index: int) -> tuple[int, int]:
        if not 0 <= index < self._len:
            raise IndexError(f"sample {index} out of range for {self._len} samples")
        episode = bisect.bisect_right(self._ends_list, index)
        start = self._ends_list[episode - 1] if episode else 0
        return episode, index - start
