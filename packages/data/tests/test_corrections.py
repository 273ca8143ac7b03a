from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeReader
from polymimic_data.cli import main as cli
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.episodes.corrections import _BACKUP, apply_correction
from polymimic_data.geometry.rotations import quat_to_matrix
from polymimic_data.synthetic.episodes import generate_episode

MIRROR = np.diag([-1.0, 1.0, 1.0])


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for i in range(2):
        generate_episode(
            tmp_path / f"mecka{i}.zarr",
            get_embodiment("mecka_bimanual"),
            frames=6,
            height=16,
            width=16,
            seed=i,
        )
    generate_episode(
        tmp_path / "aria.zarr",
        get_embodiment("aria_bimanual"),
        frames=6,
        height=16,
        width=16,
        seed=9,
    )
    return tmp_path


def _left(path: Path) -> np.ndarray:
    return EpisodeReader(path).read_numeric("left.obs_wrist_pose")


def test_dry_run_changes_nothing_and_correcting_is_the_mirror_fix(root: Path, capsys) -> None:
    before = {p.name: _left(p) for p in root.glob("*.zarr")}
    assert cli(["correct", "mecka_left_wrist", str(root), "--dry-run"]) == 0
    assert "1 not applicable, 2 would correct" in capsys.readouterr().out
    assert all(np.array_equal(_left(root / n), v) for n, v in before.items())

    assert cli(["correct", "mecka_left_wrist", str(root)]) == 0
    after = _left(root / "mecka0.zarr")
    fixed = quat_to_matrix(after[:, 3:])
    expected = MIRROR @ quat_to_matrix(before["mecka0.zarr"][:, 3:]) @ MIRROR
    np.testing.assert_allclose(fixed, expected, atol=1e-6)
    np.testing.assert_array_equal(after[:, :3], before["mecka0.zarr"][:, :3])
    np.testing.assert_array_equal(_left(root / "aria.zarr"), before["aria.zarr"])
    assert EpisodeReader(root / "mecka0.zarr").attrs["corrections_applied"] == ["mecka_left_wrist"]


def test_running_twice_changes_nothing(root: Path) -> None:
    apply_correction(root, "mecka_left_wrist", dry_run=False)
    once = {p.name: (_left(p), sorted(f.name for f in p.rglob("*"))) for p in root.glob("*.zarr")}
    results = apply_correction(root, "mecka_left_wrist", dry_run=False)
    assert {r.action for r in results} == {"already applied", "not applicable"}
    twice = {p.name: (_left(p), sorted(f.name for f in p.rglob("*"))) for p in root.glob("*.zarr")}
    assert once.keys() == twice.keys()
    for name in once:
        np.testing.assert_array_equal(once[name][0], twice[name][0])
        assert once[name][1] == twice[name][1]


def test_images_are_shared_not_copied_and_an_interrupted_swap_is_restored(root: Path) -> None:
    shard = next((root / "mecka0.zarr" / "images.front_1").rglob("c/*"))
    inode = shard.stat().st_ino
    apply_correction(root, "mecka_left_wrist", dry_run=False)
    assert shard.stat().st_ino == inode  # hard-linked into the corrected episode
    # Simulate a crash between the two renames: only the backup is left.
    os.rename(root / "mecka1.zarr", root / f"{_BACKUP}mecka1.zarr-deadbeef")
    apply_correction(root, "mecka_left_wrist", dry_run=True)
    assert not (root / "mecka1.zarr").exists()  # a dry run repairs nothing
    apply_correction(root, "mecka_left_wrist", dry_run=False)
    assert (root / "mecka1.zarr").exists()
    assert not list(root.glob(f"{_BACKUP}*"))
