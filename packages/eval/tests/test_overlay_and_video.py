from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from polymimic_data.embodiments import CameraIntrinsics
from polymimic_data.layouts import layout_from_widths
from polymimic_eval import draw_chunk_overlay, read_video_frames, write_video
from polymimic_eval.trajectory_overlay import PRED_COLOUR, TRUE_COLOUR

INTRINSICS = CameraIntrinsics(fx=100, fy=100, cx=40, cy=32, width=80, height=64)
LAYOUT = layout_from_widths("l", [("left_position", "position", 3)])


def test_overlay_draws_true_and_predicted_paths_where_they_project() -> None:
    image = np.zeros((64, 80, 3), np.uint8)
    true = np.array([[0.0, 0.0, 1.0], [0.1, 0.0, 1.0]])  # pixels (40, 32) -> (50, 32)
    pred = np.array([[0.0, 0.2, 1.0], [0.1, 0.2, 1.0]])  # pixels (40, 52) -> (50, 52)
    out = draw_chunk_overlay(image, pred, true, LAYOUT, INTRINSICS)
    assert tuple(out[32, 45]) == TRUE_COLOUR
    assert tuple(out[52, 45]) == PRED_COLOUR
    assert tuple(out[10, 10]) == (0, 0, 0)
    assert image.sum() == 0  # the input is untouched


def test_overlay_rescales_intrinsics_to_the_image() -> None:
    image = np.zeros((128, 160, 3), np.uint8)
    chunk = np.array([[0.0, 0.0, 1.0], [0.0, 0.0, 1.0]])
    out = draw_chunk_overlay(image, chunk, chunk, LAYOUT, INTRINSICS)
    assert out[64, 80].any() and not out[32, 40].any()


def test_video_round_trips_through_pyav(tmp_path: Path) -> None:
    frames = [np.full((48, 63, 3), 20 * i, np.uint8) for i in range(6)]
    path = write_video(tmp_path / "v.mp4", frames, fps=10)
    back = read_video_frames(path)
    assert len(back) == 6 and back[0].shape == (48, 62, 3)
    assert abs(int(back[5].mean()) - 100) < 8


def test_failed_video_write_leaves_no_file(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="uint8"):
        write_video(tmp_path / "v.mp4", [np.zeros((8, 8, 3), np.float32)], fps=10)
    assert list(tmp_path.iterdir()) == []
