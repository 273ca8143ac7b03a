"""What makes a stored value bad: NaN or inf, the not-detected sentinel, a broken quaternion.

The loader (samples.faults) and `validate --deep` (episodes.checks) judge by these alone.
"""

from __future__ import annotations

import numpy as np

NOT_DETECTED = 1e8  # human pipelines store missing detections as 1e9


QUATERNION_TOLERANCE = 0.05


_BAD_QUATERNION = "zero or non-unit quaternion"
# a hand out of view: allowed in human data (DESIGN: "Missing detections may be stored as
# 1e9"), so `validate --deep` lists these frames without failing; the loader still drops them
NOT_DETECTED_REASON = "not-detected sentinel (1e9)"


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
    bad = nonfinite | sentinel | bad_quat
    if not (nonfinite.any() or sentinel.any()):  # the common case, at each episode's open
        return bad, [_BAD_QUATERNION] * len(values)
    reasons = np.where(
        nonfinite,
        "NaN or inf",
        np.where(sentinel, NOT_DETECTED_REASON, _BAD_QUATERNION),
    )
    return bad, reasons.tolist()
