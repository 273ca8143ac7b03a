"""load_policy and TrainedPolicy.predict: raw frames in either layout, continuations."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from polymimic_serve import Continuation, load_policy, write_export
from polymimic_serve.checkpoints import EXPORT_CONFIG, read_export
from polymimic_serve.trained_policy import TrainedPolicy


def _observation(policy: TrainedPolicy, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {
        "images": {"front_1": rng.integers(0, 256, (60, 80, 3), dtype=np.uint8)},
        "state": (0.5 + 0.1 * rng.normal(size=(policy.history, policy.layout.dim))),
    }


def test_an_export_rebuilds_the_policy_with_what_it_was_trained_with(tiny_export: Path) -> None:
    policy = load_policy(tiny_export)
    assert (policy.embodiment, policy.cameras, policy.history, policy.horizon) == (
        "eva_bimanual",
        ["front_1"],
        2,
        8,
    )
    assert policy.image_size == (32, 40) and policy.fps == 30.0 and policy.step == 0
    assert policy.channels[:4] == [
        "left_position.0",
        "left_position.1",
        "left_position.2",
        "left_rotation.0",
    ]
    # either of the export's files names it too
    torch.testing.assert_close(
        load_policy(tiny_export / EXPORT_CONFIG).predict(_observation(policy))["actions"],
        policy.predict(_observation(policy))["actions"],
    )


def test_channels_first_and_channels_last_frames_give_the_same_chunk(tiny_policy) -> None:
    observation = _observation(tiny_policy)
    hwc = tiny_policy.predict(observation)
    chw = {
        **observation,
        "images": {"front_1": observation["images"]["front_1"].transpose(2, 0, 1)},
    }
    np.testing.assert_array_equal(tiny_policy.predict(chw)["actions"], hwc["actions"])
    assert hwc["actions"].shape == (8, 16) and hwc["actions"].dtype == np.float32
    read_only = observation["images"]["front_1"].copy()
    read_only.flags.writeable = False  # as frames unpacked from a message are
    same = tiny_policy.predict({**observation, "images": {"front_1": read_only}})
    np.testing.assert_array_equal(same["actions"], hwc["actions"])


@pytest.mark.parametrize(
    ("image", "message"),
    [
        (
            np.zeros((60, 80, 3), np.float32),
            r"images\['front_1'\]: uint8 \(H, W, 3\) or \(3, H, W\), got float32",
        ),
        (np.zeros((60, 80), np.uint8), r"got uint8 \(60, 80\)"),
        (np.zeros((60, 80, 4), np.uint8), r"got uint8 \(60, 80, 4\)"),
    ],
)
def test_a_frame_it_cannot_use_is_named(tiny_policy, image: np.ndarray, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_policy.predict({**_observation(tiny_policy), "images": {"front_1": image}})


def test_a_continuation_binds_the_frozen_steps(tiny_policy) -> None:
    observation = _observation(tiny_policy)
    plain = tiny_policy.predict(observation, seed=4)["actions"]
    previous = plain[3:] + 0.5  # in the data's units: far from what it would sample
    continued = tiny_policy.predict(
        observation, seed=4, continuation=Continuation(previous, delay=2)
    )["actions"]
    assert (
        np.abs(continued[:2] - previous[:2]).mean() < 0.2 * np.abs(plain[:2] - previous[:2]).mean()
    )
    # nothing to continue: the same chunk as without
    np.testing.assert_array_equal(
        tiny_policy.predict(observation, seed=4, continuation=Continuation(previous[:0], 0))[
            "actions"
        ],
        plain,
    )


@pytest.mark.parametrize(
    ("continuation", "message"),
    [
        (
            Continuation(np.zeros((9, 16), np.float32), 1),
            r"rtc.actions: float \(P, 16\) with P <= 8",
        ),
        (Continuation(np.zeros((4, 15), np.float32), 1), r"rtc.actions: float \(P, 16\)"),
        (Continuation(np.full((4, 16), np.nan, np.float32), 1), "every value must be finite"),
        (Continuation(np.zeros((4, 16), np.float32), 9), r"rtc.delay: an integer in 0..8"),
    ],
)
def test_a_continuation_that_does_not_fit_is_named(
    tiny_policy, continuation: Continuation, message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        tiny_policy.predict(_observation(tiny_policy), continuation=continuation)


def test_a_policy_that_cannot_inpaint_says_so(regression_export: Path) -> None:
    policy = load_policy(regression_export)
    assert not policy.can_inpaint
    with pytest.raises(ValueError, match="'hpt' policy cannot continue a chunk"):
        policy.predict(_observation(policy), continuation=Continuation(np.zeros((4, 16)), 1))


def test_an_export_is_written_whole_and_kept_unless_overwritten(
    tiny_export: Path, tmp_path: Path
) -> None:
    record, state, step = read_export(tiny_export)
    out = write_export(record, state, step, tmp_path / "copy")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        write_export(record, state, 5, out)
    write_export(record, state, 5, out, overwrite=True)
    assert read_export(out)[2] == 5
    assert [p.name for p in tmp_path.iterdir()] == ["copy"]  # no staging folder left behind


def test_a_frame_is_resized_a_channel_at_a_time_to_the_same_numbers(tiny_policy) -> None:
    """Resizing one channel at a time holds a third of the float copy (a 4K frame: 99 MB ->
    33 MB) and must give exactly what resizing the whole frame gave; a read-only frame (as
    unpacked from a message) is not copied first."""
    import torch.nn.functional as F

    rng = np.random.default_rng(0)
    for shape in ((3, 480, 640), (480, 640, 3), (3, 50, 100)):
        frame = rng.integers(0, 256, shape, dtype=np.uint8)
        frame.flags.writeable = False
        got = tiny_policy.image_tensor("front_1", frame)
        whole = torch.from_numpy(frame.copy())[None]
        if shape[-1] == 3:
            whole = whole.permute(0, 3, 1, 2)
        expected = F.interpolate(
            whole.float(), size=tiny_policy.image_size, mode="bilinear", antialias=True
        )
        assert torch.equal(got, expected.round().clamp(0, 255).to(torch.uint8))
