"""LeRobot v3 datasets: the source and the importer (the `lerobot` extra: pyarrow, PyAV, Pillow)."""

from __future__ import annotations

from polymimic_data.lerobot.importer import (
    ImportReport,
    declaration_for,
    episode_path,
    import_lerobot,
    joint_groups,
    parse_episodes,
)
from polymimic_data.lerobot.source import (
    IMAGE_PREFIX,
    LeRobotEpisode,
    LeRobotFormatError,
    LeRobotSource,
    camera_name,
    channel_names,
    lerobot_extra,
)

__all__ = [
    "IMAGE_PREFIX",
    "ImportReport",
    "LeRobotEpisode",
    "LeRobotFormatError",
    "LeRobotSource",
    "camera_name",
    "channel_names",
    "declaration_for",
    "episode_path",
    "import_lerobot",
    "joint_groups",
    "lerobot_extra",
    "parse_episodes",
]
