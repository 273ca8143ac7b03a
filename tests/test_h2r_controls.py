"""The human-to-robot benchmark's control (benchmarks/h2r.py): a shuffled-hands cell is only
a control if each episode keeps its own images and gets another episode's motions, whole."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_sim import record

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def h2r():
    sys.path.insert(0, str(BENCHMARKS))  # as when run: figure_lines sits beside it
    try:
        spec = importlib.util.spec_from_file_location("h2r_benchmark", BENCHMARKS / "h2r.py")
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCHMARKS))


def _by_name(root: Path) -> dict[str, EpisodeReader]:
    return {e.path.name: EpisodeReader(e.path) for e in resolve_episodes(root)}


def test_shuffled_hands_keep_their_images_and_take_another_episodes_motions(
    h2r, tmp_path: Path
) -> None:
    hands = tmp_path / "hands"
    record("hands/transfer_cube", hands, episodes=3, image_size=(24, 32), progress=False)
    partial = tmp_path / "shuffled.partial"
    partial.mkdir()
    (partial / "left_by_a_killed_run").touch()  # an interrupted earlier attempt: remade

    shuffled = h2r.shuffled_hands(hands, tmp_path / "shuffled")

    assert not partial.exists()
    source, out = _by_name(hands), _by_name(shuffled)
    assert sorted(out) == sorted(source)
    donors = {name: episode.attrs["motions_of"] for name, episode in out.items()}
    assert sorted(donors.values()) == sorted(source)  # each motion used once
    assert all(donor != name for name, donor in donors.items())  # and never by its own images
    for name, episode in out.items():
        mine, theirs = source[name], source[donors[name]]
        frames = episode.attrs["total_frames"]
        assert frames == min(mine.attrs["total_frames"], theirs.attrs["total_frames"])
        assert [episode.read_jpeg("front_1", f) for f in range(frames)] == [
            mine.read_jpeg("front_1", f) for f in range(frames)
        ]
        for key in h2r.NUMERIC:
            np.testing.assert_array_equal(
                np.asarray(episode.read_numeric(key)),
                np.asarray(theirs.read_numeric(key))[:frames],
                err_msg=f"{name} {key}",
            )
    assert h2r.shuffled_hands(hands, tmp_path / "shuffled") == shuffled  # made once


def test_success_by_demo_distance_bins_each_episode_by_its_nearest_demonstration(h2r) -> None:
    """The coverage diagnostic: an episode placed as a demonstration was is at distance 0; one
    elsewhere falls in the bin of its distance to the nearest of the first N demos' cubes."""
    from polymimic_sim import object_poses

    def cube(seed: int) -> np.ndarray:
        return object_poses("aloha_ee/transfer_cube", seed)[0, :2]

    far = max(
        range(1000, 1100), key=lambda s: min(np.linalg.norm(cube(s) - cube(d)) for d in range(3))
    )
    distance = min(float(np.linalg.norm(cube(far) - cube(d))) for d in range(3))
    outcomes = [{"seed": 1, "success": True}, {"seed": 2, "success": False},
                {"seed": far, "success": True}]  # fmt: skip
    bins = h2r.by_demo_distance("aloha_ee/transfer_cube", 3, outcomes)

    assert (bins[0]["successes"], bins[0]["episodes"]) == (1, 2)  # seeds 1 and 2: shown
    (row,) = [b for b in bins if b["episodes"] and b["from_m"] > 0]
    assert row["successes"] == 1 and row["from_m"] <= distance
    assert row["to_m"] is None or distance < row["to_m"]
    assert distance > 0.02 and sum(b["episodes"] for b in bins) == 3
