from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from polymimic_data import EpisodeDataset, EpisodeReader, collate_samples, resolve_episodes
from polymimic_data.samples import make_dataloader


@pytest.fixture
def eva(eva_root: Path) -> EpisodeDataset:
    return EpisodeDataset(
        resolve_episodes(eva_root),
        embodiment="eva_bimanual",
        cameras=("front_1", "left_wrist"),
        image_size=(32, 40),
        history=3,
        horizon=8,
    )


def test_sample_follows_the_batch_contract(eva: EpisodeDataset) -> None:
    sample = eva[5]
    assert sample["embodiment"] == "eva_bimanual"
    assert sample["images.front_1"].dtype == torch.uint8
    assert sample["images.front_1"].shape == (3, 32, 40)
    assert sample["state"].shape == (3, 16) and sample["state"].dtype == torch.float32
    assert sample["actions"].shape == (8, 16)
    assert sample["action_mask"].dtype == torch.bool and sample["action_mask"].all()
    assert sample["prompt"] == "reach the red and blue targets"
    assert sample["frame"] == 5


def test_state_and_actions_come_from_the_right_frames(eva: EpisodeDataset) -> None:
    reader = EpisodeReader(eva.episodes[0].path)
    obs = reader.read_numeric("left.obs_ee_pose")
    cmd = reader.read_numeric("left.cmd_ee_pose")
    grip = reader.read_numeric("left.gripper")
    sample = eva[1]  # history 3 at frame 1: frames 0, 0 (clamped), 1
    np.testing.assert_array_equal(sample["state"][:, :7].numpy(), obs[[0, 0, 1]])
    np.testing.assert_array_equal(sample["actions"][:, :7].numpy(), cmd[1:9])
    np.testing.assert_array_equal(sample["actions"][:, 7].numpy(), grip[2:10, 0])


def test_chunks_past_the_end_repeat_the_last_step_and_are_masked(eva: EpisodeDataset) -> None:
    last = eva.episodes[0].total_frames - 1
    sample = eva[last - 2]  # the gripper action reads one frame ahead: two steps fit
    mask = sample["action_mask"].numpy()
    assert mask.tolist() == [True, True] + [False] * 6
    actions = sample["actions"].numpy()
    np.testing.assert_array_equal(actions[3:], np.repeat(actions[2:3], 5, axis=0))


def test_images_decode_at_native_size_without_image_size(eva_root: Path) -> None:
    ds = EpisodeDataset(resolve_episodes(eva_root), embodiment="eva_bimanual")
    assert ds[0]["images.front_1"].shape == (3, 64, 80)


def test_collate_stacks_and_refuses_mixed_embodiments(eva: EpisodeDataset, aria_root: Path) -> None:
    batch = collate_samples([eva[0], eva[30]])
    assert batch["images.front_1"].shape == (2, 3, 32, 40)
    assert batch["episode"][0] != batch["episode"][1]
    assert batch["frame"].tolist() == [0, 6]
    aria = EpisodeDataset(resolve_episodes(aria_root), embodiment="aria_bimanual", horizon=8)
    assert aria[0]["state"].shape == (1, 144)  # human data defaults to hand keypoints
    with pytest.raises(ValueError, match="one embodiment"):
        collate_samples([eva[0], aria[0]])


def test_bad_configuration_is_named(eva_root: Path) -> None:
    episodes = resolve_episodes(eva_root)
    with pytest.raises(ValueError, match="cameras"):
        EpisodeDataset(episodes, embodiment="eva_bimanual", cameras=("top",))
    with pytest.raises(KeyError, match="cannot produce layout"):
        EpisodeDataset(episodes, embodiment="eva_bimanual", layout="human_cartesian_quat")
    with pytest.raises(ValueError, match="not of embodiment"):
        EpisodeDataset(episodes, embodiment="aria_bimanual")


def test_eva_poses_are_expressed_in_the_camera_frame_of_the_extrinsics(tmp_path: Path) -> None:
    from polymimic_data.embodiments.registry import get_embodiment
    from polymimic_data.synthetic.episodes import generate_episode

    spec = get_embodiment("eva_bimanual")
    path = generate_episode(tmp_path / "ep.zarr", spec, frames=8, height=16, width=16, seed=0)
    plain = EpisodeDataset(resolve_episodes(tmp_path), embodiment="eva_bimanual", horizon=2)[3]
    meta_path = path / "zarr.json"
    import json

    meta = json.loads(meta_path.read_text())
    # The camera sits 0.1 m along the arms' x axis, rotated 180 degrees about z.
    meta["attributes"]["camera_extrinsics"] = {"front_1": [0.1, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0]}
    meta_path.write_text(json.dumps(meta))
    moved = EpisodeDataset(resolve_episodes(tmp_path), embodiment="eva_bimanual", horizon=2)[3]
    x, y, z = plain["state"][0, :3].tolist()
    np.testing.assert_allclose(moved["state"][0, :3].numpy(), [-(x - 0.1), -y, z], atol=1e-6)
    np.testing.assert_array_equal(moved["state"][0, 7], plain["state"][0, 7])  # gripper unchanged


