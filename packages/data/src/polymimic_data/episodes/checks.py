"""Deep checks of episodes on disk: every value and every JPEG frame, in parallel.

`polymimic-data validate --deep` runs these on every episode the resolver accepts and
reports every bad frame with its episode, key and frame, so that one pass finds what a
training run would otherwise meet one sample at a time. JPEGs are decoded as the loader
decodes them (libjpeg-turbo, strict: a corrupt stream is an error), at 1/8 scale: the
whole entropy-coded stream is still read, which is where corruption shows.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass

import simplejpeg
from tqdm.auto import tqdm

from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.episodes.bad_values import frame_faults
from polymimic_data.episodes.resolver import EpisodeInfo
from polymimic_data.store.episode_store import EpisodeReader


@dataclass(frozen=True)
class FrameProblems:
    """Frames of one key of one episode that are bad for one reason."""

    episode: EpisodeInfo
    key: str
    frames: tuple[int, ...]
    reason: str

    def row(self) -> tuple[str, str]:
        """(where, why) for EpisodeValidationError's report."""
        frames = f" {frame_ranges(self.frames)}" if self.frames else ""
        return str(self.episode.path), f"{self.key}{frames}: {self.reason}"


def frame_ranges(frames: Sequence[int]) -> str:
    """Frames as text: `frame 3`, or `frames 0-4, 9` for runs of consecutive frames."""
    runs: list[list[int]] = []
    for f in sorted(frames):
        if runs and f == runs[-1][1] + 1:
            runs[-1][1] = f
        else:
            runs.append([f, f])
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
    return f"frame{'s' if len(frames) > 1 else ''} {text}"


def _grouped(episode: EpisodeInfo, key: str, bad: Iterable[tuple[int, str]]) -> list[FrameProblems]:
    by_reason: dict[str, list[int]] = defaultdict(list)
    for frame, reason in bad:
        by_reason[reason].append(frame)
    return [FrameProblems(episode, key, tuple(f), r) for r, f in by_reason.items()]


def _numeric_problems(episode: EpisodeInfo) -> list[FrameProblems]:
    reader = EpisodeReader(episode.path)
    problems: list[FrameProblems] = []
    for key in get_embodiment(episode.embodiment).numeric_keys:
        try:
            values = reader.read_numeric(key)
        except Exception as exc:
            problems.append(FrameProblems(episode, key, (), f"unreadable ({exc})"))
            continue
        if len(values) < episode.total_frames:
            frames = tuple(range(len(values), episode.total_frames))
            why = f"array holds {len(values)} frames, total_frames is {episode.total_frames}"
            problems.append(FrameProblems(episode, key, frames, why))
            continue
        bad, reasons = frame_faults(key, values)
        problems += _grouped(episode, key, ((int(f), reasons[f]) for f in bad.nonzero()[0]))
    try:
        reader.read_annotations()
    except Exception as exc:
        problems.append(FrameProblems(episode, "annotations", (), f"unreadable ({exc})"))
    return problems


def decodes(data: bytes) -> None:
    """Raise when `data` is not a JPEG the loader can decode (strict, at 1/8 scale)."""
    simplejpeg.decode_jpeg(data, colorspace="RGB", fastdct=True, min_height=1, min_width=1)


def _jpeg_problems(episode: EpisodeInfo, camera: str) -> list[FrameProblems]:
    reader = EpisodeReader(episode.path)
    bad: list[tuple[int, str]] = []
    for frame in range(episode.total_frames):
        try:
            decodes(reader.read_jpeg(camera, frame))
        except Exception as exc:
            bad.append((frame, str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)))
    return _grouped(episode, f"images.{camera}", bad)


def _cameras(episode: EpisodeInfo) -> list[str]:
    return sorted(
        p.name.removeprefix("images.")
        for p in episode.path.iterdir()
        if p.name.startswith("images.") and p.is_dir()
    )


def _check(episode: EpisodeInfo, camera: str | None) -> list[FrameProblems]:
    return _numeric_problems(episode) if camera is None else _jpeg_problems(episode, camera)


def deep_problems(
    episodes: Sequence[EpisodeInfo], *, workers: int | None = None, progress: bool = True
) -> list[FrameProblems]:
    """Every bad frame of every episode: numeric values and every camera's JPEGs.

    Runs on `workers` threads (default: one per CPU; decoding releases the GIL), with a
    progress bar over frames.
    """
    jobs = [(e, None) for e in episodes] + [(e, c) for e in episodes for c in _cameras(e)]
    total = sum(e.total_frames for e, _ in jobs)
    problems: list[FrameProblems] = []
    with (
        ThreadPoolExecutor(workers or os.cpu_count() or 1) as pool,
        tqdm(total=total, unit="frame", desc="checking", disable=not progress) as bar,
    ):
        futures = {pool.submit(_check, e, c): (e, c) for e, c in jobs}
        for future in as_completed(futures):
            episode, camera = futures[future]
            try:
                problems += future.result()
            except Exception as exc:  # an episode broken past reading at all
                key = f"images.{camera}" if camera else "*"
                problems.append(FrameProblems(episode, key, (), f"unreadable ({exc})"))
            bar.update(episode.total_frames)
    return sorted(problems, key=lambda p: (str(p.episode.path), p.key, p.frames))
