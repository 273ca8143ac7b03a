"""Camera poses in the project's convention, and poses moved between the world and a camera.

polymimic's camera axes are +x right, +y down, +z forward (DESIGN.md); MuJoCo's cameras look
along their -z with +y up. A pose here is xyz + quaternion (w, x, y, z), as in episodes.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from polymimic_data.geometry import (
    express_in,
    matrix_to_pose,
    matrix_to_quat,
    pose_to_matrix,
    quat_to_matrix,
)
from polymimic_sim.tasks.rendering import is_pinhole

# MuJoCo's camera axes to the project's: x kept, y and z flipped (the same matrix both ways)
_FLIP = np.diag([1.0, -1.0, -1.0])


def look_at(eye: ArrayLike, target: ArrayLike) -> np.ndarray:
    """The rotation (3, 3) of a camera at `eye` looking at `target`, level (world +z is up)."""
    forward = np.asarray(target, np.float64) - np.asarray(eye, np.float64)
    forward /= np.linalg.norm(forward)
    right = np.cross(forward, [0.0, 0.0, 1.0])
    right /= np.linalg.norm(right)
    down = np.cross(forward, right)
    return np.stack([right, down, forward], axis=1)


def camera_pose(data: Any, camera_id: int) -> np.ndarray:
    """The pose (7,) of MuJoCo camera `camera_id` in the world, in the project's axes."""
    rotation = np.asarray(data.cam_xmat[camera_id], np.float64).reshape(3, 3) @ _FLIP
    return np.concatenate(
        [np.asarray(data.cam_xpos[camera_id], np.float64), matrix_to_quat(rotation)]
    )


def place_camera(model: Any, data: Any, camera_id: int, pose: np.ndarray) -> None:
    """Put a camera fixed to the world at `pose` (project axes) for the next render."""
    mujoco: Any = importlib.import_module("mujoco")  # (its stubs lack mj_camlight)

    model.cam_mode[camera_id] = mujoco.mjtCamLight.mjCAMLIGHT_FIXED
    model.cam_pos[camera_id] = pose[:3]
    model.cam_quat[camera_id] = matrix_to_quat(quat_to_matrix(pose[3:7]) @ _FLIP)
    mujoco.mj_camlight(model, data)


def world_to_camera(camera: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """World poses (..., 7) expressed in the frame of the camera at pose `camera` (7,)."""
    return express_in(camera, poses)


def camera_to_world(camera: np.ndarray, poses: np.ndarray) -> np.ndarray:
    """Poses (..., 7) in the frame of the camera at `camera` (7,), in the world."""
    return matrix_to_pose(pose_to_matrix(camera) @ pose_to_matrix(poses))


def project_view(
    model: Any, data: Any, view: Any, size: Sequence[int], points: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Where world points (..., 3) fall in a task's camera view: pixels (..., 2), in view.

    `view`: one of a task's `views` (rendering.View: a model camera, narrowed or not), in
    MuJoCo `model` and `data` as they stand; `size`: the frame's (H, W). The same pinhole
    the renderer draws with, so a point lands on its own pixels. ValueError for a camera
    its field of view does not set (orthographic, or a sensor's intrinsics).
    """
    if not is_pinhole(model, view.index):
        raise ValueError(f"camera {view.name!r}: orthographic or a sensor's; not a pinhole")
    return project(camera_pose(data, view.index), view.fovy_in(model), size, points)


def project(camera: np.ndarray, fovy_degrees: float, size: Sequence[int], points: np.ndarray):
    """Pixel coordinates (..., 2) of world points (..., 3) and whether each is in view."""
    height, width = (int(v) for v in size)
    inverse = np.linalg.inv(pose_to_matrix(camera))
    local = np.einsum("ij,...j->...i", inverse[:3, :3], points) + inverse[:3, 3]
    focal = height / 2 / np.tan(np.deg2rad(fovy_degrees) / 2)
    depth = np.maximum(local[..., 2], 1e-9)
    pixels = np.stack(
        [focal * local[..., 0] / depth + width / 2, focal * local[..., 1] / depth + height / 2], -1
    )
    inside = (
        (local[..., 2] > 1e-3)
        & (pixels[..., 0] >= 0)
        & (pixels[..., 0] < width)
        & (pixels[..., 1] >= 0)
        & (pixels[..., 1] < height)
    )
    return pixels, inside
