"""The 144-D wrist-first hand layout, read back: keypoints in the reference (head) frame."""

from __future__ import annotations

import numpy as np

from polymimic_data.geometry.poses import pose_to_matrix
from polymimic_data.geometry.rotations import matrix_to_quat, rot6d_to_matrix

HAND_WIDTH = 3 + 6 + 63
SIDES = ("left", "right")


def hand_keypoints_in_reference(vector: np.ndarray) -> dict[str, np.ndarray]:
    """(..., 144) -> per side (..., 21, 3) keypoints in the frame the wrists are given in."""
    out = {}
    for i, side in enumerate(SIDES):
        hand = vector[..., i * HAND_WIDTH : (i + 1) * HAND_WIDTH]
        wrist = np.concatenate([hand[..., :3], matrix_to_quat(rot6d_to_matrix(hand[..., 3:9]))], -1)
        m = pose_to_matrix(wrist)
        local = hand[..., 9:].reshape(*hand.shape[:-1], 21, 3)
        out[side] = np.einsum("...ij,...nj->...ni", m[..., :3, :3], local) + m[..., None, :3, 3]
    return out
