"""Normalisation statistics (cold and cached) and batched against per-sample augmentation.

    python benchmarks/data_transforms.py

Prints one JSON line per figure (DESIGN.md); each pair comes from the same run.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import torch
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_data import EpisodeDataset, load_or_compute_norm_stats, resolve_episodes
from polymimic_data.samples import ImageAugmentation
from polymimic_data.synthetic import ensure_synthetic_episodes

emit = figure_printer("data_transforms")


def norm_stats(tmp: Path, frames: int = 20_000) -> None:
    root = ensure_synthetic_episodes(
        tmp, "eva_bimanual", episodes=100, frames=frames // 100, height=16, width=16
    )
    dataset = EpisodeDataset(
        resolve_episodes(root), embodiment="eva_bimanual", history=2, horizon=16
    )
    start = time.perf_counter()
    load_or_compute_norm_stats(dataset, cache_dir=tmp / "cache", num_samples=frames, seed=0)
    cold = time.perf_counter() - start
    start = time.perf_counter()
    load_or_compute_norm_stats(dataset, cache_dir=tmp / "cache", num_samples=frames, seed=0)
    cached = time.perf_counter() - start
    emit("norm_stats_cold_s", cold, "s", frames=frames)
    emit("norm_stats_cached_s", cached, "s", frames=frames)


def augmentation(batch: int = 64, size: int = 224, rounds: int = 3) -> None:
    images = torch.randint(0, 256, (batch, 3, size, size), dtype=torch.uint8)
    aug = ImageAugmentation().train()
    aug(images)  # warm-up

    def batched() -> float:
        start = time.perf_counter()
        aug(images)
        return (time.perf_counter() - start) * 1e3

    def loop() -> float:
        start = time.perf_counter()
        torch.cat([aug(images[i : i + 1]) for i in range(batch)])
        return (time.perf_counter() - start) * 1e3

    times = [(batched(), loop()) for _ in range(rounds)]
    best_batched, best_loop = min(t[0] for t in times), min(t[1] for t in times)
    emit("augment_batched_ms", best_batched, "ms", batch=batch, size=size, device="cpu")
    emit("augment_loop_ms", best_loop, "ms", batch=batch, size=size, device="cpu")
    emit("augment_loop_over_batched", best_loop / best_batched, "ratio")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp:
        norm_stats(Path(tmp))
    augmentation()


if __name__ == "__main__":
    main()
