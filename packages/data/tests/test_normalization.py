from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from polymimic_data import EpisodeDataset, Normalizer, load_or_compute_norm_stats, resolve_episodes
from polymimic_data.geometry.layouts import layout_from_widths
from polymimic_data.samples import normalization as norm_module
from polymimic_data.samples.normalization import NormStats, VectorStats


def _stats(values: np.ndarray) -> NormStats:
    return NormStats(VectorStats.of(values), VectorStats.of(values))


LAYOUT = layout_from_widths(
    "test", [("pos", "position", 2), ("rot", "rot6d", 6), ("grip", "gripper", 1)]
)


@pytest.mark.parametrize("mode", ["zscore", "minmax", "quantile"])
def test_normalise_then_denormalise_is_identity(mode: str) -> None:
    values = np.random.default_rng(0).normal(3.0, 2.0, (500, 9))
    norm = Normalizer({"e": _stats(values)}, {"e": LAYOUT}, mode=mode)  # type: ignore[arg-type]
    x = torch.tensor(values[:20], dtype=torch.float32)[:, None]
    back = norm.denormalize_actions("e", norm.normalize_actions("e", x))
    torch.testing.assert_close(back, x, atol=1e-5, rtol=1e-5)
    normalised = norm.normalize_actions("e", torch.tensor(values, dtype=torch.float32))
    if mode == "zscore":
        assert normalised[:, :2].mean().abs() < 1e-3
        assert (normalised[:, :2].std(0) - 1).abs().max() < 1e-2
    else:
        assert normalised[:, :2].abs().max() <= 1.0 + 1e-5 or mode == "quantile"


def test_rot6d_is_not_normalised_and_degenerate_channels_pass_through() -> None:
    values = np.random.default_rng(0).normal(3.0, 2.0, (200, 9))
    values[:, 8] = 0.5 + 5e-5 * np.random.default_rng(1).normal(size=200)  # a gripper at rest
    with pytest.warns(UserWarning) as caught:
        norm = Normalizer({"e": _stats(values)}, {"e": LAYOUT})
    assert sorted(str(w.message) for w in caught) == [
        f"test {what}: channels ['grip[0]'] are (nearly) constant; they pass through unnormalised"
        for what in ("action", "state")
    ]
    x = torch.tensor(values[:4], dtype=torch.float32)
    for out in (norm.normalize_actions("e", x), norm.normalize_state("e", x)):
        torch.testing.assert_close(out[:, 2:], x[:, 2:])
        assert torch.isfinite(out).all()


def test_an_action_channel_that_never_moves_is_held_at_its_value() -> None:
    """A head is accurate to a fraction of a unit; unnormalised, a unit is a metre."""
    values = np.random.default_rng(0).normal(3.0, 2.0, (200, 9))
    values[:, 0] = 0.1  # ALOHA's left arm keeps y at exactly 0.1 m
    with pytest.warns(UserWarning) as caught:
        norm = Normalizer({"e": _stats(values)}, {"e": LAYOUT})
    assert sorted(str(w.message) for w in caught) == [
        "test action: channels ['pos[0]'] are (nearly) constant; they are held at that value",
        "test state: channels ['pos[0]'] are (nearly) constant; they pass through unnormalised",
    ]
    x = torch.tensor(values[:4], dtype=torch.float32)
    normalised = norm.normalize_actions("e", x)
    assert torch.isfinite(normalised).all() and normalised[:, 0].abs().max() < 1e-6
    head_off_by_a_lot = normalised + torch.linspace(-0.5, 0.5, 9)
    back = norm.denormalize_actions("e", head_off_by_a_lot)
    torch.testing.assert_close(back[:, 0], torch.full((4,), 0.1))
    torch.testing.assert_close(norm.denormalize_actions("e", normalised)[:, 1:], x[:, 1:])
    state = norm.normalize_state("e", x)  # the state's channel passes through (an input)
    torch.testing.assert_close(state[:, 0], x[:, 0])


def test_statistics_are_cached_and_reused(eva_root: Path, tmp_path: Path, monkeypatch) -> None:
    ds = EpisodeDataset(resolve_episodes(eva_root), embodiment="eva_bimanual", history=2, horizon=4)
    first, path = load_or_compute_norm_stats(ds, cache_dir=tmp_path, num_samples=50, seed=0)
    assert path.exists()

    def fail(*args, **kwargs):
        raise AssertionError("statistics were recomputed instead of loaded")

    monkeypatch.setattr(norm_module, "compute_norm_stats", fail)
    second, same = load_or_compute_norm_stats(ds, cache_dir=tmp_path, num_samples=50, seed=0)
    assert same == path
    np.testing.assert_allclose(second.actions.mean, first.actions.mean)
    with pytest.raises(AssertionError, match="recomputed"):
        load_or_compute_norm_stats(ds, cache_dir=tmp_path, num_samples=51, seed=0)


def test_statistics_read_no_image(eva_root: Path, monkeypatch) -> None:
    ds = EpisodeDataset(resolve_episodes(eva_root), embodiment="eva_bimanual")

    def no_images(*args, **kwargs):
        raise AssertionError("an image was decoded for statistics")

    monkeypatch.setattr("polymimic_data.samples.dataset.decode_jpeg", no_images)
    stats = norm_module.compute_norm_stats(ds, num_samples=40, seed=0)
    assert stats.state.mean.shape == (16,) and np.isfinite(stats.actions.std).all()


def test_a_layout_names_each_channel_by_its_group_and_axis() -> None:
    layout = layout_from_widths(
        "named",
        [("left_position", "position", 3), ("left_rotation", "quaternion", 4),
         ("left_yaw", "euler", 3), ("left_rot6d", "rot6d", 6), ("left_gripper", "gripper", 1),
         ("left_keypoints", "keypoints", 6)],
    )  # fmt: skip
    names = layout.channel_names()
    assert len(names) == layout.dim == len(set(names))
    assert names[:7] == ["left_position/x", "left_position/y", "left_position/z",
                         "left_rotation/w", "left_rotation/x", "left_rotation/y",
                         "left_rotation/z"]  # fmt: skip
    assert names[7:10] == ["left_yaw/roll", "left_yaw/pitch", "left_yaw/yaw"]
    assert names[10:17] == [*(f"left_rot6d/{i}" for i in range(6)), "left_gripper"]
    assert names[17:] == [f"left_keypoints/{i}/{axis}" for i in range(2) for axis in "xyz"]
