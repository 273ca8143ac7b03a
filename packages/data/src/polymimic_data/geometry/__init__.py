"""Geometry: rotations in every representation, poses and coordinate frames, channel layouts."""

from __future__ import annotations

from polymimic_data.geometry.layouts import (
    ChannelGroup,
    Layout,
    get_layout,
    layout_from_widths,
    register_layout,
)
from polymimic_data.geometry.poses import (
    express_in,
    invert,
    matrix_to_pose,
    points_in_frame,
    pose_to_matrix,
)
from polymimic_data.geometry.rotations import (
    ROTATION_WIDTHS,
    continuous_quaternions,
    convert,
    euler_to_matrix,
    from_matrix,
    geodesic_angle,
    matrix_to_euler,
    matrix_to_quat,
    matrix_to_rot6d,
    quat_to_matrix,
    resample_quaternions,
    rot6d_to_matrix,
    slerp,
    to_matrix,
)

__all__ = [
    "ROTATION_WIDTHS",
    "ChannelGroup",
    "Layout",
    "continuous_quaternions",
    "convert",
    "euler_to_matrix",
    "express_in",
    "from_matrix",
    "geodesic_angle",
    "get_layout",
    "invert",
    "layout_from_widths",
    "matrix_to_euler",
    "matrix_to_pose",
    "matrix_to_quat",
    "matrix_to_rot6d",
    "points_in_frame",
    "pose_to_matrix",
    "quat_to_matrix",
    "register_layout",
    "resample_quaternions",
    "rot6d_to_matrix",
    "slerp",
    "to_matrix",
]
