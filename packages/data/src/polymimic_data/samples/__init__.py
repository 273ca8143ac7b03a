"""Samples and batches.

The dataset (assembly only), its windows and episode cache, faults, JPEG decode, collate,
loaders, normalisation and augmentation.
"""

from __future__ import annotations

from polymimic_data.samples.collate import collate_samples
from polymimic_data.samples.dataloaders import ShuffledOrder, make_dataloader, tune_worker_allocator
from polymimic_data.samples.dataset import EpisodeDataset
from polymimic_data.samples.episode_cache import EpisodeCache, LoadedEpisode
from polymimic_data.samples.faults import (
    EPISODE_DROPPED,
    BadDataError,
    DataFault,
    EpisodeFaults,
    FaultLedger,
    NoValidSampleError,
    SampleFault,
    read_fault,
)
from polymimic_data.samples.image_augmentation import ImageAugmentation
from polymimic_data.samples.image_resize import resize_uint8
from polymimic_data.samples.jpeg_decode import decode_jpeg
from polymimic_data.samples.normalization import (
    Normalizer,
    NormStats,
    VectorStats,
    compute_norm_stats,
    load_or_compute_norm_stats,
    norm_stats_key,
)
from polymimic_data.samples.sample_index import EpisodeIndex
from polymimic_data.samples.windows import (
    WindowSampler,
    assemble,
    frames_of,
    prompt_at,
    read_at,
    subsample_frames,
)

__all__ = [
    "EPISODE_DROPPED",
    "BadDataError",
    "DataFault",
    "EpisodeCache",
    "EpisodeDataset",
    "EpisodeFaults",
    "EpisodeIndex",
    "FaultLedger",
    "ImageAugmentation",
    "LoadedEpisode",
    "NoValidSampleError",
    "NormStats",
    "Normalizer",
    "SampleFault",
    "ShuffledOrder",
    "VectorStats",
    "WindowSampler",
    "assemble",
    "collate_samples",
    "compute_norm_stats",
    "decode_jpeg",
    "frames_of",
    "load_or_compute_norm_stats",
    "make_dataloader",
    "norm_stats_key",
    "prompt_at",
    "read_at",
    "read_fault",
    "resize_uint8",
    "subsample_frames",
    "tune_worker_allocator",
]
