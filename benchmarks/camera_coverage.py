"""Does a camera keep each MetaWorld task's scene in view, and how large (issue 30)?

    python benchmarks/camera_coverage.py [--suite metaworld/mt10]
        [--cameras corner2,corner4,corner4_fov40,corner4_fov30] [--episodes 20]
        [--seed 1000] [--image-size 96x128]

Runs each task's scripted expert (its default: reach's and pick-place's were corrected after
the sim README's table was measured, which moves their frames a little) through each task
of the suite on held-out seeds, for the frames a recording keeps (every tick to the strict
success and `LINGER` more, as `record` keeps them; an evaluation's are the first of them; an
episode the expert fails is not recorded and not counted, `expert_failed` says how many),
and projects the points the task is judged by (the fingertips' middle, `tcp_center`; each
object; the goal) through each camera with polymimic_sim.project_view, the pinhole the
renderer draws with (a narrowed camera's field of view, e.g. 40 degrees for
`corner4_fov40`). Nothing is rendered. One JSON line per task and camera:

- `in_view`: the fraction of (frame, point) pairs inside the frame; 1.0 is every one;
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
from typing import Any

import numpy as np
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_sim import make_task, project_view, run_expert, suite_tasks

emit = figure_printer("camera_coverage")


def scene_points(sim: Any) -> np.ndarray:
    """(N, 3) world points a MetaWorld task is judged by: fingertips, objects, goal."""
    objects = np.asarray(sim._get_pos_objects(), dtype=float).reshape(-1, 3)
    return np.vstack([np.asarray(sim.tcp_center, float), objects, np.asarray(sim._target_pos)])


def edge_margin(pixels: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Each pixel's distance inside the frame's nearest edge (negative: outside it)."""
    height, width = size
    column, row = pixels[..., 0], pixels[..., 1]
    return np.minimum.reduce([column, width - column, row, height - row])


class Coverage:
    """One camera's figures over a task's episodes (those the expert succeeds in)."""

    def __init__(self) -> None:
        self.inside: list[np.ndarray] = []
        self.margins: list[np.ndarray] = []
        self.spreads: list[float] = []
        self.scales: list[float] = []
        self.episode: list[tuple[np.ndarray, np.ndarray, float, float]] = []

    def keep(self) -> None:
        """The episode followed since the last keep or drop counts."""
        for inside, margins, spread, scale in self.episode:
            self.inside.append(inside)
            self.margins.append(margins)
            if spread >= 0:
                self.spreads.append(spread)
                self.scales.append(scale)
        self.episode = []

    def drop(self) -> None:
        """The episode followed since the last keep or drop does not count."""
        self.episode = []

    def add(self, pixels: np.ndarray, inside: np.ndarray, size: tuple[int, int],
            goal_pixels: np.ndarray | None = None) -> None:  # fmt: skip
        """One frame's points; `goal_pixels` (the goal, then 1 cm along x, y, z) at the first."""
        margin = edge_margin(pixels, size)
        margin = np.where(inside, margin, np.minimum(margin, 0.0))  # out of view or behind it
        spread = scale = -1.0
        if goal_pixels is not None:
            spread = float(np.linalg.norm(pixels[:, None] - pixels[None], axis=-1).max())
            scale = float(np.linalg.norm(goal_pixels[1:] - goal_pixels[0], axis=1).mean())
        self.episode.append((inside, margin, spread, scale))


class FrameProjector:
    """At each frame a recording keeps (run_expert's `keep`), the scene projected through
    each of `views` into its Coverage; the goal's centimetre steps at the first frame."""

    def __init__(self, sim: Any, views: Any, size: tuple[int, int], coverage: dict) -> None:
        self.sim, self.views, self.size, self.coverage = sim, views, size, coverage
        self.first = True

    def __call__(self, *_: Any) -> None:
        model, data, size = self.sim.model, self.sim.data, self.size
        points = scene_points(self.sim)
        for view in self.views:
            pixels, inside = project_view(model, data, view, size, points)
            goal = None
            if self.first:
                steps = points[-1] + np.vstack([np.zeros(3), np.eye(3) * 0.01])
                goal = project_view(model, data, view, size, steps)[0]
            self.coverage[view.name].add(pixels, inside, size, goal)
        self.first = False


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--suite", default="metaworld/mt10")
    parser.add_argument("--cameras", default="corner2,corner4,corner4_fov40,corner4_fov30")
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
        coverage = {view.name: Coverage() for view in views}
        failed = 0
        try:
            for seed in range(opts.seed, opts.seed + opts.episodes):
                keep = FrameProjector(task.sim, views, size, coverage)
                succeeded = run_expert(task, seed, keep).success_at is not None
                for figures in coverage.values():  # a failed episode is never recorded
                    if succeeded:
                        figures.keep()
                    else:
                        figures.drop()
                failed += not succeeded
        finally:
            task.close()
        for camera, figures in coverage.items():
            inside, margins = np.concatenate(figures.inside), np.concatenate(figures.margins)
            emit("in_view", float(inside.mean()), "fraction", task=name, camera=camera,
                 seeds=[opts.seed, opts.seed + opts.episodes - 1], image_size=list(size),
                 margin_px=round(float(margins.min()), 1),
                 spread_px=round(float(np.median(figures.spreads)), 1), expert_failed=failed,
                 px_per_cm=round(float(np.median(figures.scales)), 2))  # fmt: skip


if __name__ == "__main__":
    main()
