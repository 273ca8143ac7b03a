"""polymimic-data: EgoVerse-compatible zarr episodes turned into training batches."""

from polymimic_data.dataset import EpisodeDataset, collate_samples
from polymimic_data.embodiments import Embodiment, get_embodiment, registered_embodiments
from polymimic_data.episode_index import EpisodeIndex, EpisodeInfo, resolve_episodes
from polymimic_data.episode_store import EpisodeReader, write_episode
from polymimic_data.layouts import ChannelGroup, Layout, get_layout
from polymimic_data.normalization import Normalizer, NormStats, load_or_compute_norm_stats
from polymimic_data.splits import split_episodes

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
