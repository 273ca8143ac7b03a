"""The window plan's action mask: which steps of a sample's chunk lie inside its episode."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from polymimic_data.embodiments.registry import LayoutRecipe, VectorRecipe
from polymimic_data.samples.windows import WindowSampler


@settings(deadline=None)  # a busy machine is no failure
@given(
    n=st.integers(1, 40),
    horizon=st.integers(1, 12),
    stride=st.integers(1, 3),
    window=st.one_of(st.none(), st.integers(2, 30)),
    offset=st.integers(0, 2),
)
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
        steps = frame + plan.step_offsets
        expected = steps + offset <= n - 1  # the frames each step reads, up to its offset
        expected[0] = True
        mask = plan.action_mask(frame, n)
        assert mask.tolist() == expected.tolist(), (frame, steps)
        mask[:] = False  # a sample's own: another's is untouched
        assert plan.action_mask(frame, n)[0]
