"""Drawing predicted and true action chunks onto a camera image."""

from __future__ import annotations

import itertools

import numpy as np

from polymimic_data.embodiments import CameraIntrinsics
from polymimic_data.layouts import Layout

TRUE_COLOUR = (40, 230, 40)
PRED_COLOUR = (240, 40, 200)


def _draw_polyline(
    image: np.ndarray, pixels: np.ndarray, colour: tuple[int, int, int], radius: int
) -> None:
    """Dots along the segments between consecutive pixels, clipped to the image."""
    h, w = image.shape[:2]
    for a, b in itertools.pairwise(pixels):
        steps = max(2, int(np.abs(b - a).max()) + 1)
        for u, v in np.linspace(a, b, steps).round().astype(int):
            image[
                max(v - radius, 0) : min(v + radius + 1, h),
                max(u - radius, 0) : min(u + radius + 1, w),
            ] = colour


def draw_chunk_overlay(
    image: np.ndarray,
    pred_actions: np.ndarray,
    true_actions: np.ndarray,
    layout: Layout,
    intrinsics: CameraIntrinsics,
) -> np.ndarray:
    """A copy of `image` (H, W, 3) with each position group's true and predicted path drawn.

    Actions are unnormalised (T, A) in the camera frame; true paths are green, predicted magenta.
    """
    out = image.copy()
    if intrinsics.height != image.shape[0] or intrinsics.width != image.shape[1]:
        intrinsics = intrinsics.scaled_to(image.shape[0], image.shape[1])
    radius = max(1, image.shape[1] // 160)
    for group in layout.groups_of_kind("position"):
        for actions, colour in ((true_actions, TRUE_COLOUR), (pred_actions, PRED_COLOUR)):
            pixels = intrinsics.project(actions[:, group.start : group.stop])
            _draw_polyline(out, pixels, colour, radius)
    return out
