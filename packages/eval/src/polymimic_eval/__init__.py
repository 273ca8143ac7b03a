"""polymimic-eval: metrics on unnormalised actions, overlays, plots and video writing."""

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as _version

try:
    __version__ = _version("polymimic-eval")
except PackageNotFoundError:  # a source tree that is not installed
    __version__ = "0+unknown"


from polymimic_eval.grad_norm_stats import GradNormStats
from polymimic_eval.group_metrics import group_metrics, step_errors
from polymimic_eval.horizon_plot import plot_step_errors
from polymimic_eval.keypoint_renderer import layout_points, project, render_overlay
from polymimic_eval.metrics import action_error
from polymimic_eval.video_writer import read_video_frames, video_rate, write_video

__all__ = [
    "GradNormStats",
    "action_error",
    "group_metrics",
    "layout_points",
    "plot_step_errors",
    "project",
    "read_video_frames",
    "render_overlay",
    "step_errors",
    "video_rate",
    "write_video",
]
