"""Group metrics mean the same in every frame and every rotation representation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from polymimic_data.geometry import (
    convert,
    euler_to_matrix,
    layout_from_widths,
    matrix_to_quat,
    quat_to_matrix,
)
from polymimic_eval.group_metrics import group_metrics, step_errors

B, T = 3, 5


def _layout(rotation: str, width: int):
    return layout_from_widths(
        f"hand_{rotation}",
        [
            ("wrist_position", "position", 3),
            ("wrist_rotation", rotation, width),
            ("keypoints", "keypoints", 63),
            ("gripper", "gripper", 1),
        ],
    )


def _chunks(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Pred and truth: positions, unit quaternions, 21 keypoints, a gripper."""

    def one() -> dict[str, np.ndarray]:
        q = rng.normal(size=(B, T, 4))
        return {
            "position": rng.normal(size=(B, T, 3)),
            "quaternion": q / np.linalg.norm(q, axis=-1, keepdims=True),
            "keypoints": rng.normal(size=(B, T, 21, 3)),
            "gripper": rng.uniform(size=(B, T, 1)),
        }

    return {"pred": one(), "true": one()}  # type: ignore[dict-item]


def _vector(parts: dict[str, np.ndarray], rotation: str) -> torch.Tensor:
    rot = convert(parts["quaternion"], "quaternion", rotation)
    keypoints = parts["keypoints"].reshape(B, T, 63)
    flat = np.concatenate([parts["position"], rot, keypoints, parts["gripper"]], -1)
    return torch.from_numpy(flat)


def _moved(parts: dict[str, np.ndarray], rotation: np.ndarray, shift: np.ndarray) -> dict:
    """Every pose and point expressed after one rigid transform of the world."""
    frames = quat_to_matrix(parts["quaternion"])
    return {
        "position": parts["position"] @ rotation.T + shift,
        "quaternion": matrix_to_quat(rotation @ frames),
        "keypoints": parts["keypoints"] @ rotation.T + shift,
        "gripper": parts["gripper"],
    }


def _metrics(chunks: dict, rotation: str, mask: torch.Tensor) -> dict[str, float]:
    width = {"quaternion": 4, "euler": 3, "rot6d": 6}[rotation]
    out = group_metrics(
        _vector(chunks["pred"], rotation),
        _vector(chunks["true"], rotation),
        mask,
        _layout(rotation, width),
    )
    return {k: float(v) for k, v in out.items()}


MASK = torch.tensor([[True] * 5, [True] * 3 + [False] * 2, [True] + [False] * 4])


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31), st.floats(-math.pi, math.pi), st.floats(-1.5, 1.5))
def test_a_rigid_transform_of_both_chunks_changes_no_geometric_metric(
    seed: int, yaw: float, pitch: float
) -> None:
    rng = np.random.default_rng(seed)
    chunks = _chunks(rng)
    rotation = euler_to_matrix(np.array([yaw, pitch, rng.uniform(-math.pi, math.pi)]))
    shift = rng.normal(size=3) * 5
    moved = {k: _moved(v, rotation, shift) for k, v in chunks.items()}
    before, after = _metrics(chunks, "quaternion", MASK), _metrics(moved, "quaternion", MASK)
    for key in before:
        if "mse" not in key and not key.startswith("gripper"):  # MSE is not a frame-free metric
            assert after[key] == pytest.approx(before[key], rel=1e-6, abs=1e-6), key


@pytest.mark.parametrize("rotation", ["euler", "rot6d"])
def test_rotation_metrics_do_not_depend_on_the_representation(rotation: str) -> None:
    chunks = _chunks(np.random.default_rng(0))
    ours, theirs = _metrics(chunks, "quaternion", MASK), _metrics(chunks, rotation, MASK)
    for key in ("wrist_rotation_angle_deg", "wrist_rotation_final_angle_deg"):
        assert theirs[key] == pytest.approx(ours[key], rel=1e-6), key


def test_known_errors_come_out_in_their_units() -> None:
    layout = _layout("quaternion", 4)
    truth = torch.zeros(1, 2, layout.dim, dtype=torch.float64)
    truth[..., 3] = 1.0  # identity quaternion
    pred = truth.clone()
    pred[..., 0:3] = torch.tensor([3.0, 4.0, 0.0])  # 5 m off
    half = math.sqrt(0.5)
    pred[:, 1, 3:7] = torch.tensor([half, 0.0, 0.0, half])  # 90 degrees about z, last step
    pred[..., 7:70] = 2.0  # every keypoint off by 2 * sqrt(3)
    pred[..., 70] = 0.25
    out = group_metrics(pred, truth, torch.ones(1, 2, dtype=torch.bool), layout)
    assert float(out["wrist_position_error"]) == pytest.approx(5.0)
    assert float(out["wrist_rotation_angle_deg"]) == pytest.approx(45.0)  # mean of 0 and 90
    assert float(out["wrist_rotation_final_angle_deg"]) == pytest.approx(90.0)
    assert float(out["keypoints_error"]) == pytest.approx(2 * math.sqrt(3))
    assert float(out["gripper_error"]) == pytest.approx(0.25)
    assert float(out["wrist_position_mse"]) == pytest.approx(25.0 / 3)


def test_the_final_step_is_each_samples_last_valid_one() -> None:
    layout = layout_from_widths("g", [("gripper", "gripper", 1)])
    truth = torch.zeros(2, 3, 1)
    pred = torch.tensor([[[1.0], [2.0], [3.0]], [[1.0], [4.0], [100.0]]])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    out = group_metrics(pred, truth, mask, layout)
    assert float(out["gripper_final_error"]) == pytest.approx((3.0 + 4.0) / 2)
    assert float(out["gripper_error"]) == pytest.approx((1 + 2 + 3 + 1 + 4) / 5)


def test_step_errors_are_a_curve_over_the_horizon_of_valid_samples() -> None:
    pred = torch.tensor([[[1.0], [2.0], [9.0]], [[3.0], [4.0], [5.0]]])
    mask = torch.tensor([[True, True, False], [True, True, False]])
    curve = step_errors(pred, torch.zeros_like(pred), mask)
    assert curve[:2].tolist() == [2.0, 3.0] and math.isnan(float(curve[2]))
