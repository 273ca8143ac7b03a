"""Poses (xyz + quaternion w, x, y, z) as transforms, and expressing them in other frames."""

from __future__ import annotations

import numpy as np

from polymimic_data.geometry.rotations import matrix_to_quat, quat_to_matrix


def pose_to_matrix(pose: np.ndarray) -> np.ndarray:
    """(..., 7) poses to (..., 4, 4) homogeneous transforms (frame -> parent)."""
    pose = np.asarray(pose, dtype=np.float64)
    out = np.zeros((*pose.shape[:-1], 4, 4))
    out[..., :3, :3] = quat_to_matrix(pose[..., 3:7])
    out[..., :3, 3] = pose[..., :3]
    out[..., 3, 3] = 1.0
    return out


def matrix_to_pose(m: np.ndarray) -> np.ndarray:
    """(..., 4, 4) homogeneous transforms to (..., 7) poses: the inverse of pose_to_matrix."""
    return np.concatenate([m[..., :3, 3], matrix_to_quat(m[..., :3, :3])], -1)


def invert(m: np.ndarray) -> np.ndarray:
    """Inverse of rigid transforms (..., 4, 4)."""
    out = np.zeros_like(m)
    rt = np.swapaxes(m[..., :3, :3], -1, -2)
    out[..., :3, :3] = rt
    out[..., :3, 3] = -np.einsum("...ij,...j->...i", rt, m[..., :3, 3])
    out[..., 3, 3] = 1.0
    return out


def express_in(reference: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Poses (..., 7) given in a parent frame, expressed in the `reference` pose's frame."""
    return matrix_to_pose(invert(pose_to_matrix(reference)) @ pose_to_matrix(poses))


def points_in_frame(frame: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Points (..., N, 3) in a parent frame, expressed in the frame of pose (..., 7)."""
    m = invert(pose_to_matrix(frame))
    return np.einsum("...ij,...nj->...ni", m[..., :3, :3], points) + m[..., None, :3, 3]
