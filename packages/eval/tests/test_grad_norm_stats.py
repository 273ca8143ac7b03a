from __future__ import annotations

import math

import numpy as np
import pytest

from polymimic_eval import GradNormStats


def test_median_and_mad_of_the_window() -> None:
    stats = GradNormStats(window=5, k=3.0, min_history=3)
    stats.update([1.0, 2.0, 3.0, 4.0, 100.0, 5.0])  # the window keeps the last five
    summary = stats.summary()
    assert summary["median"] == 4.0  # of 2, 3, 4, 100, 5
    assert summary["mad"] == 1.0  # |2-4|, |3-4|, 0, 96, 1 -> 1
    assert summary["last"] == 5.0


def test_spikes_are_counted_against_the_window_before_them() -> None:
    rng = np.random.default_rng(0)
    norms = 1.0 + 0.05 * rng.standard_normal(300)
    norms[[100, 200]] = 10.0  # clear spikes
    norms[250] = 1.5  # about 10 MADs up: a spike at k=6, not at k=12
    for k, expected in ((6.0, [100, 200, 250]), (12.0, [100, 200])):
        stats = GradNormStats(window=50, k=k, min_history=20)
        spikes = [i for i, v in enumerate(norms) if stats.update([float(v)])]
        # The same judgement written out: each norm against the 50 before it.
        reference = [
            i
            for i in range(20, 300)
            if norms[i]
            > np.median(norms[max(0, i - 50) : i])
            + k
            * np.median(np.abs(norms[max(0, i - 50) : i] - np.median(norms[max(0, i - 50) : i])))
        ]
        assert spikes == reference == expected
        assert stats.summary()["spikes"] == len(expected)


def test_no_spike_before_the_window_has_history_and_nonfinite_norms_are_set_apart() -> None:
    stats = GradNormStats(window=10, k=2.0, min_history=5)
    assert stats.update([1.0, 1.0, 50.0]) == 0  # too little history to judge
    assert stats.update([math.inf, math.nan]) == 0
    assert stats.summary()["nonfinite"] == 2 and len(stats.norms) == 3


def test_state_round_trips() -> None:
    stats = GradNormStats(window=4, min_history=2)
    stats.update([1.0, 2.0, 3.0, 4.0, 5.0])
    again = GradNormStats(window=4, min_history=2)
    again.load_state_dict(stats.state_dict())
    assert again.summary() == stats.summary() and list(again.norms) == [2.0, 3.0, 4.0, 5.0]


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="min_history"):
        GradNormStats(window=5, min_history=10)
