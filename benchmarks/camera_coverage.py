"""Does a camera keep each MetaWorld task's scene in view, and how large (issue 30)?

    python benchmarks/camera_coverage.py [--suite metaworld/mt10]
        [--cameras corner4,corner4_fov40,corner4_fov30] [--episodes 20] [--seed 1000]
        [--image-size 96x128]

Runs MetaWorld's scripted expert through each task of the suite on held-out seeds and, at
every step until it succeeds, projects the points the task is judged by (the fingertips' middle,
`tcp_center`; each object; the goal) through each camera: a pinhole at the camera's pose
with the vertical field of view it renders with (a narrowed camera's, e.g. 40 degrees for
`corner4_fov40`). Nothing is rendered. One JSON line per task and camera:

- `in_view`: the fraction of (step, point) pairs inside the frame; 1.0 is every one;
- `margin_px`: the least distance of any of them to the frame's edge, in pixels of
  `--image-size` (negative: outside);
- `spread_px`: the median over episodes of the largest distance, at the first frame,
  between two of the points: how many pixels across the task's scene is;
- `px_per_cm`: the median over episodes of how far 1 cm moves in the image at the goal
  (the mean over a step along x, along y and along z): the precision a frame offers where
  the task is judged (reach succeeds within 5 cm of its goal).

A narrower view puts more pixels on the scene (`spread_px`) for as long as `in_view`
stays 1.0.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_sim import make_task, suite_tasks

emit = figure_printer("camera_coverage")


def scene_points(sim: Any) -> np.ndarray:
    """(N, 3) world points a MetaWorld task is judged by: fingertips, objects, goal."""
    objects = np.asarray(sim._get_pos_objects(), dtype=float).reshape(-1, 3)
    return np.vstack([np.asarray(sim.tcp_center, float), objects, np.asarray(sim._target_pos)])


def project(points: np.ndarray, position: np.ndarray, rotation: np.ndarray, fovy: float,
            size: tuple[int, int]) -> np.ndarray:  # fmt: skip
    """(N, 2) pixel (column, row) of world `points` through a MuJoCo camera; NaN behind it.

    MuJoCo's camera looks along its frame's -z, x to the right and y up; `fovy` in degrees.
    """
    height, width = size
    local = (points - position) @ rotation  # the camera frame: rotation's columns are its axes
    depth = -local[:, 2]
    focal = (height / 2) / math.tan(math.radians(fovy) / 2)
    with np.errstate(divide="ignore", invalid="ignore"):
        column = width / 2 + focal * local[:, 0] / depth
        row = height / 2 - focal * local[:, 1] / depth
    pixels = np.stack([column, row], axis=1)
    pixels[depth <= 0] = np.nan
    return pixels


def edge_margin(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Each pixel's distance inside the frame's nearest edge (negative outside; NaN: -inf)."""
    height, width = size
    column, row = pixels[:, 0], pixels[:, 1]
    margin = np.minimum.reduce([column, width - column, row, height - row])
    return np.where(np.isnan(margin), -np.inf, margin)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--suite", default="metaworld/mt10")
    parser.add_argument("--cameras", default="corner4,corner4_fov40,corner4_fov30")
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--image-size", default="96x128", help="HEIGHTxWIDTH, for the pixels")
    opts = parser.parse_args()
    if not opts.suite.startswith("metaworld/"):
        parser.error(f"--suite: a MetaWorld task or suite, got {opts.suite!r}")
    height, width = (int(v) for v in opts.image_size.lower().split("x"))
    size = (height, width)
    cameras = [c for c in opts.cameras.split(",") if c]
    for name in suite_tasks(opts.suite):
        task: Any = make_task(name, image_size=size, cameras=cameras)
        views, task.views = task.views, ()  # the views' geometry only: render nothing
        model, data = task.sim.model, task.sim.data
        margins: dict[str, list[np.ndarray]] = {c: [] for c in cameras}
        spreads: dict[str, list[float]] = {c: [] for c in cameras}
        scales: dict[str, list[float]] = {c: [] for c in cameras}
        try:
            for seed in range(opts.seed, opts.seed + opts.episodes):
                task.reset(seed)
                for step in range(task.max_steps):
                    points = scene_points(task.sim)
                    for view in views:
                        fovy = float(model.cam_fovy[view.index]) if view.fovy is None else view.fovy
                        where = data.cam_xpos[view.index], data.cam_xmat[view.index].reshape(3, 3)
                        pixels = project(points, *where, fovy, size)
                        margins[view.name].append(edge_margin(pixels, size))
                        if step == 0:
                            gaps = np.linalg.norm(pixels[:, None] - pixels[None], axis=-1)
                            spreads[view.name].append(float(np.nanmax(gaps)))
                            goal = points[-1] + np.vstack([np.zeros(3), np.eye(3) * 0.01])
                            moved = project(goal, *where, fovy, size)
                            cm = np.linalg.norm(moved[1:] - moved[0], axis=1).mean()
                            scales[view.name].append(float(cm))
                    moved = task.step(task.expert_action())
                    if moved.done or moved.success:  # an evaluation's episode ends there
                        break
        finally:
            task.close()
        for camera in cameras:
            every = np.concatenate(margins[camera])
            emit("in_view", float((every >= 0).mean()), "fraction", task=name, camera=camera,
                 seeds=[opts.seed, opts.seed + opts.episodes - 1], image_size=list(size),
                 margin_px=round(float(every.min()), 1),
                 spread_px=round(float(np.median(spreads[camera])), 1),
                 px_per_cm=round(float(np.median(scales[camera])), 2))  # fmt: skip


if __name__ == "__main__":
    main()
