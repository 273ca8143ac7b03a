"""Property tests: every conversion against scipy's Rotation, SLERP, frames, keypoints."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays
from scipy.spatial.transform import Rotation, Slerp

from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.geometry import rotations as rot
from polymimic_data.geometry.poses import (
    express_in,
    matrix_to_pose,
    points_in_frame,
    pose_to_matrix,
)
from polymimic_data.samples.windows import assemble
from polymimic_data.synthetic.hand_keypoints import hand_keypoints_in_reference

finite = st.floats(-1.0, 1.0, allow_nan=False, width=64)
quats = arrays(np.float64, (5, 4), elements=finite).filter(
    lambda q: (np.linalg.norm(q, axis=1) > 0.1).all()
)
points = arrays(np.float64, (5, 3), elements=st.floats(-2.0, 2.0, allow_nan=False, width=64))


def _scipy(q: np.ndarray) -> Rotation:
    return Rotation.from_quat(q, scalar_first=True)


def _same_rotation(q1: np.ndarray, q2: np.ndarray) -> None:
    np.testing.assert_allclose(np.abs(np.sum(q1 * q2, -1)), 1.0, atol=1e-9)


@given(quats)
def test_quaternion_and_matrix_match_scipy_both_ways(q: np.ndarray) -> None:
    np.testing.assert_allclose(rot.quat_to_matrix(q), _scipy(q).as_matrix(), atol=1e-9)
    back = rot.matrix_to_quat(_scipy(q).as_matrix())
    _same_rotation(back, q / np.linalg.norm(q, axis=1, keepdims=True))
    assert (back[:, 0] >= 0).all()


@pytest.mark.filterwarnings("ignore:Gimbal lock")  # scipy's warning; ours sets roll to 0 too
@given(quats)
def test_euler_is_intrinsic_zyx_like_scipy(q: np.ndarray) -> None:
    r = _scipy(q)
    ypr = rot.convert(q, "quaternion", "euler")
    np.testing.assert_allclose(rot.euler_to_matrix(ypr), r.as_matrix(), atol=1e-6)
    np.testing.assert_allclose(rot.euler_to_matrix(r.as_euler("ZYX")), r.as_matrix(), atol=1e-6)


@given(quats, arrays(np.float64, (5, 6), elements=st.floats(-0.1, 0.1, allow_nan=False, width=64)))
def test_rot6d_round_trips_and_gram_schmidt_repairs_noise(q: np.ndarray, noise: np.ndarray) -> None:
    m = _scipy(q).as_matrix()
    six = rot.matrix_to_rot6d(m)
    np.testing.assert_allclose(rot.rot6d_to_matrix(six), m, atol=1e-9)
    repaired = rot.rot6d_to_matrix(six + noise)
    np.testing.assert_allclose(
        repaired @ np.swapaxes(repaired, 1, 2), np.broadcast_to(np.eye(3), (5, 3, 3)), atol=1e-9
    )
    np.testing.assert_allclose(np.linalg.det(repaired), 1.0, atol=1e-9)


@given(
    quats,
    st.sampled_from(["quaternion", "euler", "rot6d", "matrix"]),
    st.sampled_from(["quaternion", "euler", "rot6d", "matrix"]),
)
def test_every_conversion_and_its_inverse_keep_the_rotation(q: np.ndarray, a: str, b: str) -> None:
    start = rot.convert(q, "quaternion", a)
    there = rot.convert(start, a, b)
    again = rot.convert(there, b, a)
    np.testing.assert_allclose(rot.to_matrix(again, a), rot.to_matrix(start, a), atol=1e-7)
    np.testing.assert_allclose(rot.to_matrix(there, b), _scipy(q).as_matrix(), atol=1e-7)


@given(quats, st.floats(0.0, 1.0))
@example(np.array([[1.0, 1, 0, 0], [-1, 1, 0, 0], *[[1.0, 0, 0, 0]] * 3]), 0.5)  # 180 apart
def test_slerp_endpoints_and_midpoints_match_scipy(q: np.ndarray, t: float) -> None:
    q0, q1 = q[0] / np.linalg.norm(q[0]), q[1] / np.linalg.norm(q[1])
    _same_rotation(rot.slerp(q0, q1, 0.0), q0)
    _same_rotation(rot.slerp(q0, q1, 1.0), q1)
    # Rotations 180 degrees apart (orthogonal quaternions) have two shortest arcs, each
    # right: scipy and ours may take either, so the midpoints are compared short of that.
    assume(abs(np.dot(q0, q1)) > 1e-6)
    expected = Slerp([0, 1], _scipy(np.stack([q0, q1])))([t]).as_quat(scalar_first=True)[0]
    _same_rotation(rot.slerp(q0, q1, t), expected)


@given(quats)
def test_resampled_quaternions_are_sign_continuous(q: np.ndarray) -> None:
    flipped = (
        q * np.where(np.arange(5) % 2, -1, 1)[:, None]
    )  # the same rotations, signs alternating
    out = rot.resample_quaternions(
        flipped / np.linalg.norm(flipped, axis=1, keepdims=True), np.linspace(0, 4, 17)
    )
    assert (np.sum(out[1:] * out[:-1], -1) >= -1e-9).all()
    for k in range(5):
        _same_rotation(out[4 * k], q[k] / np.linalg.norm(q[k]))


@given(quats, points)
def test_a_pose_in_its_own_frame_is_the_identity(q: np.ndarray, p: np.ndarray) -> None:
    pose = np.concatenate([p, q / np.linalg.norm(q, axis=1, keepdims=True)], 1)
    np.testing.assert_allclose(
        express_in(pose, pose), np.tile([0, 0, 0, 1.0, 0, 0, 0], (5, 1)), atol=1e-9
    )
    np.testing.assert_allclose(matrix_to_pose(pose_to_matrix(pose))[:, :3], p, atol=1e-12)
    np.testing.assert_allclose(points_in_frame(pose, p[:, None, :])[:, 0], 0.0, atol=1e-9)


@settings(max_examples=30)
@given(
    quats,
    points,
    arrays(np.float64, (5, 63), elements=st.floats(-1.0, 1.0, allow_nan=False, width=64)),
)
def test_hand_keypoint_layout_round_trips(
    q: np.ndarray, p: np.ndarray, keypoints: np.ndarray
) -> None:
    unit = q / np.linalg.norm(q, axis=1, keepdims=True)
    head = np.concatenate([p[:1], unit[:1]], 1)[0]
    arrays_ = {
        "left.obs_wrist_pose": np.concatenate([p, unit], 1),
        "right.obs_wrist_pose": np.concatenate([p[::-1], unit[::-1]], 1),
        "left.obs_keypoints": keypoints,
        "right.obs_keypoints": keypoints[::-1].copy(),
        "obs_head_pose": np.tile(head, (5, 1)),
    }
    recipe = get_embodiment("aria_bimanual").recipe("human_keypoints_rot6d")
    vector = assemble(recipe, recipe.state, arrays_, np.arange(5), head).astype(np.float64)
    assert vector.shape == (5, 144)
    in_head = hand_keypoints_in_reference(vector)
    expected = points_in_frame(np.tile(head, (5, 1)), keypoints.reshape(5, 21, 3))
    np.testing.assert_allclose(in_head["left"], expected, atol=1e-4)  # float32 layout
