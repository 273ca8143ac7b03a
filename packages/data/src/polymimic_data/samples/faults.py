"""Bad data found while loading: what it was, where, and what to do about it.

A fault never takes a run down by itself: the sample is replaced by a valid one (from
another episode where there is one) and the fault is reported with the episode hash,
key, frame and reason. A sample counts once however many tries its replacement took.
An episode whose file is broken (a missing or truncated shard, an unreadable group) or
that has too many bad frames is dropped with one warning, and its samples are replaced
silently from then on. A run whose share of bad samples passes its limit stops with an
error that lists the worst episodes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from polymimic_data.store.zarr_chunks import ChunkFileError

log = logging.getLogger(__name__)

EPISODE_DROPPED = "episode dropped"


@dataclass(frozen=True)
class DataFault:
    """One piece of bad data: the episode, key and frame it is at, and why it is bad."""

    episode: str
    key: str
    frame: int
    reason: str
    episode_dropped: bool = False  # the fault made the loader drop the whole episode

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def report_key(self) -> tuple[str, str, int]:
        """What makes two faults the same news.

        A dropped episode is news once, whichever loader worker dropped it at which frame.
        """
        if self.episode_dropped:
            return self.episode, "", -1
        return self.episode, self.key, self.frame


class SampleFault(Exception):
    """A sample cannot be built; carries the fault to report.

    `whole_episode`: the fault is not of one frame (an unreadable group, a missing key, a
    broken shard), so every sample of the episode would meet it.
    """

    def __init__(self, fault: DataFault, *, whole_episode: bool = False) -> None:
        super().__init__(f"{fault.episode} {fault.key} frame {fault.frame}: {fault.reason}")
        self.fault = fault
        self.whole_episode = whole_episode


def read_fault(episode: str, key: str, frame: int, exc: Exception) -> SampleFault:
    """The fault of a failed read: of the whole episode when its file, not a frame, is broken."""
    missing_key = isinstance(exc, KeyError)
    reason = str(exc.args[0]) if missing_key and exc.args else str(exc)
    whole = missing_key or (isinstance(exc, ChunkFileError) and exc.whole_file)
    return SampleFault(DataFault(episode, key, frame, reason), whole_episode=whole)


class BadDataError(RuntimeError):
    """The share of bad samples passed the configured limit."""


class NoValidSampleError(RuntimeError):
    """Every sample tried as a stand-in for a bad one was bad too."""


class EpisodeFaults:
    """Per dataset copy (one per loader worker): what is known bad, and what stands in.

    Holds the bad frames seen per episode and the dropped episodes. An episode is dropped
    at its first whole-episode fault, or once it has more bad frames than
    `max_bad_fraction` of its length (at least one is always tolerated).
    """

    def __init__(
        self,
        hashes: Sequence[str],
        frames: Sequence[int],
        *,
        max_bad_fraction: float,
        describe: Callable[[int], str] = str,
    ) -> None:
        self._hashes = list(hashes)
        self._frames = list(frames)
        self.max_bad_fraction = max_bad_fraction
        self._describe = describe
        self.bad_frames: dict[int, set[int]] = {}
        self.dropped: set[int] = set()

    def check_not_dropped(self, episode: int, frame: int) -> None:
        if episode in self.dropped:
            raise SampleFault(DataFault(self._hashes[episode], "*", frame, EPISODE_DROPPED))

    def note(self, exc: SampleFault, episode: int) -> DataFault | None:
        """Record a fault; the fault to report, or None when the episode was already dropped."""
        if episode in self.dropped:
            return None
        fault = exc.fault
        bad = self.bad_frames.setdefault(episode, set())
        bad.add(fault.frame)
        limit = max(1.0, self.max_bad_fraction * self._frames[episode])
        if exc.whole_episode or len(bad) > limit:
            self.dropped.add(episode)
            fault = DataFault(fault.episode, fault.key, fault.frame, fault.reason, True)
            log.warning(
                "dropping episode %s (%s): %s; last: %s frame %d: %s",
                fault.episode,
                self._describe(episode),
                "its file is broken" if exc.whole_episode else f"{len(bad)} bad frames",
                fault.key,
                fault.frame,
                fault.reason,
            )
        return fault

    def replacement(
        self, index: int, attempt: int, size: int, episode_of: Callable[[int], int]
    ) -> int:
        """A stand-in for sample `index`, deterministic in (index, attempt).

        Drawn from the other, undropped episodes where there are any: the frames next to a
        bad one are likely bad too (a broken shard holds many).
        """
        rng = np.random.default_rng([index, attempt])
        bad_episode = episode_of(index)
        candidate = int(rng.integers(size))
        for _ in range(16):
            episode = episode_of(candidate)
            if episode != bad_episode and episode not in self.dropped:
                break
            candidate = int(rng.integers(size))
        return candidate


class FaultLedger:
    """Counts bad samples against samples seen, in the main process; summarises each epoch.

    The share of bad samples is judged once `min_samples` have been seen (a single bad
    sample in the first batch says little about a data set). Each bad frame is logged the
    first time it is met, up to `max_reports` of them; after that they are only counted, in
    each epoch's summary (human data misses a hand in many frames: a cotrained run on 500
    hands episodes logged 866 such lines in its first 13 minutes before this cap).
    """

    def __init__(
        self, *, max_bad_fraction: float, min_samples: int = 1000, max_reports: int = 20
    ) -> None:
        self.max_bad_fraction = max_bad_fraction
        self.min_samples = min_samples
        self.max_reports = max_reports
        self.samples = 0
        self.bad_samples = 0
        self.faults: list[DataFault] = []
        self._reported: set[tuple[str, str, int]] = set()
        self._epoch_start = 0

    def record(
        self, replaced: Iterable[Iterable[Mapping[str, Any] | DataFault]], samples: int
    ) -> None:
        """One batch: `replaced` holds, per replaced sample, the faults met replacing it."""
        for faults in replaced:
            new = [f if isinstance(f, DataFault) else DataFault(**f) for f in faults]
            self.bad_samples += bool(new)
            for fault in new:
                self._report(fault)
            self.faults += new
        self.samples += samples

    def _report(self, fault: DataFault) -> None:
        """Log a bad frame the first time it is met, up to `max_reports` of them.

        The next new one logs the notice that the rest are only counted.
        """
        if fault.report_key in self._reported or len(self._reported) > self.max_reports:
            return  # old news, or past the cap (the notice took the last key)
        self._reported.add(fault.report_key)
        if len(self._reported) <= self.max_reports:
            log.warning(
                "bad data replaced: episode %s, key %s, frame %d: %s%s",
                fault.episode,
                fault.key,
                fault.frame,
                fault.reason,
                " (episode dropped)" if fault.episode_dropped else "",
            )
        else:
            log.warning(
                "more bad data replaced than the %d frames logged so far: the rest are "
                "counted in each epoch's summary (`polymimic-data validate ROOT --deep` "
                "lists every one)",
                self.max_reports,
            )

    @property
    def bad_fraction(self) -> float:
        return self.bad_samples / max(self.samples, 1)

    def check(self) -> None:
        if self.samples >= self.min_samples and self.bad_fraction > self.max_bad_fraction:
            raise BadDataError(
                f"{self.bad_samples} of {self.samples} samples were bad "
                f"({self.bad_fraction:.1%} > limit {self.max_bad_fraction:.1%}); worst episodes:\n"
                + self._table(self.faults)
                + "\nFix or exclude these episodes (`polymimic-data validate ROOT --deep` lists "
                "every bad frame), or raise data.faults.max_bad_fraction."
            )

    def end_epoch(self, what: str = "this epoch") -> str:
        """A summary of the faults since the last summary (empty when there were none)."""
        faults = self.faults[self._epoch_start :]
        self._epoch_start = len(self.faults)
        if not faults:
            return ""
        summary = f"{len(faults)} bad frames met and replaced {what}:\n{self._table(faults)}"
        log.warning(summary)
        return summary

    @staticmethod
    def _table(faults: list[DataFault], rows: int = 10) -> str:
        by_episode = Counter(
            (f.episode, f.key, f.reason + (" (episode dropped)" if f.episode_dropped else ""))
            for f in faults
        )
        return "\n".join(
            f"  {episode}  {key}  {reason}: {count}"
            for (episode, key, reason), count in by_episode.most_common(rows)
        )
