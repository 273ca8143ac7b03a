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
    values[:, 8] = 0.5  # a constant gripper
    with pytest.warns(UserWarning, match=r"grip\[0\]"):
        norm = Normalizer({"e": _stats(values)}, {"e": LAYOUT})
    x = torch.tensor(values[:4], dtype=torch.float32)
    out = norm.normalize_actions("e", x)
    torch.testing.assert_close(out[:, 2:], x[:, 2:])
    assert torch.isfinite(out).all()


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
