"""The window plan's action mask: which steps of a sample's chunk lie inside its episode."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from polymimic_data.embodiments.registry import LayoutRecipe, VectorRecipe
from polymimic_data.samples.windows import WindowSampler


@settings(deadline=None)  # a busy machine is no failure
@given(
    n=st.integers(1, 70),
    horizon=st.integers(1, 16),
    stride=st.integers(1, 3),
    window=st.one_of(st.none(), st.integers(2, 64)),
    offset=st.integers(0, 2),
)
@example(n=33, horizon=15, stride=1, window=59, offset=0)  # step 7: 29.000000000000004
def test_the_action_mask_is_the_steps_inside_the_episode_the_first_always(
    n: int, horizon: int, stride: int, window: int | None, offset: int
) -> None:
    recipe = LayoutRecipe(
        "test", VectorRecipe((("s", 0),)), VectorRecipe((("a", 0), ("g", offset)))
    )
    plan = WindowSampler(
        [n], recipe, history=1, horizon=horizon, action_stride=stride, action_window=window
    )
    for frame in range(n):
        # Step j of a window W reads frame + j (W - 1) / (horizon - 1): inside where that,
        # plus the action's offset, is at most n - 1, decided in whole numbers
        j = np.arange(horizon)
        if window is None:
            expected = frame + j * stride + offset <= n - 1
        else:
            expected = j * (window - 1) <= (n - 1 - offset - frame) * max(horizon - 1, 1)
        expected[0] = True
        mask = plan.action_mask(frame, n)
        assert mask.tolist() == expected.tolist(), frame
        mask[:] = False  # a sample's own: another's is untouched
        assert plan.action_mask(frame, n)[0]
