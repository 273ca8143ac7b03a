from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polymimic_data import EpisodeIndex, resolve_episodes
from polymimic_data.episode_index import EpisodeValidationError


def test_resolve_finds_each_embodiment(eva_root: Path, aria_root: Path) -> None:
    roots = [eva_root, aria_root]
    assert len(resolve_episodes(roots)) == 9
    eva = resolve_episodes(roots, embodiment="EVA_bimanual")
    assert {e.embodiment for e in eva} == {"eva_bimanual"} and len(eva) == 6
    assert all(e.total_frames == 24 for e in eva)


def test_resolve_lists_every_bad_episode(eva_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(eva_root, root)
    episodes = sorted(p for p in root.iterdir() if p.suffix == ".zarr")
    shutil.rmtree(episodes[0] / "left.gripper")
    shutil.copytree(episodes[1], tmp_path / "root" / "nested" / episodes[1].name)
    (episodes[2] / "zarr.json").write_text("{not json")
    with pytest.raises(EpisodeValidationError) as info:
        resolve_episodes(root)
    reasons = dict(info.value.problems)
    assert len(reasons) == 3
    assert "left.gripper" in reasons[str(episodes[0])]
    assert any("duplicate" in why for why in reasons.values())
    assert "cannot read" in reasons[str(episodes[2])]


def test_half_written_episodes_are_ignored(eva_root: Path, tmp_path: Path) -> None:
    root = tmp_path / "root"
    shutil.copytree(eva_root, root)
    first = next(p for p in root.iterdir() if p.suffix == ".zarr")
    shutil.copytree(first, root / f".incomplete-{first.name}-1234")
    assert len(resolve_episodes(root)) == 6


def test_missing_root_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="does not exist"):
        resolve_episodes(tmp_path / "nope")
    with pytest.raises(FileNotFoundError, match="no episodes"):
        resolve_episodes(tmp_path)


@given(st.lists(st.integers(0, 50), min_size=1, max_size=30))
def test_index_locates_every_sample_like_a_flat_list(counts: list[int]) -> None:
    index = EpisodeIndex(counts)
    flat = [(e, f) for e, n in enumerate(counts) for f in range(n)]
    assert len(index) == len(flat)
    for i in np.linspace(0, len(flat) - 1, min(len(flat), 40)).astype(int) if flat else []:
        assert index.locate(int(i)) == flat[int(i)]
    with pytest.raises(IndexError):
        index.locate(len(flat))
