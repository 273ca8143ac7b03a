from __future__ import annotations

import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from polymimic_data import EpisodeIndex, resolve_episodes, write_episode
from polymimic_data.episodes import resolver
from polymimic_data.episodes.resolver import EpisodeValidationError, job_cache_dir, scan_episodes


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


def test_emptied_and_headless_episodes_are_problems_and_stray_files_warnings(
    eva_root: Path, tmp_path: Path, caplog
) -> None:
    root = tmp_path / "root"
    shutil.copytree(eva_root, root / "task")
    episodes = sorted(p for p in (root / "task").iterdir() if p.suffix == ".zarr")
    shutil.rmtree(episodes[0])
    episodes[0].mkdir()  # emptied
    (episodes[1] / "zarr.json").unlink()  # its arrays remain
    (root / "README.txt").write_text("notes")
    with caplog.at_level(logging.WARNING), pytest.raises(EpisodeValidationError) as info:
        resolve_episodes(root)
    reasons = dict(info.value.problems)
    assert len(reasons) == 2
    assert "empty folder" in reasons[str(episodes[0])]
    assert "without the group's zarr.json" in reasons[str(episodes[1])]
    scan = scan_episodes(root)
    assert len(scan.episodes) == 4
    assert scan.warnings == [(str(root / "README.txt"), resolver.STRAY_FILE)]
    shutil.rmtree(episodes[0])
    shutil.rmtree(episodes[1])
    with caplog.at_level(logging.WARNING):
        assert len(resolve_episodes(root)) == 4
    assert any("README.txt" in r.message for r in caplog.records)


def test_a_root_that_is_an_episode_is_that_episode(eva_root: Path) -> None:
    first = sorted(p for p in eva_root.iterdir() if p.suffix == ".zarr")[0]
    assert [e.path for e in resolve_episodes(first)] == [first]


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


def _tagged_root(tmp_path: Path) -> Path:
    """Four tiny episodes with operator and task attributes."""
    root = tmp_path / "tagged"
    for i, (operator, task) in enumerate(
        [("ann", "fold"), ("bob", "fold"), ("cy", "pour"), ("ann", "pour")]
    ):
        write_episode(
            root / f"ep{i}.zarr",
            embodiment="aria_bimanual",
            fps=30,
            arrays={
                k: np.tile([0, 0, 0.5, 1, 0, 0, 0], (3, 1)).astype(np.float32)
                for k in (
                    "left.obs_ee_pose",
                    "right.obs_ee_pose",
                    "left.obs_wrist_pose",
                    "right.obs_wrist_pose",
                    "obs_head_pose",
                )
            }
            | {
                k: np.zeros((3, 63), np.float32)
                for k in ("left.obs_keypoints", "right.obs_keypoints")
            },
            task_name=task,
            metadata={"operator": operator, "lab": "Lab-A"},
        )
    return root


def test_filters_take_values_or_lists_of_any_attribute(tmp_path: Path) -> None:
    root = _tagged_root(tmp_path)
    hashes = lambda **f: [e.hash for e in resolve_episodes(root, filters=f)]  # noqa: E731
    assert hashes(operator="ann") == ["ep0", "ep3"]
    assert hashes(operator=["bob", "cy"], task="fold") == ["ep1"]
    assert hashes(lab="lab-a", embodiment="ARIA_BIMANUAL") == ["ep0", "ep1", "ep2", "ep3"]
    with pytest.raises(FileNotFoundError, match="matching"):
        resolve_episodes(root, filters={"operator": "dan"})


def test_explicit_episode_lists_must_be_present_and_unique(tmp_path: Path) -> None:
    root = _tagged_root(tmp_path)
    assert [e.hash for e in resolve_episodes(root, episodes=["ep2", "ep0"])] == ["ep0", "ep2"]
    with pytest.raises(EpisodeValidationError) as info:
        resolve_episodes(root, episodes=["ep0", "ep9", "ep7"])
    assert dict(info.value.problems) == {
        "ep7": "listed but not found under the roots",
        "ep9": "listed but not found under the roots",
    }
    with pytest.raises(EpisodeValidationError, match="more than once"):
        resolve_episodes(root, episodes=["ep0", "ep0"])


def test_the_index_cache_is_used_until_an_episode_changes(tmp_path: Path, monkeypatch) -> None:
    root = _tagged_root(tmp_path)
    first = resolve_episodes(root, filters={"task": "pour"}, cache_dir=tmp_path / "cache")

    def no_reads(path):
        raise AssertionError(f"read {path} although the cache was valid")

    monkeypatch.setattr(resolver, "read_group_attrs", no_reads)
    assert resolve_episodes(root, filters={"task": "pour"}, cache_dir=tmp_path / "cache") == first
    shutil.rmtree(root / "ep3.zarr")
    with pytest.raises(AssertionError, match="although"):
        resolve_episodes(root, filters={"task": "pour"}, cache_dir=tmp_path / "cache")


def test_cache_dirs_are_per_slurm_job(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    assert job_cache_dir(tmp_path) == tmp_path
    monkeypatch.setenv("SLURM_JOB_ID", "4242")
    assert job_cache_dir(tmp_path) == tmp_path / "slurm-4242"


def test_the_index_cache_sees_attributes_rewritten_with_their_mtime_restored(
    tmp_path: Path,
) -> None:
    """`cp -p` or `rsync -t` of a group's `zarr.json` keeps the mtime; the index is read again."""
    root = _tagged_root(tmp_path)
    resolve_episodes(root, cache_dir=tmp_path / "cache")
    meta_path = root / "ep0.zarr" / "zarr.json"
    stat = meta_path.stat()
    text = meta_path.read_text()
    assert json.loads(text)["attributes"]["operator"] == "ann"
    # as long, written in place: the same inode and size, and the mtime put back
    meta_path.write_text(text.replace('"operator": "ann"', '"operator": "bob"'))
    os.utime(meta_path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert meta_path.stat().st_size == stat.st_size
    again = {e.hash: e for e in resolve_episodes(root, cache_dir=tmp_path / "cache")}
    assert again["ep0"].attrs["operator"] == "bob"
