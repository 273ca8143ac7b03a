from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import zarr

from polymimic_data.cli import main


def test_inspect_lists_episodes_and_totals(eva_root: Path, aria_root: Path, capsys) -> None:
    assert main(["inspect", str(eva_root), str(aria_root)]) == 0
    out = capsys.readouterr().out
    assert out.count("eva_bimanual") >= 7 and "front_1,left_wrist,right_wrist" in out
    assert "aria_bimanual  3         60" in out  # 3 episodes of 20 frames
    assert "synthetic_reach" in out


def test_validate_passes_good_data_and_lists_every_bad_episode(
    eva_root: Path, tmp_path: Path, capsys
) -> None:
    assert main(["validate", str(eva_root), "--embodiment", "eva_bimanual", "--deep"]) == 0
    assert "ok: 6 episodes, 144 frames" in capsys.readouterr().out
    root = tmp_path / "root"
    shutil.copytree(eva_root, root)
    episodes = sorted(root.glob("*.zarr"))
    shutil.rmtree(episodes[0] / "left.cmd_ee_pose")
    assert main(["validate", str(root)]) == 1
    err = capsys.readouterr().err
    assert "1 bad episode" in err and "left.cmd_ee_pose" in err
    shutil.rmtree(episodes[0])
    zarr.open_array(episodes[1] / "right.gripper", mode="r+")[4:6] = np.nan
    assert main(["validate", str(root), "--deep"]) == 1
    assert "right.gripper: 2 bad frames (first 4: NaN or inf)" in capsys.readouterr().err


def test_validate_filters_and_explicit_episodes(eva_root: Path, capsys) -> None:
    assert main(["validate", str(eva_root), "--filter", "task=synthetic_reach,other"]) == 0
    assert main(["validate", str(eva_root), "--episodes", "nope"]) == 1
    assert "nope: listed but not found" in capsys.readouterr().err
