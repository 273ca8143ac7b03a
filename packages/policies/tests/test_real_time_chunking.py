"""Real-time chunking's soft mask and guidance weight (the heads that use them: test_hpt,
test_pi, test_rdt)."""

from __future__ import annotations

import itertools
import math

import pytest

from polymimic_policies import prefix_weights
from polymimic_policies.real_time_chunking import guidance_weight


def test_the_soft_mask_freezes_the_delay_then_decays_to_zero_at_the_overlaps_end() -> None:
    weights = prefix_weights(delay=2, overlap=6, horizon=8).tolist()
    assert weights[:2] == [1.0, 1.0]
    decay = weights[2:6]
    assert all(1.0 > a > b > 0.0 for a, b in itertools.pairwise(decay))
    c = 4 / 5  # (overlap - i) / (overlap - delay + 1) at i = delay
    assert decay[0] == pytest.approx(c * math.expm1(c) / (math.e - 1))
    assert weights[6:] == [0.0, 0.0]
    assert prefix_weights(0, 0, 4).tolist() == [0.0] * 4  # nothing left: nothing binds
    assert prefix_weights(3, 2, 4).tolist() == [1.0, 1.0, 0.0, 0.0]  # delay past the overlap
    with pytest.raises(ValueError, match=r"delay 5 and overlap 2 must lie in 0\.\.4"):
        prefix_weights(5, 2, 4)


def test_the_guidance_weight_is_clipped_at_the_noise_and_vanishes_at_the_chunk() -> None:
    assert guidance_weight(1.0, 5.0) == 5.0
    assert guidance_weight(0.0, 5.0) == 0.0
    tau = 0.75  # t = 0.25: (1 - tau) / tau * (tau^2 + (1 - tau)^2) / (1 - tau)^2
    assert guidance_weight(0.25, 100.0) == pytest.approx(
        (1 - tau) / tau * (tau**2 + (1 - tau) ** 2) / (1 - tau) ** 2
    )
