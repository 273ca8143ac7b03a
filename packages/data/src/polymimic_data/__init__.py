"""polymimic-data: EgoVerse-compatible zarr episodes turned into training batches.

The names below load on first use, so importing one light module (e.g.
`polymimic_data.atomic_files` or `polymimic_data.embodiments`) does not load torch or zarr.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-data")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "EpisodeDataset": "dataset",
    "collate_samples": "dataset",
    "Embodiment": "embodiments",
    "get_embodiment": "embodiments",
    "registered_embodiments": "embodiments",
    "EpisodeIndex": "episode_index",
    "EpisodeInfo": "episode_index",
    "resolve_episodes": "episode_index",
    "EpisodeReader": "episode_store",
    "write_episode": "episode_store",
    "ChannelGroup": "layouts",
    "Layout": "layouts",
    "get_layout": "layouts",
    "Normalizer": "normalization",
    "NormStats": "normalization",
    "load_or_compute_norm_stats": "normalization",
    "split_episodes": "splits",
}

__all__ = [
    "ChannelGroup",
    "Embodiment",
    "EpisodeDataset",
    "EpisodeIndex",
    "EpisodeInfo",
    "EpisodeReader",
    "Layout",
    "NormStats",
    "Normalizer",
    "collate_samples",
    "get_embodiment",
    "get_layout",
    "load_or_compute_norm_stats",
    "registered_embodiments",
    "resolve_episodes",
    "split_episodes",
    "write_episode",
]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'polymimic_data' has no attribute {name!r}")
    return getattr(importlib.import_module(f"polymimic_data.{_EXPORTS[name]}"), name)


if TYPE_CHECKING:
    from polymimic_data.dataset import EpisodeDataset, collate_samples
    from polymimic_data.embodiments import Embodiment, get_embodiment, registered_embodiments
    from polymimic_data.episode_index import EpisodeIndex, EpisodeInfo, resolve_episodes
    from polymimic_data.episode_store import EpisodeReader, write_episode
    from polymimic_data.layouts import ChannelGroup, Layout, get_layout
    from polymimic_data.normalization import Normalizer, NormStats, load_or_compute_norm_stats
    from polymimic_data.splits import split_episodes
