"""Episodes laid out as EgoVerse's own writer lays them out load unchanged, by the fast path."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import simplejpeg
import torch

from polymimic_data import EpisodeDataset, EpisodeReader, resolve_episodes
from polymimic_data.cli import main as cli
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.synthetic.egoverse_layout import padded_length, write_egoverse_episode
from polymimic_data.synthetic.episodes import generate_episode

FRAMES = 130  # padded to 200, as EgoVerse pads to a multiple of 100
HASHES = ("2026-01-01-00-00-00-000001", "65f1a2b3c4d5e6f708192a3b")


def _root(tmp: Path, layout: str) -> Path:
    spec = get_embodiment("eva_bimanual")
    for seed, name in enumerate(HASHES):
        suffix = ".zarr" if seed else ""
        generate_episode(
            tmp / layout / f"{name}{suffix}",
            spec,
            frames=FRAMES,
            height=48,
            width=64,
            seed=seed,
            layout=layout,
        )
    return tmp / layout


@pytest.fixture(scope="module")
def roots(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The same episodes written by EgoVerse's layout and by polymimic's writer."""
    tmp = tmp_path_factory.mktemp("layouts")
    return {layout: _root(tmp, layout) for layout in ("egoverse", "polymimic")}


def _meta(episode: Path, key: str) -> dict:
    return json.loads((episode / key / "zarr.json").read_text())


def test_the_files_are_laid_out_as_egoverse_writes_them(roots: dict[str, Path]) -> None:
    episode = roots["egoverse"] / HASHES[0]
    attrs = json.loads((episode / "zarr.json").read_text())["attributes"]
    assert attrs["embodiment"] == "EVA_BIMANUAL" and attrs["total_frames"] == FRAMES
    jpeg = _meta(episode, "images.front_1")
    assert jpeg["data_type"] == "variable_length_bytes" and jpeg["shape"] == [200]
    assert jpeg["chunk_grid"]["configuration"]["chunk_shape"] == [padded_length(FRAMES)]
    sharding = jpeg["codecs"][0]
    assert sharding["name"] == "sharding_indexed" and len(jpeg["codecs"]) == 1
    conf = sharding["configuration"]
    assert conf["chunk_shape"] == [1]
    assert conf["codecs"] == [
        {"name": "vlen-bytes", "configuration": {}},
        {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    ]
    assert conf["index_codecs"] == [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {"name": "crc32c"},
    ]
    assert conf["index_location"] == "end"
    assert sorted(p.name for p in (episode / "images.front_1" / "c").iterdir()) == ["0"]
    pose = _meta(episode, "left.obs_ee_pose")
    assert pose["data_type"] == "float64" and pose["shape"] == [200, 7]
    inner = pose["codecs"][0]["configuration"]
    assert inner["chunk_shape"] == [100, 7]
    assert [c["name"] for c in inner["codecs"]] == ["bytes", "zstd"]


def test_images_are_read_by_byte_range_not_through_zarr(roots: dict[str, Path]) -> None:
    reader = EpisodeReader(roots["egoverse"] / HASHES[0])
    reader.read_jpeg("front_1", 0)
    assert reader._jpeg_readers["front_1"].mode == "sharded"


def test_resolve_clamps_to_total_frames_and_keeps_hashes(roots: dict[str, Path]) -> None:
    episodes = resolve_episodes(roots["egoverse"], filters={"task": "synthetic_reach"})
    assert [e.hash for e in episodes] == list(HASHES)
    assert all(e.total_frames == FRAMES and e.embodiment == "eva_bimanual" for e in episodes)
    reader = EpisodeReader(episodes[0].path)
    assert reader.read_numeric("left.obs_ee_pose").shape == (FRAMES, 7)
    assert reader.read_numeric("left.obs_ee_pose").dtype == np.float32


@pytest.mark.parametrize("packed", [False, True], ids=["from disk", "from a numeric pack"])
def test_samples_equal_those_of_the_same_episodes_written_by_polymimic(
    roots: dict[str, Path], packed: bool, tmp_path: Path
) -> None:
    def dataset(layout: str) -> EpisodeDataset:
        return EpisodeDataset(
            resolve_episodes(roots[layout]),
            embodiment="eva_bimanual",
            cameras=("front_1", "right_wrist"),
            image_size=(24, 32),
            history=2,
            horizon=8,
        )

    ours, theirs = dataset("polymimic"), dataset("egoverse")
    if packed:  # their shards' indices (zstd inside, crc32c on the index) kept in the pack
        assert theirs.use_numeric_pack(tmp_path, progress=False) is not None
    assert len(ours) == len(theirs) == 2 * FRAMES
    for index in (0, 57, FRAMES - 1, FRAMES, 2 * FRAMES - 1):
        a, b = ours[index], theirs[index]
        assert a["faults"] == b["faults"] == []
        assert (a["episode"], a["frame"], a["prompt"]) == (b["episode"], b["frame"], b["prompt"])
        for key in ("state", "actions", "action_mask", "images.front_1", "images.right_wrist"):
            assert torch.equal(a[key], b[key]), key
    last = theirs[FRAMES - 1]
    assert last["action_mask"].tolist() == [True] + [False] * 7
    assert theirs._cache.from_pack == (2 if packed else 0)


def test_the_command_line_reads_them(roots: dict[str, Path], capsys) -> None:
    assert cli(["inspect", str(roots["egoverse"])]) == 0
    assert "65f1a2b3c4d5e6f708192a3b" in capsys.readouterr().out
    assert cli(["validate", str(roots["egoverse"]), "--deep"]) == 0
    assert "ok: 2 episodes, 260 frames (values and JPEGs checked)" in capsys.readouterr().out


def test_a_frame_prompt_is_the_first_span_covering_it(tmp_path: Path) -> None:
    spec = get_embodiment("eva_bimanual")
    rng = np.random.default_rng(0)
    arrays = {}
    for key in spec.numeric_keys:
        values = rng.normal(size=(30, 1 if key.endswith("gripper") else 7))
        if key.endswith("_pose"):
            values[:, 3:] /= np.linalg.norm(values[:, 3:], axis=1, keepdims=True)
        arrays[key] = values
    jpeg = simplejpeg.encode_jpeg(np.zeros((8, 8, 3), np.uint8))
    write_egoverse_episode(
        tmp_path / "ep",
        embodiment="EVA_BIMANUAL",
        fps=30,
        arrays=arrays,
        images={"front_1": [jpeg] * 30},
        annotations=[
            {"text": "grasp", "start_idx": 0, "end_idx": 10},
            {"text": "lift", "start_idx": 8, "end_idx": 29},
        ],
    )
    ds = EpisodeDataset(resolve_episodes(tmp_path), embodiment="eva_bimanual", horizon=2)
    assert [ds[f]["prompt"] for f in (0, 9, 10, 28, 29)] == ["grasp", "grasp", "lift", "lift", ""]
