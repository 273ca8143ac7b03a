"""Rotation representations and conversions, vectorised over any leading shape.

Quaternions are (w, x, y, z); yaw-pitch-roll is intrinsic Z-Y'-X'' in radians, returned
as (yaw, pitch, roll); rot6d is the first two columns of the rotation matrix (Zhou et al.
2019), mapped back to a matrix by Gram-Schmidt. Every conversion goes through the matrix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

ROTATION_WIDTHS = {"quaternion": 4, "euler": 3, "rot6d": 6, "matrix": 9}
_EPS = 1e-12


def quat_to_matrix(q: np.ndarray) -> np.ndarray:
    """(..., 4) quaternions, normalised first, to (..., 3, 3) rotation matrices."""
    q = np.asarray(q, dtype=np.float64)
    q = q / np.maximum(np.linalg.norm(q, axis=-1, keepdims=True), _EPS)
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.stack(
        [
            np.stack([1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)], -1),
            np.stack([2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)], -1),
            np.stack([2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)], -1),
        ],
        -2,
    )


def matrix_to_quat(m: np.ndarray) -> np.ndarray:
    """Unit quaternions with w >= 0, by the numerically stable branch per element."""
    m = np.asarray(m, dtype=np.float64)
    m00, m11, m22 = m[..., 0, 0], m[..., 1, 1], m[..., 2, 2]
    # Four candidate solutions, each accurate where its leading term is largest.
    candidates = np.stack(
        [
            np.stack(
                [
                    1 + m00 + m11 + m22,
                    m[..., 2, 1] - m[..., 1, 2],
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 1, 0] - m[..., 0, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 2, 1] - m[..., 1, 2],
                    1 + m00 - m11 - m22,
                    m[..., 0, 1] + m[..., 1, 0],
                    m[..., 0, 2] + m[..., 2, 0],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 0, 2] - m[..., 2, 0],
                    m[..., 0, 1] + m[..., 1, 0],
                    1 - m00 + m11 - m22,
                    m[..., 1, 2] + m[..., 2, 1],
                ],
                -1,
            ),
            np.stack(
                [
                    m[..., 1, 0] - m[..., 0, 1],
                    m[..., 0, 2] + m[..., 2, 0],
                    m[..., 1, 2] + m[..., 2, 1],
                    1 - m00 - m11 + m22,
                ],
                -1,
            ),
        ],
        -2,
    )
    best = np.argmax(
        np.stack(
            [1 + m00 + m11 + m22, 1 + m00 - m11 - m22, 1 - m00 + m11 - m22, 1 - m00 - m11 + m22], -1
        ),
        -1,
    )
    q = np.take_along_axis(candidates, best[..., None, None], axis=-2)[..., 0, :]
    q = q / np.linalg.norm(q, axis=-1, keepdims=True)
    return np.where(q[..., :1] < 0, -q, q)


def euler_to_matrix(ypr: np.ndarray) -> np.ndarray:
    """Intrinsic ZYX: R = Rz(yaw) @ Ry(pitch) @ Rx(roll)."""
    yaw, pitch, roll = np.moveaxis(np.asarray(ypr, dtype=np.float64), -1, 0)
    cy, sy, cp, sp, cr, sr = (
        np.cos(yaw),
        np.sin(yaw),
        np.cos(pitch),
        np.sin(pitch),
        np.cos(roll),
        np.sin(roll),
    )
    return np.stack(
        [
            np.stack([cy * cp, cy * sp * sr - sy * cr, cy * sp * cr + sy * sr], -1),
            np.stack([sy * cp, sy * sp * sr + cy * cr, sy * sp * cr - cy * sr], -1),
            np.stack([-sp, cp * sr, cp * cr], -1),
        ],
        -2,
    )


def matrix_to_euler(m: np.ndarray) -> np.ndarray:
    """(yaw, pitch, roll) with pitch in [-pi/2, pi/2]; at gimbal lock roll is set to 0."""
    m = np.asarray(m, dtype=np.float64)
    cos_pitch = np.hypot(m[..., 0, 0], m[..., 1, 0])  # atan2 keeps precision near +-pi/2
    pitch = np.arctan2(-m[..., 2, 0], cos_pitch)
    locked = cos_pitch < 1e-8  # balances the two branches: error ~1e-8 either way
    yaw = np.where(
        locked, np.arctan2(-m[..., 0, 1], m[..., 1, 1]), np.arctan2(m[..., 1, 0], m[..., 0, 0])
    )
    roll = np.where(locked, 0.0, np.arctan2(m[..., 2, 1], m[..., 2, 2]))
    return np.stack([yaw, pitch, roll], -1)


def matrix_to_rot6d(m: np.ndarray) -> np.ndarray:
    """The first two columns, as (c1, c2) concatenated."""
    m = np.asarray(m, dtype=np.float64)
    return np.concatenate([m[..., :, 0], m[..., :, 1]], -1)


def rot6d_to_matrix(r: np.ndarray) -> np.ndarray:
    """Gram-Schmidt on the two columns; the third is their cross product."""
    r = np.asarray(r, dtype=np.float64)
    a, b = r[..., :3], r[..., 3:6]
    c1 = a / np.maximum(np.linalg.norm(a, axis=-1, keepdims=True), _EPS)
    b = b - np.sum(c1 * b, -1, keepdims=True) * c1
    c2 = b / np.maximum(np.linalg.norm(b, axis=-1, keepdims=True), _EPS)
    return np.stack([c1, c2, np.cross(c1, c2)], -1)


_TO_MATRIX: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "quaternion": quat_to_matrix,
    "euler": euler_to_matrix,
    "rot6d": rot6d_to_matrix,
    "matrix": lambda m: np.asarray(m, dtype=np.float64).reshape(*np.shape(m)[:-1], 3, 3),
}
_FROM_MATRIX: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "quaternion": matrix_to_quat,
    "euler": matrix_to_euler,
    "rot6d": matrix_to_rot6d,
    "matrix": lambda m: m.reshape(*m.shape[:-2], 9),
}


def _converter(
    table: dict[str, Callable[[np.ndarray], np.ndarray]], representation: str
) -> Callable[[np.ndarray], np.ndarray]:
    if representation not in table:
        raise ValueError(f"unknown rotation representation {representation!r}; use {sorted(table)}")
    return table[representation]


def to_matrix(values: np.ndarray, representation: str) -> np.ndarray:
    """Rotations in `representation` to (..., 3, 3) matrices."""
    return _converter(_TO_MATRIX, representation)(values)


def from_matrix(m: np.ndarray, representation: str) -> np.ndarray:
    """(..., 3, 3) rotation matrices to `representation` (`matrix`: flattened to 9)."""
    return _converter(_FROM_MATRIX, representation)(m)


def convert(values: np.ndarray, source: str, target: str) -> np.ndarray:
    """Any representation to any other (`matrix` is flattened to 9 when a target)."""
    if source == target:
        return np.asarray(values, dtype=np.float64)
    return from_matrix(to_matrix(values, source), target)


def geodesic_angle(m1: np.ndarray, m2: np.ndarray) -> np.ndarray:
    """The angle (radians) of the rotation taking m1 to m2."""
    trace = np.einsum("...ij,...ij->...", m1, m2)  # trace(m1^T m2)
    return np.arccos(np.clip((trace - 1.0) / 2.0, -1.0, 1.0))


def continuous_quaternions(q: np.ndarray) -> np.ndarray:
    """Flip signs along time (axis -2) so consecutive quaternions are in one hemisphere."""
    q = np.asarray(q, dtype=np.float64).copy()
    if q.shape[-2] < 2:
        return q
    dots = np.sum(q[..., 1:, :] * q[..., :-1, :], -1)
    flips = np.cumprod(np.where(dots < 0, -1.0, 1.0), axis=-1)
    q[..., 1:, :] *= flips[..., None]
    return q


def slerp(q0: np.ndarray, q1: np.ndarray, t: np.ndarray | float) -> np.ndarray:
    """Spherical interpolation along the shorter arc; t broadcasts against q's leading shape."""
    q0, q1 = np.asarray(q0, dtype=np.float64), np.asarray(q1, dtype=np.float64)
    t = np.asarray(t, dtype=np.float64)[..., None]
    dot = np.sum(q0 * q1, -1, keepdims=True)
    q1 = np.where(dot < 0, -q1, q1)
    dot = np.abs(dot)
    theta = np.arccos(np.clip(dot, -1.0, 1.0))
    sin = np.sin(theta)
    near = sin < 1e-6
    safe = np.where(near, 1.0, sin)
    w0 = np.where(near, 1 - t, np.sin((1 - t) * theta) / safe)
    w1 = np.where(near, t, np.sin(t * theta) / safe)
    out = w0 * q0 + w1 * q1
    return out / np.linalg.norm(out, axis=-1, keepdims=True)


def resample_quaternions(q: np.ndarray, positions: np.ndarray) -> np.ndarray:
    """Quaternions (T, 4) read at fractional frame positions (N,) by SLERP, sign-continuous."""
    q = continuous_quaternions(q)
    positions = np.clip(np.asarray(positions, dtype=np.float64), 0, len(q) - 1)
    lo = np.floor(positions).astype(int)
    hi = np.minimum(lo + 1, len(q) - 1)
    return continuous_quaternions(slerp(q[lo], q[hi], positions - lo))
