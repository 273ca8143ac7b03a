"""polymimic-data: EgoVerse-compatible zarr episodes turned into training batches.

The names below load on first use, so `import polymimic_data` is light, and importing one
light subpackage (`polymimic_data.geometry`, `polymimic_data.embodiments`) loads no torch or
zarr. The subpackages, by concern (each layer imports only those above it):

    geometry     rotations, poses and coordinate frames, layouts
    embodiments  the built-in registry, embodiments declared by data, policy inputs
    store        the episode store: zarr reading and writing, atomic files, remote roots
    episodes     resolving (cached), splits, deep checks, corrections
    samples      the dataset, windows, faults, JPEG decode, collate, loaders, normalisation
    lerobot      LeRobot v3 source and importer (the `lerobot` extra)
    synthetic    generated episodes (the default run's), EgoVerse-layout writer, hand keypoints
    testing      fixtures for tests and benchmarks only (LeRobot-format writer, S3 test server)
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

_EXPORTS = {  # name -> the subpackage that defines it
    "EpisodeDataset": "samples",
    "collate_samples": "samples",
    "EpisodeIndex": "samples",
    "Normalizer": "samples",
    "NormStats": "samples",
    "load_or_compute_norm_stats": "samples",
    "Embodiment": "embodiments",
    "get_embodiment": "embodiments",
    "registered_embodiments": "embodiments",
    "embodiment_specs": "embodiments",
    "EpisodeInfo": "episodes",
    "resolve_episodes": "episodes",
    "split_episodes": "episodes",
    "EpisodeReader": "store",
    "write_episode": "store",
    "ChannelGroup": "geometry",
    "Layout": "geometry",
    "get_layout": "geometry",
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
    "embodiment_specs",
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
    from polymimic_data.embodiments import (
        Embodiment,
        embodiment_specs,
        get_embodiment,
        registered_embodiments,
    )
    from polymimic_data.episodes import EpisodeInfo, resolve_episodes, split_episodes
    from polymimic_data.geometry import ChannelGroup, Layout, get_layout
    from polymimic_data.samples import (
        EpisodeDataset,
        EpisodeIndex,
        Normalizer,
        NormStats,
        collate_samples,
        load_or_compute_norm_stats,
    )
    from polymimic_data.store import EpisodeReader, write_episode
