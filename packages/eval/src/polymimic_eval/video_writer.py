"""Writing and reading mp4 videos with PyAV; writes are atomic."""

from __future__ import annotations

import os
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path

import av
import numpy as np


def write_video(path: str | os.PathLike[str], frames: Iterable[np.ndarray], fps: float) -> Path:
    """Encode uint8 (H, W, 3) frames as H.264 mp4; the file appears whole or not at all."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    count = 0
    try:
        with av.open(str(tmp), mode="w", format="mp4") as container:
            stream = None
            for frame in frames:
                if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
                    raise ValueError(
                        f"{path}: frames must be uint8 (H, W, 3), got {frame.dtype} {frame.shape}"
                    )
                if stream is None:
                    stream = container.add_stream(
                        "libx264", rate=Fraction(fps).limit_denominator(1001)
                    )
                    # yuv420p needs even sides; crop a pixel rather than resample.
                    stream.height, stream.width = frame.shape[0] // 2 * 2, frame.shape[1] // 2 * 2
                    stream.pix_fmt = "yuv420p"
                cropped = np.ascontiguousarray(frame[: stream.height, : stream.width])
                container.mux(stream.encode(av.VideoFrame.from_ndarray(cropped, format="rgb24")))
                count += 1
            if stream is None:
                raise ValueError(f"{path}: no frames to write")
            container.mux(stream.encode(None))
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def read_video_frames(path: str | os.PathLike[str]) -> list[np.ndarray]:
    """Decode every frame of a video to uint8 (H, W, 3)."""
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def video_rate(path: str | os.PathLike[str]) -> Fraction:
    """The frame rate a video's stream declares (what a player plays it at)."""
    with av.open(str(path)) as container:
        rate = container.streams.video[0].average_rate
    if rate is None:
        raise ValueError(f"{path}: its video stream declares no frame rate")
    return Fraction(rate)
