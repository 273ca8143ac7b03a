"""Deterministic train/validation splits by episode: no episode is in both."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from polymimic_data.episodes.resolver import EpisodeInfo


def split_episodes(
    episodes: Sequence[EpisodeInfo], *, val_fraction: float, seed: int
) -> tuple[list[EpisodeInfo], list[EpisodeInfo]]:
    """Split by a seeded hash of each episode's hash, so the split is stable as data grows.

    At least one episode goes to each side when there are two or more.
    """
    if not 0.0 <= val_fraction < 1.0:
        raise ValueError(f"val_fraction must be in [0, 1), got {val_fraction}")

    def rank(ep: EpisodeInfo) -> str:
        return hashlib.sha256(f"{seed}:{ep.hash}".encode()).hexdigest()

    ordered = sorted(episodes, key=rank)
    n_val = round(len(ordered) * val_fraction)
    if val_fraction > 0 and len(ordered) >= 2:
        n_val = min(max(n_val, 1), len(ordered) - 1)
    val = sorted(ordered[:n_val], key=lambda e: e.hash)
    train = sorted(ordered[n_val:], key=lambda e: e.hash)
    return train, val
