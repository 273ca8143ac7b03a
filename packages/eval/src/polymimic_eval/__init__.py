"""polymimic-eval: metrics on unnormalised actions, trajectory overlays and video writing."""

from polymimic_eval.group_metrics import group_metrics, step_errors
from polymimic_eval.metrics import action_error
from polymimic_eval.trajectory_overlay import draw_chunk_overlay
from polymimic_eval.video_writer import read_video_frames, write_video

__all__ = [
    "action_error",
    "draw_chunk_overlay",
    "group_metrics",
    "read_video_frames",
    "step_errors",
    "write_video",
]
