from __future__ import annotations

from pathlib import Path

import numpy as np

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_data.synthetic.episodes import APPROACH_RATE, ensure_synthetic_episodes


def test_generation_is_done_once(eva_root: Path) -> None:
    stamps = {p: p.stat().st_mtime_ns for p in eva_root.iterdir()}
    again = ensure_synthetic_episodes(
        eva_root.parent, "eva_bimanual", episodes=6, frames=24, height=64, width=80, progress=False
    )
    assert again == eva_root
    assert {p: p.stat().st_mtime_ns for p in eva_root.iterdir()} == stamps


def test_future_positions_follow_from_the_present_and_the_target(eva_root: Path) -> None:
    # x_{t+1} = (1 - rate) x_t + rate * target, toward a target the image shows: the chunk
    # is determined by the state and the image. Fit the slope per episode and coordinate.
    slopes = []
    for info in resolve_episodes(eva_root):
        pos = EpisodeReader(info.path).read_numeric("left.obs_ee_pose")[:, :3].astype(np.float64)
        for coord in range(3):
            slopes.append(np.polyfit(pos[:-1, coord], pos[1:, coord], 1)[0])
    assert abs(np.median(slopes) - (1 - APPROACH_RATE)) < 0.03


def test_quaternions_are_unit_and_images_differ_between_episodes(eva_root: Path) -> None:
    readers = [EpisodeReader(i.path) for i in resolve_episodes(eva_root)]
    for r in readers:
        q = r.read_numeric("right.obs_ee_pose")[:, 3:]
        np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1.0, atol=1e-5)
    assert readers[0].read_jpegs("front_1", 0, 1) != readers[1].read_jpegs("front_1", 0, 1)
