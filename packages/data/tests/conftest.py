from __future__ import annotations

from pathlib import Path

import pytest

from polymimic_data.synthetic.episodes import ensure_synthetic_episodes


@pytest.fixture(scope="session")
def eva_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eva")
    return ensure_synthetic_episodes(
        root, "eva_bimanual", episodes=6, frames=24, height=64, width=80, progress=False
    )


@pytest.fixture(scope="session")
def aria_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("aria")
    return ensure_synthetic_episodes(
        root, "aria_bimanual", episodes=3, frames=20, height=64, width=80, progress=False
    )
