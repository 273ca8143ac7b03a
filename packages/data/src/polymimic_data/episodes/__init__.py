"""Episodes as a collection: resolving them under roots (cached), splits, checks, corrections."""

from __future__ import annotations

from polymimic_data.episodes.bad_values import NOT_DETECTED, QUATERNION_TOLERANCE, frame_faults
from polymimic_data.episodes.checks import FrameProblems, deep_problems, frame_ranges
from polymimic_data.episodes.corrections import (
    APPLIED,
    CORRECTIONS,
    Correction,
    CorrectionResult,
    apply_correction,
)
from polymimic_data.episodes.resolver import (
    EMPTY_FOLDER,
    EPISODE,
    NO_GROUP_METADATA,
    STRAY_FILE,
    EpisodeInfo,
    EpisodeScan,
    EpisodeValidationError,
    episode_dirs,
    job_cache_dir,
    resolve_episodes,
    scan_episodes,
    walk_root,
)
from polymimic_data.episodes.splits import split_episodes

__all__ = [
    "APPLIED",
    "CORRECTIONS",
    "EMPTY_FOLDER",
    "EPISODE",
    "NOT_DETECTED",
    "NO_GROUP_METADATA",
    "QUATERNION_TOLERANCE",
    "STRAY_FILE",
    "Correction",
    "CorrectionResult",
    "EpisodeInfo",
    "EpisodeScan",
    "EpisodeValidationError",
    "FrameProblems",
    "apply_correction",
    "deep_problems",
    "episode_dirs",
    "frame_faults",
    "frame_ranges",
    "job_cache_dir",
    "resolve_episodes",
    "scan_episodes",
    "split_episodes",
    "walk_root",
]
