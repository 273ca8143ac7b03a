"""A global sample index mapped to (episode, frame)."""

from __future__ import annotations

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
        self._ends = np.cumsum(counts)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def locate(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for {len(self)} samples")
        episode = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[episode - 1]) if episode else 0
        return episode, index - start
