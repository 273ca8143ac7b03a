"""One renderer for every embodiment: action chunks projected onto the camera image.

Eva's end-effector positions and a person's wrists and hand keypoints are all 3D points
in the camera frame (+x right, +y down, +z forward); the layout says which channels hold
them. Drawn on a copy of the frame:

- the horizon trace of every position group: the true (green) and predicted (magenta)
  paths over the chunk, fading from the current step to the last;
- every keypoint group as a hand skeleton (21 points: the wrist, then four per finger,
  thumb to little finger), a colour per finger, the true hand thick and the predicted
  hand thin, at the current step;
- the prompt as a caption, and a legend.

Points behind the camera, off the image or missing (non-finite, or stored as 1e9 by the
human pipelines) are skipped, as is any line that would join one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from polymimic_data.embodiments import CameraIntrinsics
from polymimic_data.geometry import Layout, to_matrix

TRUE_COLOUR = (40, 230, 40)
PRED_COLOUR = (240, 40, 200)
# Thumb, index, middle, ring, little finger.
FINGER_COLOURS = ((255, 80, 60), (255, 170, 30), (250, 240, 60), (60, 220, 240), (90, 110, 255))
FINGERS = tuple(tuple(range(1 + 4 * f, 5 + 4 * f)) for f in range(5))  # from the wrist, 0
MISSING = 1e8  # larger coordinates are missing detections
MIN_DEPTH = 1e-3  # metres in front of the camera
FADE = 0.8  # the last step of a trace is drawn at 1 - FADE of the first's opacity

Pixels = tuple[np.ndarray, np.ndarray]


def project(points: np.ndarray, intrinsics: CameraIntrinsics) -> Pixels:
    """Camera-frame points (..., 3) -> (pixels (..., 2), visible (...)).

    Visible: finite, present, in front of the camera and on the image.
    """
    points = np.asarray(points, dtype=np.float64)
    present = np.isfinite(points).all(-1) & (np.abs(points) < MISSING).all(-1)
    in_front = present & (points[..., 2] > MIN_DEPTH)
    safe = np.where(in_front[..., None], points, [0.0, 0.0, 1.0])
    pixels = intrinsics.project(safe)
    on_image = (
        (pixels[..., 0] >= 0)
        & (pixels[..., 0] < intrinsics.width)
        & (pixels[..., 1] >= 0)
        & (pixels[..., 1] < intrinsics.height)
    )
    return pixels, in_front & on_image


def layout_points(actions: np.ndarray, layout: Layout) -> dict[str, np.ndarray]:
    """(..., A) unnormalised actions -> {group: (..., N, 3) camera-frame points}.

    Position groups are one point. A keypoint group `<side>_keypoints` is given in its
    wrist's frame when the layout has `<side>_wrist_position` and `<side>_wrist_rotation`
    (the wrist-first hand layout), and is moved into the camera frame with that pose.
    """
    actions = np.asarray(actions, dtype=np.float64)
    names = {g.name: g for g in layout.groups}
    out: dict[str, np.ndarray] = {}
    for group in layout.groups:
        values = actions[..., group.start : group.stop]
        if group.kind == "position":
            out[group.name] = values[..., None, :]
        elif group.kind == "keypoints":
            points = values.reshape(*values.shape[:-1], -1, 3)
            side = group.name.removesuffix("keypoints")
            position, rotation = (
                names.get(f"{side}wrist_position"),
                names.get(f"{side}wrist_rotation"),
            )
            if position is not None and rotation is not None:
                matrix = to_matrix(actions[..., rotation.start : rotation.stop], rotation.kind)
                origin = actions[..., position.start : position.stop]
                points = np.einsum("...ij,...nj->...ni", matrix, points) + origin[..., None, :]
            out[group.name] = points
    return out


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)
    except (TypeError, OSError):  # Pillow built without FreeType: the fixed bitmap font
        return ImageFont.load_default()


def _trace(
    draw: ImageDraw.ImageDraw, pixels: Pixels, colour: tuple[int, int, int], width: int
) -> None:
    """A path over the chunk, fading along the horizon; a dot on the current step."""
    points, visible = pixels
    steps = len(points)
    for t in range(steps - 1):
        if visible[t] and visible[t + 1]:
            alpha = round(255 * (1.0 - FADE * t / max(steps - 2, 1)))
            draw.line([tuple(points[t]), tuple(points[t + 1])], fill=(*colour, alpha), width=width)
    if steps and visible[0]:
        u, v = points[0]
        r = width + 1
        draw.ellipse([u - r, v - r, u + r, v + r], fill=(*colour, 255))


def _skeleton(draw: ImageDraw.ImageDraw, pixels: Pixels, width: int, alpha: int) -> None:
    """21 hand points: a chain from the wrist through each finger, a colour per finger."""
    points, visible = pixels
    if len(points) != 21:  # not a hand: the points alone
        for (u, v), seen in zip(points, visible, strict=True):
            if seen:
                draw.ellipse(
                    [u - width, v - width, u + width, v + width], fill=(255, 255, 255, alpha)
                )
        return
    for finger, colour in zip(FINGERS, FINGER_COLOURS, strict=True):
        chain = (0, *finger)
        for a, b in itertools.pairwise(chain):
            if visible[a] and visible[b]:
                draw.line([tuple(points[a]), tuple(points[b])], fill=(*colour, alpha), width=width)
        for joint in finger:
            if visible[joint]:
                u, v = points[joint]
                draw.ellipse([u - width, v - width, u + width, v + width], fill=(*colour, alpha))


def _caption(draw: ImageDraw.ImageDraw, text: str, size: tuple[int, int]) -> None:
    w, h = size
    font = _font(max(9, h // 22))
    left, top, _, bottom = draw.textbbox((0, 0), text, font=font)
    band = bottom - top + 6
    draw.rectangle([0, h - band, w, h], fill=(0, 0, 0, 150))
    draw.text((4 - left, h - band + 3 - top), text, font=font, fill=(255, 255, 255, 255))


def _legend(draw: ImageDraw.ImageDraw, height: int) -> None:
    font = _font(max(9, height // 26))
    x = 4
    for label, colour in (("true", TRUE_COLOUR), ("predicted", PRED_COLOUR)):
        draw.text((x, 3), label, font=font, fill=(*colour, 255))
        x += round(draw.textlength(label, font=font)) + 8


def render_overlay(
    image: np.ndarray,
    intrinsics: CameraIntrinsics | None,
    layout: Layout,
    *,
    true: np.ndarray | None = None,
    pred: np.ndarray | None = None,
    prompt: str = "",
    legend: bool = True,
) -> np.ndarray:
    """A copy of `image` (H, W, 3) uint8 with the chunks `true`/`pred` (T, A) drawn on it.

    Actions are unnormalised, in the camera frame; intrinsics are rescaled to the image.
    Without intrinsics (a camera nobody calibrated), or for groups with no place in space
    (joints, grippers), nothing is drawn but the caption: the frame as it was.
    """
    height, width = image.shape[:2]
    if intrinsics is not None and (intrinsics.height != height or intrinsics.width != width):
        intrinsics = intrinsics.scaled_to(height, width)
    canvas = Image.fromarray(np.ascontiguousarray(image), "RGB").convert("RGBA")
    layer = Image.new("RGBA", canvas.size, (0, 0, 0, 0))
    draw = ImageDraw.Draw(layer)
    line = max(1, width // 200)
    chunks: Sequence[tuple[np.ndarray | None, tuple[int, int, int], bool]] = (
        (true, TRUE_COLOUR, True),
        (pred, PRED_COLOUR, False),
    )
    for chunk, colour, is_true in chunks:
        if chunk is None or intrinsics is None:
            continue
        for name, points in layout_points(chunk, layout).items():
            pixels, visible = project(points, intrinsics)
            if layout.group(name).kind == "position":
                _trace(draw, (pixels[:, 0], visible[:, 0]), colour, line + 1)
            else:
                _skeleton(
                    draw,
                    (pixels[0], visible[0]),
                    line + 1 if is_true else line,
                    255 if is_true else 170,
                )
    if prompt:
        _caption(draw, prompt, canvas.size)
    drawable = intrinsics is not None and bool(layout_points(np.zeros(layout.dim), layout))
    if legend and drawable and (true is not None or pred is not None):
        _legend(draw, height)
    return np.asarray(Image.alpha_composite(canvas, layer).convert("RGB"))
