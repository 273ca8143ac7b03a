"""Made once per session: two MetaWorld reach demonstrations at 48x64, an untrained policy."""

from __future__ import annotations

from pathlib import Path

import pytest

from polymimic_data.embodiments import declare
from polymimic_serve import write_untrained_export
from polymimic_sim import make_task, record

TASK, SIZE = "metaworld/reach-v3", (48, 64)


@pytest.fixture(scope="session")
def reach_episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("demos") / "reach"
    report = record(TASK, dest, episodes=2, seed=0, image_size=SIZE, progress=False)
    assert report.success_rate == 1.0 and len(report.written) == 2  # MetaWorld's expert
    return dest


@pytest.fixture(scope="session")
def untrained_sawyer(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An export of random weights for the Sawyer's layout (corner2 at 48x64, 8-step chunks)."""
    task = make_task(TASK, image_size=SIZE)
    try:
        declare(task.declaration())
    finally:
        task.close()
    out = tmp_path_factory.mktemp("sawyer") / "export"
    return write_untrained_export(out, embodiment="sim/metaworld_sawyer", cameras=["corner2"],
                                  history=2, horizon=8, image_size=SIZE)  # fmt: skip
