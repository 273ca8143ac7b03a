"""Resolving episodes under local roots, and mapping a global sample to (episode, frame)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from polymimic_data.embodiments import get_embodiment
from polymimic_data.episode_store import episode_hash, is_incomplete


@dataclass(frozen=True)
class EpisodeInfo:
    path: Path
    hash: str
    embodiment: str
    total_frames: int
    attrs: dict[str, Any] = field(compare=False, repr=False)


class EpisodeValidationError(ValueError):
    """Raised with every bad episode and why, so one run shows them all."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        lines = "\n".join(f"  {where}: {why}" for where, why in problems)
        super().__init__(f"{len(problems)} bad episode(s):\n{lines}")


def _read_group_attrs(path: Path) -> dict[str, Any]:
    meta = json.loads((path / "zarr.json").read_text())
    if meta.get("node_type") != "group":
        raise ValueError("zarr.json is not a group")
    return dict(meta.get("attributes", {}))


def _check_episode(path: Path, attrs: dict[str, Any]) -> str | None:
    """Why the episode cannot be trained on, or None."""
    if "embodiment" not in attrs:
        return "attribute 'embodiment' is missing"
    try:
        spec = get_embodiment(str(attrs["embodiment"]))
    except KeyError as exc:
        return str(exc.args[0])
    frames = attrs.get("total_frames")
    if not isinstance(frames, int) or frames <= 0:
        return f"total_frames must be a positive integer, got {frames!r}"
    missing = [k for k in spec.numeric_keys if not (path / k / "zarr.json").exists()]
    if missing:
        return f"keys missing for {spec.name}: {missing}"
    return None


def _candidate_dirs(root: Path) -> Iterable[Path]:
    with os.scandir(root) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            if entry.is_dir() and not entry.name.startswith("."):
                path = Path(entry.path)
                if (path / "zarr.json").exists():
                    yield path
                else:
                    yield from _candidate_dirs(path)


def resolve_episodes(
    roots: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    embodiment: str | Sequence[str] | None = None,
) -> list[EpisodeInfo]:
    """Find, filter and validate every episode under `roots`.

    Raises EpisodeValidationError listing every bad episode; half-written episodes
    (left by an interrupted atomic write) are never picked up.
    """
    if isinstance(roots, str | os.PathLike):
        roots = [roots]
    wanted = (
        None
        if embodiment is None
        else {e.lower() for e in ([embodiment] if isinstance(embodiment, str) else embodiment)}
    )
    episodes: list[EpisodeInfo] = []
    problems: list[tuple[str, str]] = []
    seen: dict[str, Path] = {}
    for root in map(Path, roots):
        if not root.is_dir():
            raise FileNotFoundError(f"data root {root} does not exist or is not a folder")
        for path in _candidate_dirs(root):
            if is_incomplete(path):
                continue
            try:
                attrs = _read_group_attrs(path)
            except (OSError, ValueError) as exc:
                problems.append((str(path), f"cannot read group metadata ({exc})"))
                continue
            if wanted is not None and str(attrs.get("embodiment", "")).lower() not in wanted:
                continue
            why = _check_episode(path, attrs)
            if why:
                problems.append((str(path), why))
                continue
            h = episode_hash(path)
            if h in seen:
                problems.append((str(path), f"duplicate episode hash, also at {seen[h]}"))
                continue
            seen[h] = path
            episodes.append(
                EpisodeInfo(path, h, str(attrs["embodiment"]).lower(), attrs["total_frames"], attrs)
            )
    if problems:
        raise EpisodeValidationError(problems)
    if not episodes:
        raise FileNotFoundError(
            f"no episodes found under {[str(r) for r in roots]}"
            + (f" for embodiment {sorted(wanted)}" if wanted else "")
        )
    return episodes


class EpisodeIndex:
    """Global sample index -> (episode, frame), by cumulative offsets and binary search.

    Memory grows with the number of episodes, not frames.
    """

    def __init__(self, frames_per_episode: Sequence[int]) -> None:
        counts = np.asarray(frames_per_episode, dtype=np.int64)
        if (counts < 0).any():
            raise ValueError("frame counts must be non-negative")
        self._ends = np.cumsum(counts)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def locate(self, index: int) -> tuple[int, int]:
        if not 0 <= index < len(self):
            raise IndexError(f"sample {index} out of range for {len(self)} samples")
        episode = int(np.searchsorted(self._ends, index, side="right"))
        start = int(self._ends[episode - 1]) if episode else 0
        return episode, index - start
