"""Episodes laid out as EgoVerse's own writer lays them out load unchanged."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import zarr
import zarr.dtype

from polymimic_data import EpisodeDataset, EpisodeReader, resolve_episodes
from polymimic_data.cli import main as cli
from polymimic_data.embodiments import get_embodiment

FRAMES, PADDED = 30, 64


def _egoverse_episode(path: Path, seed: int) -> Path:
    """float64 arrays padded past total_frames, sharded; JPEGs in multi-frame chunks."""
    rng = np.random.default_rng(seed)
    group = zarr.open_group(path, mode="w", zarr_format=3)
    spec = get_embodiment("eva_bimanual")
    for key in spec.numeric_keys:
        width = 1 if key.endswith("gripper") else 7
        values = rng.normal(size=(PADDED, width))
        if key.endswith("_pose"):
            values[:, 3:] /= np.linalg.norm(values[:, 3:], axis=1, keepdims=True)
        group.create_array(
            key, data=values.astype(np.float64), chunks=(8, width), shards=(32, width)
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for camera in spec.cameras:
            arr = group.create_array(
                f"images.{camera}",
                shape=(PADDED,),
                dtype=zarr.dtype.VariableLengthBytes(),
                chunks=(10,),
                compressors=None,
            )
            frames = [
                simplejpeg.encode_jpeg(np.full((24, 32, 3), (i * 9) % 255, np.uint8))
                for i in range(PADDED)
            ]
            arr[:] = np.array(frames, dtype=object)
        ann = group.create_array("annotations", shape=(2,), dtype=zarr.dtype.VariableLengthBytes())
        ann[:] = np.array(
            [
                json.dumps({"text": t, "start_idx": a, "end_idx": b}).encode()
                for t, a, b in (("grasp", 0, 10), ("lift", 8, 30))
            ],
            dtype=object,
        )
    group.attrs.update(
        {
            "embodiment": "EVA_BIMANUAL",
            "total_frames": FRAMES,
            "fps": 30,
            "task_name": "lift",
            "task_description": "lift the cup",
            "features": {},
            "operator": "ann",
        }
    )
    return path


@pytest.fixture
def egoverse_root(tmp_path: Path) -> Path:
    root = tmp_path / "egoverse"
    _egoverse_episode(root / "2026-01-01-00-00-00-000001", seed=1)
    _egoverse_episode(root / "65f1a2b3c4d5e6f708192a3b.zarr", seed=2)
    return root


def test_resolve_clamps_to_total_frames_and_keeps_hashes(egoverse_root: Path) -> None:
    episodes = resolve_episodes(egoverse_root, filters={"operator": "ann"})
    assert [e.hash for e in episodes] == ["2026-01-01-00-00-00-000001", "65f1a2b3c4d5e6f708192a3b"]
    assert all(e.total_frames == FRAMES and e.embodiment == "eva_bimanual" for e in episodes)
    reader = EpisodeReader(episodes[0].path)
    assert reader.read_numeric("left.obs_ee_pose").shape == (FRAMES, 7)
    assert reader.read_numeric("left.obs_ee_pose").dtype == np.float32


def test_samples_use_frames_within_total_frames_and_the_first_covering_span(
    egoverse_root: Path,
) -> None:
    ds = EpisodeDataset(
        resolve_episodes(egoverse_root),
        embodiment="eva_bimanual",
        cameras=("front_1", "right_wrist"),
        horizon=8,
    )
    assert len(ds) == 2 * FRAMES
    last = ds[FRAMES - 1]
    assert last["faults"] == [] and last["action_mask"].tolist() == [True] + [False] * 7
    assert ds[9]["prompt"] == "grasp" and ds[12]["prompt"] == "lift" and ds[29]["prompt"] == "lift"
    assert int(ds[FRAMES - 1]["images.front_1"][0, 0, 0]) == pytest.approx(
        ((FRAMES - 1) * 9) % 255, abs=3
    )


def test_the_command_line_reads_them(egoverse_root: Path, capsys) -> None:
    assert cli(["inspect", str(egoverse_root)]) == 0
    assert "65f1a2b3c4d5e6f708192a3b" in capsys.readouterr().out
    assert cli(["validate", str(egoverse_root), "--deep"]) == 0
