"""Generated data for the default run, tests and benchmarks.

Synthetic episodes; EgoVerse-layout episodes as EgoVerse's writer makes them; LeRobot-format
datasets as lerobot writes them (needs the `lerobot` extra); hand keypoints.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from polymimic_data.synthetic.egoverse_layout import (
    PAD_TO,
    ROWS_PER_CHUNK,
    padded_length,
    write_egoverse_episode,
)
from polymimic_data.synthetic.episodes import (
    APPROACH_RATE,
    ensure_synthetic_episodes,
    episode_name,
    generate_episode,
)
from polymimic_data.synthetic.hand_keypoints import HAND_WIDTH, SIDES, hand_keypoints_in_reference

_LEROBOT_FORMAT = ("write_lerobot_dataset", "render_frames")  # need the `lerobot` extra (PyAV)


def __getattr__(name: str) -> Any:
    if name in _LEROBOT_FORMAT:
        from polymimic_data.synthetic import lerobot_format

        return getattr(lerobot_format, name)
    raise AttributeError(f"module 'polymimic_data.synthetic' has no attribute {name!r}")


if TYPE_CHECKING:
    from polymimic_data.synthetic.lerobot_format import render_frames, write_lerobot_dataset


__all__ = [
    "APPROACH_RATE",
    "HAND_WIDTH",
    "PAD_TO",
    "ROWS_PER_CHUNK",
    "SIDES",
    "ensure_synthetic_episodes",
    "episode_name",
    "generate_episode",
    "hand_keypoints_in_reference",
    "padded_length",
    "render_frames",
    "write_egoverse_episode",
    "write_lerobot_dataset",
]
