from __future__ import annotations

from pathlib import Path

import pytest

from polymimic_data import resolve_episodes, split_episodes


def test_split_is_by_episode_and_deterministic(eva_root: Path) -> None:
    episodes = resolve_episodes(eva_root)
    train, val = split_episodes(episodes, val_fraction=0.34, seed=3)
    assert len(val) == 2 and len(train) == 4
    assert not {e.hash for e in train} & {e.hash for e in val}
    assert split_episodes(list(reversed(episodes)), val_fraction=0.34, seed=3) == (train, val)
    other = [split_episodes(episodes, val_fraction=0.34, seed=s)[1] for s in range(6)]
    assert len({tuple(e.hash for e in v) for v in other}) > 1


def test_split_keeps_one_validation_episode_and_checks_fraction(eva_root: Path) -> None:
    episodes = resolve_episodes(eva_root)
    assert len(split_episodes(episodes, val_fraction=0.01, seed=0)[1]) == 1
    assert split_episodes(episodes, val_fraction=0.0, seed=0)[1] == []
    with pytest.raises(ValueError, match="val_fraction"):
        split_episodes(episodes, val_fraction=1.0, seed=0)
