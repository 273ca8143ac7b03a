"""Bad data found while loading: what it was, where, and what to do about it.

A fault never takes a run down by itself: the sample is replaced by a valid one and the
fault is reported with the episode hash, key, frame and reason. An episode with too many
faults is dropped with a warning; a run whose bad fraction passes its limit stops with
an error that lists the worst episodes.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

log = logging.getLogger(__name__)

NOT_DETECTED = 1e8  # human pipelines store missing detections as 1e9
QUATERNION_TOLERANCE = 0.05


@dataclass(frozen=True)
class DataFault:
    episode: str
    key: str
    frame: int
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SampleFault(Exception):
    """A sample cannot be built; carries the fault to report."""

    def __init__(self, fault: DataFault) -> None:
        super().__init__(f"{fault.episode} {fault.key} frame {fault.frame}: {fault.reason}")
        self.fault = fault


class BadDataError(RuntimeError):
    """The share of bad samples passed the configured limit."""


def frame_faults(key: str, values: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """Per frame: is it bad, and why (vectorised over time). `values` is (T, D).

    `*_pose` keys (xyz + quaternion w, x, y, z) also have their quaternion checked.
    """
    quaternion = slice(3, 7) if key.endswith("_pose") else None
    flat = values.reshape(len(values), -1)
    finite = np.isfinite(flat)
    nonfinite = ~finite.all(1)
    clean = np.where(finite, flat, 0.0)
    sentinel = (np.abs(clean) >= NOT_DETECTED).any(1)
    bad_quat = np.zeros(len(values), dtype=bool)
    if quaternion is not None and flat.shape[1] >= quaternion.stop:
        with np.errstate(over="ignore", invalid="ignore"):
            norms = np.linalg.norm(clean[:, quaternion], axis=1)
        bad_quat = ~(np.abs(norms - 1.0) <= QUATERNION_TOLERANCE)
    reasons = np.where(
        nonfinite,
        "NaN or inf",
        np.where(sentinel, "not-detected sentinel (1e9)", "zero or non-unit quaternion"),
    )
    bad = nonfinite | sentinel | bad_quat
    return bad, reasons.tolist()


class FaultLedger:
    """Counts faults against samples seen, in the main process; summarises each epoch."""

    def __init__(self, *, max_bad_fraction: float) -> None:
        self.max_bad_fraction = max_bad_fraction
        self.samples = 0
        self.faults: list[DataFault] = []
        self._epoch_start = 0

    def record(self, faults: Iterable[Mapping[str, Any] | DataFault], samples: int) -> None:
        new = [f if isinstance(f, DataFault) else DataFault(**f) for f in faults]
        for fault in new:
            log.warning(
                "bad data replaced: episode %s, key %s, frame %d: %s", *asdict(fault).values()
            )
        self.faults += new
        self.samples += samples

    @property
    def bad_fraction(self) -> float:
        return len(self.faults) / max(self.samples, 1)

    def check(self) -> None:
        if self.samples and self.bad_fraction > self.max_bad_fraction:
            raise BadDataError(
                f"{len(self.faults)} of {self.samples} samples were bad "
                f"({self.bad_fraction:.1%} > limit {self.max_bad_fraction:.1%}); worst episodes:\n"
                + self._table(self.faults)
                + "\nFix or exclude these episodes (`polymimic-data validate ROOT` lists them), "
                "or raise data.faults.max_bad_fraction."
            )

    def end_epoch(self) -> str:
        """A summary of this epoch's faults (empty when there were none)."""
        faults = self.faults[self._epoch_start :]
        self._epoch_start = len(self.faults)
        if not faults:
            return ""
        summary = f"{len(faults)} bad samples replaced this epoch:\n{self._table(faults)}"
        log.warning(summary)
        return summary

    @staticmethod
    def _table(faults: list[DataFault], rows: int = 10) -> str:
        by_episode = Counter((f.episode, f.key, f.reason) for f in faults)
        return "\n".join(
            f"  {episode}  {key}  {reason}: {count}"
            for (episode, key, reason), count in by_episode.most_common(rows)
        )