def test_chunks_resampled_from_a_window_interpolate_and_slerp(eva_root: Path) -> None:
    episodes = resolve_episodes(eva_root)
    ds = EpisodeDataset(episodes, embodiment="eva_bimanual", horizon=9, action_window=5)
    reader = EpisodeReader(episodes[0].path)
    cmd = reader.read_numeric("left.cmd_ee_pose")
    actions = ds[2]["actions"].numpy()  # frames 2, 2.5, 3, ..., 6
    np.testing.assert_allclose(actions[::2, :7], cmd[2:7], atol=1e-6)
    np.testing.assert_allclose(actions[1, :3], (cmd[2, :3] + cmd[3, :3]) / 2, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(actions[:, 3:7], axis=1), 1.0, atol=1e-5)
    near_end = ds[episodes[0].total_frames - 3]["action_mask"].numpy()
    assert near_end[0] and not near_end[-1]


class _OneByOne(EpisodeDataset):
    """The same samples without __getitems__: a DataLoader reads them one at a time."""

    __getitems__ = None  # type: ignore[assignment]


class _Marked(EpisodeDataset):
    """Its samples say they were read a batch at once."""

    def __getitems__(self, indices: list[int]) -> list[dict]:
        samples = super().__getitems__(indices)
        for sample in samples:
            sample["at_once"] = True
        return samples


def _collate_telling_copies(samples: list[dict]) -> dict:
    """collate_samples, the batch saying whether its images were copied (in the worker)."""
    batch = collate_samples(samples)
    batch["images_copied"] = any(
        batch[f"images.{c}"].data_ptr() != samples[0][f"images.{c}"].data_ptr() for c in CAMERAS
    )
    return batch


def _same_batches(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key, value in a.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, b[key]), key
            assert value.shape == b[key].shape and value.stride() == b[key].stride(), key
        else:
            assert value == b[key], key


CAMERAS = ("front_1", "left_wrist", "right_wrist")


@pytest.mark.parametrize("threads", [1, 3])
@pytest.mark.parametrize(
    "image_size", [None, (32, 40), (24, 30)], ids=["native", "scaled by the DCT", "resized"]
)
def test_a_batch_read_at_once_is_the_samples_read_one_by_one(
    eva_root: Path, image_size: tuple | None, threads: int
) -> None:
    """Decoded into one buffer per camera, which collation hands on without a copy."""

    def dataset(kind: type[EpisodeDataset]) -> EpisodeDataset:
        return kind(resolve_episodes(eva_root), embodiment="eva_bimanual", cameras=CAMERAS,
                    image_size=image_size, horizon=4, decode_threads=threads)  # fmt: skip

    indices = [5, 70, 3, 140, 99]
    samples = dataset(EpisodeDataset).__getitems__(indices)
    batch = collate_samples(samples)
    _same_batches(batch, collate_samples([dataset(EpisodeDataset)[i] for i in indices]))
    for camera in CAMERAS:  # the buffer the samples were decoded into is the batch's
        assert batch[f"images.{camera}"].data_ptr() == samples[0][f"images.{camera}"].data_ptr()
    assert dataset(EpisodeDataset).__getitems__([]) == []


@pytest.mark.parametrize("image_size", [None, (24, 30)], ids=["native", "resized"])
def test_every_sample_of_a_batch_read_at_once_decodes_straight_into_its_slot(
    eva_root: Path, image_size: tuple | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first sample too: it was once decoded apart and copied in, which at 128x160 cost
    as much as its decode (a copy torch spread over threads on a busy machine)."""
    dataset = EpisodeDataset(resolve_episodes(eva_root), embodiment="eva_bimanual",
                             cameras=CAMERAS, image_size=image_size, horizon=4)  # fmt: skip
    given: list = []
    start = dataset.decoder.start

    def spy(jpegs, size, decode, outs=None, **kwargs):
        given.append(None if outs is None else [out.data_ptr() for out in outs])
        return start(jpegs, size, decode, outs, **kwargs)

    monkeypatch.setattr(dataset.decoder, "start", spy)
    samples = dataset.__getitems__([5, 70, 3, 140])
    slots = [[s[f"images.{c}"].data_ptr() for c in CAMERAS] for s in samples]
    assert given == slots  # one decode a sample, each into the slot its image is
    assert len({ptr for ptrs in slots for ptr in ptrs}) == len(CAMERAS) * len(samples)


@pytest.mark.parametrize("workers", [0, 2])
def test_a_loader_gives_the_same_batches_reading_a_batch_at_once(
    eva_root: Path, workers: int
) -> None:
    """In a worker, the batch's images come across in the shared memory decoded into."""

    def batches(kind: type[EpisodeDataset]) -> list[dict]:
        dataset = kind(resolve_episodes(eva_root), embodiment="eva_bimanual", cameras=CAMERAS,
                       image_size=(32, 40), horizon=4)  # fmt: skip
        loader = make_dataloader(dataset, batch_size=8, shuffle=True, num_workers=workers)
        loader.collate_fn = _collate_telling_copies
        return [batch for _, batch in zip(range(4), loader, strict=False)]

    at_once, one_by_one = batches(_Marked), batches(_OneByOne)
    for a, b in zip(at_once, one_by_one, strict=True):
        assert a.pop("at_once") == [True] * 8  # the loader read the batch at once
        assert a.pop("images_copied") is False  # and collation handed its buffers on
        assert b.pop("images_copied") is True
        _same_batches(a, b)
        assert a["images.front_1"].is_shared() == (workers > 0)
        for camera in CAMERAS:  # every slot 16 bytes past a 32-byte boundary (batch_buffer)
            assert {image.data_ptr() % 32 for image in a[f"images.{camera}"]} == {16}
