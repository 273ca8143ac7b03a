"""`cameras: auto` names the cameras a dataset's own episodes hold, whatever else a process met."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polymimic_data.embodiments import DECLARATION, get_embodiment
from polymimic_data.store import write_episode
from polymimic_train.run_config import ConfigError
from polymimic_train.run_episodes import resolve_real_datasets

NAME = "test/auto_views"


def _record(folder: Path, cameras: list[str], count: int = 2) -> None:
    declaration = {
        "name": NAME,
        "fps": 10.0,
        "cameras": cameras,
        "state": ["observation.state"],
        "actions": ["action"],
        "groups": [{"name": "joints", "kind": "joint", "width": 2}],
    }
    for i in range(count):
        state = np.random.default_rng(i).normal(size=(8, 2)).astype(np.float32)
        write_episode(folder / f"{'_'.join(cameras)}{i}.zarr", embodiment=NAME, fps=10.0,
                      arrays={"observation.state": state, "action": state},
                      metadata={DECLARATION: declaration})  # fmt: skip


def _auto(root: Path, cache: Path) -> list[str]:
    data = {"roots": [str(root)], "datasets": {"views": {"embodiment": NAME, "cameras": "auto"}}}
    resolve_real_datasets(data, cache)
    return data["datasets"]["views"]["cameras"]


def test_cameras_auto_are_those_its_episodes_hold_not_all_the_process_met(tmp_path) -> None:
    _record(tmp_path / "wide", ["top", "wrist"])
    _record(tmp_path / "top", ["top"])
    assert _auto(tmp_path / "wide", tmp_path / "cache") == ["top", "wrist"]
    assert _auto(tmp_path / "top", tmp_path / "cache") == ["top"]  # not the registry's two
    assert get_embodiment(NAME).cameras == ("top", "wrist")  # one embodiment, both views
    _record(tmp_path / "wide", ["top"], count=1)  # a folder of both: what all of them hold
    assert _auto(tmp_path / "wide", tmp_path / "cache") == ["top"]
    _record(tmp_path / "apart", ["wrist"])
    _record(tmp_path / "apart", ["front"])
    with pytest.raises(ConfigError, match=r"data.datasets.views.cameras: auto takes the cameras "
                       r"all its episodes hold, and they share none \(2 hold \['front'\], e.g. "
                       r".*apart/front0.zarr; 2 hold \['wrist'\]"):  # fmt: skip
        _auto(tmp_path / "apart", tmp_path / "cache")


def test_cameras_named_that_some_episodes_lack_are_a_config_error_naming_one(tmp_path) -> None:
    _record(tmp_path / "mixed", ["top", "wrist"])
    _record(tmp_path / "mixed", ["top"], count=3)
    data = {"roots": [str(tmp_path / "mixed")],
            "datasets": {"views": {"embodiment": NAME, "cameras": ["top", "wrist"]}}}  # fmt: skip
    with pytest.raises(ConfigError, match=r"data.datasets.views.cameras: \['top', 'wrist'\], "
                       r"but episode .*mixed/top0.zarr was recorded without \['wrist'\] \(it "
                       r"holds \['top'\]\); 2 more episodes lack some"):  # fmt: skip
        resolve_real_datasets(data, tmp_path / "cache")
    data["datasets"]["views"]["cameras"] = ["top"]  # those all of them hold
    assert len(resolve_real_datasets(data, tmp_path / "cache")["views"]) == 5
