"""Demonstrations recorded once per session: two MetaWorld reach episodes at 48x64."""

from __future__ import annotations

from pathlib import Path

import pytest

from polymimic_sim import record

TASK, SIZE = "metaworld/reach-v3", (48, 64)


@pytest.fixture(scope="session")
def reach_episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("demos") / "reach"
    report = record(TASK, dest, episodes=2, seed=0, image_size=SIZE, progress=False)
    assert report.success_rate == 1.0 and len(report.written) == 2  # MetaWorld's expert
    return dest
