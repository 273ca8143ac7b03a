"""Generated data for the default run, tests and benchmarks.

Synthetic episodes; EgoVerse-layout episodes as EgoVerse's writer makes them; hand keypoints.
(LeRobot-format datasets, a fixture for tests and benchmarks only, are in
`polymimic_data.testing`.)
"""

from __future__ import annotations

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
    "write_egoverse_episode",
]
