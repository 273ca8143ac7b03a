"""polymimic-eval: metrics on unnormalised actions, trajectory overlays and video writing."""

from polymimic_eval.metrics import action_error, position_error
from polymimic_eval.trajectory_overlay import draw_chunk_overlay
from polymimic_eval.video_writer import read_video_frames, write_video

__all__ = [
    "action_error",
    "draw_chunk_overlay",
    "position_error",
    "read_video_frames",
    "write_video",
]
