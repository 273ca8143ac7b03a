"""Robust statistics of the gradient norm over a sliding window, for diagnosis only.

The median and the median absolute deviation (MAD) of the last `window` norms describe
the usual gradient without being dragged by the outliers they are meant to expose; a
spike is a norm above median + k·MAD of the window before it (judged once the window
holds `min_history` norms). Nothing here feeds back into training.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np


class GradNormStats:
    """The median, MAD and spike count of the last `window` gradient norms.

    Non-finite norms are counted apart and kept out of the window; `state_dict` and
    `load_state_dict` carry the window and counts across a resume.
    """

    def __init__(self, window: int = 200, k: float = 6.0, min_history: int = 20) -> None:
        if window < 2 or min_history < 2 or min_history > window or k <= 0:
            raise ValueError(
                f"GradNormStats: need window >= min_history >= 2 and k > 0, got window={window}, "
                f"min_history={min_history}, k={k}"
            )
        self.window, self.k, self.min_history = window, k, min_history
        self.norms: deque[float] = deque(maxlen=window)
        self.spikes = 0  # since the start of training
        self.nonfinite = 0  # inf/NaN norms (e.g. skipped fp16 steps); not in the window
        self.last = math.nan

    def median_mad(self) -> tuple[float, float]:
        if not self.norms:
            return math.nan, math.nan
        values = np.fromiter(self.norms, dtype=np.float64)
        median = float(np.median(values))
        return median, float(np.median(np.abs(values - median)))

    def is_spike(self, norm: float) -> bool:
        """Whether `norm` would count as a spike against the current window."""
        if len(self.norms) < self.min_history:
            return False
        median, mad = self.median_mad()
        return norm > median + self.k * mad

    def update(self, norms: Iterable[float]) -> int:
        """Take norms in step order; returns how many of them were spikes."""
        found = 0
        for norm in norms:
            self.last = norm
            if not math.isfinite(norm):
                self.nonfinite += 1
                continue
            found += self.is_spike(norm)
            self.norms.append(norm)
        self.spikes += found
        return found

    def summary(self) -> dict[str, float]:
        median, mad = self.median_mad()
        return {
            "last": self.last,
            "median": median,
            "mad": mad,
            "spikes": float(self.spikes),
            "nonfinite": float(self.nonfinite),
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "norms": list(self.norms),
            "spikes": self.spikes,
            "nonfinite": self.nonfinite,
            "last": self.last,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.norms = deque((float(v) for v in state["norms"]), maxlen=self.window)
        self.spikes, self.nonfinite = int(state["spikes"]), int(state["nonfinite"])
        self.last = float(state["last"])
