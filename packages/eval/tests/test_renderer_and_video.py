"""The keypoint renderer on synthetic geometry, the horizon plot, and videos read back."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from polymimic_data.embodiments import CameraIntrinsics
from polymimic_data.geometry import convert, euler_to_matrix, get_layout, layout_from_widths
from polymimic_eval import (
    layout_points,
    plot_step_errors,
    project,
    read_video_frames,
    render_overlay,
    video_rate,
    write_video,
)
from polymimic_eval.keypoint_renderer import (
    FINGER_COLOURS,
    FINGERS,
    PRED_COLOUR,
    TRUE_COLOUR,
)

INTRINSICS = CameraIntrinsics(fx=100, fy=100, cx=40, cy=32, width=80, height=64)
POSITION = layout_from_widths("l", [("left_position", "position", 3)])
HAND = layout_from_widths("h", [("left_keypoints", "keypoints", 63)])


def _render(layout, **chunks) -> np.ndarray:
    return render_overlay(
        np.zeros((64, 80, 3), np.uint8), INTRINSICS, layout, legend=False, **chunks
    )


def test_a_known_point_lands_on_its_known_pixel() -> None:
    pixels, visible = project(np.array([[0.1, 0.2, 2.0], [-0.2, -0.1, 1.0]]), INTRINSICS)
    np.testing.assert_allclose(pixels, [[45.0, 42.0], [20.0, 22.0]])
    assert visible.all()
    out = _render(POSITION, true=np.array([[0.1, 0.2, 2.0], [0.1, 0.2, 2.0]]))
    assert tuple(out[42, 45]) == TRUE_COLOUR
    lit = np.argwhere(out.any(-1))
    assert np.abs(lit - [42, 45]).max() <= 3  # nothing drawn anywhere else


def test_points_behind_the_camera_off_the_image_or_missing_are_skipped() -> None:
    points = np.array(
        [
            [0.1, 0.0, -1.0],  # behind
            [0.0, 0.0, 0.0],  # at the camera centre
            [5.0, 0.0, 1.0],  # right of the image
            [1e9, 1e9, 1e9],  # a missing detection
            [np.nan, 0.0, 1.0],
            [0.0, 0.0, 1.0],  # the one visible point
        ]
    )
    _, visible = project(points, INTRINSICS)
    assert visible.tolist() == [False] * 5 + [True]
    behind = np.array([[0.1, 0.0, -1.0], [-0.1, 0.0, -1.0], [0.0, 0.1, -2.0]])
    # Behind the camera, a naive projection (x / z) would land mirrored inside the image.
    assert not _render(POSITION, true=behind, pred=behind).any()
    # A path from a visible point to one behind the camera is not drawn either.
    half = np.array([[0.0, 0.0, 1.0], [0.1, 0.0, -1.0]])
    assert not _render(POSITION, true=half)[32, 55:].any()


def test_the_horizon_trace_fades_and_prediction_and_truth_have_their_colours() -> None:
    xs = np.linspace(-0.3, 0.3, 13)
    true = np.stack([xs, np.zeros_like(xs), np.ones_like(xs)], -1)  # row 32, u 10 -> 70
    pred = true + np.array([0.0, 0.2, 0.0])  # row 52
    out = _render(POSITION, true=true, pred=pred).astype(int)
    start, end = out[32, 14], out[32, 66]
    assert start[1] > end[1] > 0  # green, fading toward the chunk's end
    assert start[1] == pytest.approx(TRUE_COLOUR[1], abs=40)
    assert out[52, 14, 0] > out[52, 66, 0] > 0 and out[52, 14, 1] < out[52, 14, 0]  # magenta
    np.testing.assert_array_equal(out[52, 10], PRED_COLOUR)  # the current step: opaque


def _hand() -> np.ndarray:
    """21 camera-frame points: the wrist at the image centre, five fingers fanned upward."""
    points = np.zeros((21, 3))
    points[:, 2] = 1.0
    for f, finger in enumerate(FINGERS):
        angle = np.radians(-150 + 30 * f)  # thumb to the left, little finger to the right
        for j, joint in enumerate(finger, start=1):
            points[joint, :2] = 0.06 * j * np.array([np.cos(angle), np.sin(angle)])
    return points


def test_a_hand_is_drawn_as_a_skeleton_with_a_colour_per_finger() -> None:
    out = _render(HAND, true=_hand().reshape(1, 63))
    for f, colour in enumerate(FINGER_COLOURS):
        angle = np.radians(-150 + 30 * f)
        u, v = np.round(
            INTRINSICS.project(np.array([*(0.15 * np.array([np.cos(angle), np.sin(angle)])), 1.0]))
        )
        assert tuple(out[int(v), int(u)]) == colour, f"finger {f}"


def test_wrist_frame_keypoints_are_moved_into_the_camera_frame() -> None:
    layout = get_layout("human_keypoints_rot6d")
    rotation = euler_to_matrix(np.array([0.3, -0.2, 0.5]))
    wrist = np.array([0.05, -0.02, 0.6])
    camera_points = _hand() * 0.5 + [0.0, 0.0, 0.5]
    local = (camera_points - wrist) @ rotation  # R^T (p - t), row vectors
    side = np.concatenate(
        [wrist, convert(rotation.reshape(9), "matrix", "rot6d"), local.reshape(63)]
    )
    actions = np.concatenate([side, side])[None]
    points = layout_points(actions, layout)
    np.testing.assert_allclose(points["left_keypoints"][0], camera_points, atol=1e-9)
    np.testing.assert_allclose(points["right_wrist_position"][0, 0], wrist)


def test_the_prompt_becomes_a_caption_at_the_bottom() -> None:
    image = np.full((64, 80, 3), 128, np.uint8)
    plain = render_overlay(image, INTRINSICS, POSITION, legend=False)
    captioned = render_overlay(image, INTRINSICS, POSITION, prompt="pick up the cup", legend=False)
    np.testing.assert_array_equal(plain, image)
    assert (captioned[:32] == image[:32]).all()
    bottom = captioned[-8:].astype(int)
    assert (bottom < 128).any() and (bottom > 200).any()  # a dark band with white text


def test_joints_or_an_uncalibrated_camera_leave_the_frame_as_it_was_but_the_caption() -> None:
    """LeRobot's embodiments: joint and gripper groups have no place in the image, and their
    cameras have no intrinsics; the video is the frames (and the prompt)."""
    image = np.full((64, 80, 3), 128, np.uint8)
    joints = layout_from_widths("j", [("joints", "joint", 6), ("gripper", "gripper", 1)])
    chunk = np.ones((4, 7))
    for intrinsics, layout in ((INTRINSICS, joints), (None, joints), (None, POSITION)):
        width = layout.dim
        out = render_overlay(
            image, intrinsics, layout, true=chunk[:, :width], pred=chunk[:, :width]
        )
        np.testing.assert_array_equal(out, image)  # no legend either: nothing to tell apart
    captioned = render_overlay(image, None, joints, true=chunk, prompt="fold the towel")
    assert (captioned[:32] == image[:32]).all() and (captioned[-8:] != image[-8:]).any()


def test_intrinsics_are_rescaled_to_the_image() -> None:
    chunk = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = render_overlay(
        np.zeros((128, 160, 3), np.uint8), INTRINSICS, POSITION, true=chunk, legend=False
    )
    assert out[64, 80].any() and not out[32, 40].any()


def test_the_horizon_plot_is_a_png_with_one_curve_per_embodiment(tmp_path: Path) -> None:
    curves = {"eva_bimanual": [0.1, 0.2, 0.3, float("nan")], "aria_bimanual": [0.2, 0.2, 0.4, 0.5]}
    path = plot_step_errors(curves, tmp_path / "plots" / "step_error.png", title="step 10")
    with Image.open(path) as image:
        assert image.format == "PNG" and image.size == (640, 360)
        pixels = np.asarray(image.convert("RGB")).reshape(-1, 3).astype(int)
    # matplotlib's first two colours (blue, orange) are both there: two curves drawn.
    assert (np.abs(pixels - [31, 119, 180]).sum(-1) < 30).sum() > 50
    assert (np.abs(pixels - [255, 127, 14]).sum(-1) < 30).sum() > 50
    assert [p.name for p in path.parent.iterdir()] == ["step_error.png"]  # no temporary left
    with pytest.raises(ValueError, match="no curves"):
        plot_step_errors({}, tmp_path / "empty.png")


def test_video_round_trips_at_its_frame_rate(tmp_path: Path) -> None:
    frames = [np.full((48, 63, 3), 20 * i, np.uint8) for i in range(6)]
    for fps, expected in ((10, Fraction(10)), (29.97, Fraction(2997, 100)), (15, Fraction(15))):
        path = write_video(tmp_path / f"v{fps}.mp4", frames, fps=fps)
        back = read_video_frames(path)
        assert len(back) == 6 and back[0].shape == (48, 62, 3)
        assert abs(int(back[5].mean()) - 100) < 8
        assert video_rate(path) == expected


def test_failed_video_write_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint8"):
        write_video(tmp_path / "v.mp4", [np.zeros((8, 8, 3), np.float32)], fps=10)
    assert list(tmp_path.iterdir()) == []
