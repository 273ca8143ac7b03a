"""Synthetic LeRobot v3.0 datasets, written the way the `lerobot` library writes them.

For the tests and benchmarks of polymimic's LeRobot importer, which must read real LeRobot
datasets without depending on `lerobot`. `write_lerobot_dataset` writes a dataset root with
pyarrow, PyAV and Pillow, and returns what each episode holds (`LeRobotEpisodeTruth`) so a
test can compare an import against it: states and actions bit-exact, frames as given to the
encoder.

The layout follows lerobot's own writer (github.com/huggingface/lerobot, tag v0.4.4 and
main after v0.6.1): `src/lerobot/datasets/utils.py` (path templates, chunk and file-size
defaults, `create_empty_dataset_info`, the default features), `lerobot_dataset.py`,
`dataset_metadata.py` and `dataset_writer.py` (one data-parquet row group per episode,
`meta/episodes` columns, `meta/tasks.parquet` as a pandas frame indexed by task),
`video_utils.py` (libsvtav1, yuv420p, g=2, crf=30, preset 12; each episode encoded on its own,
then stream-copied onto its camera's file with the concat demuxer; from/to timestamps as
running sums of the episode videos' durations; the `info` block of video features),
`compute_stats.py` (per-episode stats) and `v30/convert_dataset_v21_to_v30.py` (the variant
of the Hub datasets converted from v2.1). Where those writers differ, the `flavor` argument
picks one: lerobot 0.4 (most v3.0 datasets), lerobot 0.6, or a dataset converted from v2.1.
Needs the `lerobot` extra (pyarrow, PyAV, Pillow); `lerobot` itself is not used.

Frames are a soft gradient, a brightness step that cycles every 4 frames and a bright bar
whose position follows the frame index and the episode, so that each frame differs clearly
from its neighbours even after AV1 at small sizes: an importer off by one frame fails.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from io import BytesIO
from pathlib import Path
from typing import Any, Literal

import av
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import simplejpeg
from PIL import Image

CODEBASE_VERSION = "v3.0"
CHUNK_FILE_PATTERN = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE_PATTERN + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE_PATTERN + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE_PATTERN + ".parquet"
TASKS_PATH = "meta/tasks.parquet"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
DEFAULT_CHUNK_SIZE = 1000
DATA_FILES_SIZE_IN_MB = 100
VIDEO_FILES_SIZE_IN_MB = 200
IMAGE_PREFIX = "observation.images."
ALOHA_MOTORS = tuple(
    f"{side}_{joint}"
    for side in ("left", "right")
    for joint in (
        "waist",
        "shoulder",
        "elbow",
        "forearm_roll",
        "wrist_angle",
        "wrist_rotate",
        "gripper",
    )
)
VIDEO_CODECS = ("libsvtav1", "h264", "hevc", "libx264", "libx265")
_QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
_EPISODES_PER_ROW_GROUP = 10  # lerobot's metadata_buffer_size

Flavor = Literal["lerobot-0.4", "lerobot-0.6", "converted-v2.1"]


@dataclass(frozen=True)
class LeRobotEpisodeTruth:
    """What one written episode holds, to compare an import against."""

    episode_index: int
    state: np.ndarray  # (T, D) float32, `observation.state`
    action: np.ndarray  # (T, D) float32, `action`
    frames: dict[str, np.ndarray]  # camera key -> (T, H, W, 3) uint8, as given to the encoder
    tasks: list[str]  # the task of each frame
    task_index: np.ndarray  # (T,) int64, each frame's row in meta/tasks.parquet

    @property
    def length(self) -> int:
        return len(self.state)


def _next_file(chunk_index: int, file_index: int, chunks_size: int) -> tuple[int, int]:
    """Files 0..chunks_size-1 of a chunk, then the next chunk (update_chunk_file_indices)."""
    if file_index == chunks_size - 1:
        return chunk_index + 1, 0
    return chunk_index, file_index + 1


def render_frames(length: int, episode: int, camera: int, height: int, width: int) -> np.ndarray:
    """(T, H, W, 3) uint8 frames: smooth, AV1-friendly, each clearly unlike its neighbours."""
    yy = np.linspace(0.0, 1.0, height, dtype=np.float32)[:, None]
    xx = np.linspace(0.0, 1.0, width, dtype=np.float32)[None, :]
    background = np.stack(
        np.broadcast_arrays(40.0 + 60.0 * xx, 40.0 + 60.0 * yy, 90.0 - 40.0 * xx + 10.0 * camera),
        axis=-1,
    )
    band_y = 0.2 + 0.6 * ((episode * 0.381966 + camera * 0.5) % 1.0)
    band = np.exp(-0.5 * ((yy - band_y) / 0.08) ** 2)[..., None]  # which episode
    background = background + band * np.array([0.0, 50.0, 60.0], np.float32)
    out = np.empty((length, height, width, 3), np.uint8)
    for t in range(length):
        bar_x = 0.1 + 0.8 * ((t * 0.618034 + episode * 0.29 + camera * 0.13) % 1.0)
        bar = np.exp(-0.5 * ((xx - bar_x) / 0.045) ** 2)[..., None]  # which frame
        frame = background + 20.0 * (t % 4) + bar * np.array([95.0, 80.0, -30.0], np.float32)
        out[t] = np.clip(np.rint(frame), 0, 255).astype(np.uint8)
    return out


def _stats(values: np.ndarray, quantiles: bool) -> dict[str, np.ndarray]:
    """compute_stats' per-episode stats of (N, C) values, over N."""
    stats: dict[str, np.ndarray] = {
        "min": values.min(axis=0),
        "max": values.max(axis=0),
        "mean": values.mean(axis=0),
        "std": values.std(axis=0),
        "count": np.array([len(values)], np.int64),
    }
    if quantiles:
        for key, q in _QUANTILES.items():
            stats[key] = np.quantile(values, q, axis=0)
    return stats


def _image_stats(frames: np.ndarray, quantiles: bool) -> dict[str, np.ndarray]:
    """Per-channel stats in [0, 1] shaped (3, 1, 1), over lerobot's sample of frames."""
    length = len(frames)
    count = length if length < 100 else max(100, min(int(length**0.75), 10_000))
    picked = frames[np.round(np.linspace(0, length - 1, count)).astype(int)]
    height, width = picked.shape[1:3]
    if max(height, width) >= 300:
        step = int(width / 150) if width > height else int(height / 150)
        picked = picked[:, ::step, ::step]
    stats = _stats(picked.reshape(-1, 3), quantiles)
    stats["count"] = np.array([count], np.int64)
    return {
        key: value if key == "count" else (value / 255.0).reshape(3, 1, 1)
        for key, value in stats.items()
    }


def _aggregate(per_episode: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """compute_stats.aggregate_feature_stats: count-weighted means, variances, quantiles."""
    counts = np.stack([s["count"] for s in per_episode]).astype(np.float64)
    means = np.stack([s["mean"] for s in per_episode])
    weights = counts.reshape(counts.shape + (1,) * (means.ndim - counts.ndim))
    total = counts.sum(axis=0)
    mean = (means * weights).sum(axis=0) / total
    variances = np.stack([s["std"] ** 2 for s in per_episode])
    variance = ((variances + (means - mean) ** 2) * weights).sum(axis=0) / total
    out: dict[str, np.ndarray] = {
        "min": np.min(np.stack([s["min"] for s in per_episode]), axis=0),
        "max": np.max(np.stack([s["max"] for s in per_episode]), axis=0),
        "mean": mean,
        "std": np.sqrt(variance),
        "count": np.stack([s["count"] for s in per_episode]).sum(axis=0),
    }
    for key in _QUANTILES:
        if key in per_episode[0]:
            out[key] = (np.stack([s[key] for s in per_episode]) * weights).sum(axis=0) / total
    return out


def _png(frame: np.ndarray) -> bytes:
    buffer = BytesIO()
    Image.fromarray(frame).save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def _codec_options(vcodec: str) -> dict[str, str]:
    """video_utils' defaults: a keyframe every 2 frames, crf 30, SVT-AV1 preset 12."""
    options = {"g": "2", "crf": "30"}
    if vcodec == "libsvtav1":
        options["preset"] = "12"
    return options


def _encode_episode(path: Path, frames: np.ndarray, fps: int, vcodec: str) -> None:
    """One episode to its own mp4, frame i at pts i in a 1/fps time base (yuv420p)."""
    time_base = Fraction(1, fps)
    with av.open(str(path), "w") as container:
        stream = container.add_stream(vcodec, rate=fps, options=_codec_options(vcodec))
        assert isinstance(stream, av.VideoStream)
        stream.pix_fmt = "yuv420p"
        stream.height, stream.width = frames.shape[1:3]
        stream.time_base = time_base
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="rgb24")
            frame.pts = i
            frame.time_base = time_base
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def _duration_s(path: Path) -> float:
    """video_utils.get_video_duration_in_s: the stream's duration, else the container's."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        if stream.duration is not None and stream.time_base is not None:
            return float(stream.duration * stream.time_base)
        assert container.duration is not None
        return container.duration / av.time_base


def _concatenate(inputs: list[Path], output: Path, workdir: Path) -> None:
    """Stream-copy the episode videos into one mp4, as lerobot's concatenate_video_files."""
    if len(inputs) == 1:  # lerobot moves a file's first episode video into place
        shutil.move(str(inputs[0]), str(output))
        return
    listing = workdir / "concat.ffconcat"
    lines = ["ffconcat version 1.0"]
    for path in inputs:
        quoted = str(path.resolve()).replace("'", "'\\''")
        lines.append(f"file '{quoted}'")
    listing.write_text("\n".join(lines) + "\n")
    with (
        av.open(str(listing), "r", format="concat", options={"safe": "0"}) as source,
        av.open(str(output), "w", options={"movflags": "faststart"}) as target,
    ):
        in_stream = source.streams.video[0]
        out_stream = target.add_stream_from_template(in_stream, opaque=True)
        out_stream.time_base = in_stream.time_base
        for packet in source.demux(in_stream):
            if packet.dts is None:  # the demuxer's flush packet
                continue
            packet.stream = out_stream
            target.mux(packet)


def _video_info(path: Path, fps: int, vcodec: str, flavor: Flavor) -> dict[str, Any]:
    """The `info` block lerobot's get_video_info puts on a video feature."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        height, width = stream.height, stream.width
        codec, pix_fmt = stream.codec.canonical_name, stream.pix_fmt
    if flavor == "converted-v2.1":  # the v2.x block, its fps a float
        return {
            "video.fps": float(fps),
            "video.height": height,
            "video.width": width,
            "video.channels": 3,
            "video.codec": codec,
            "video.pix_fmt": pix_fmt,
            "video.is_depth_map": False,
            "has_audio": False,
        }
    info: dict[str, Any] = {
        "video.height": height,
        "video.width": width,
        "video.codec": codec,
        "video.pix_fmt": pix_fmt,
    }
    if flavor == "lerobot-0.6":
        info |= {"video.fps": fps, "video.channels": 3, "has_audio": False}
        info |= {
            "video.g": 2,
            "video.crf": 30,
            "video.preset": 12 if vcodec == "libsvtav1" else None,
            "video.fast_decode": 0,
            "video.video_backend": "pyav",
            "video.extra_options": {},
            "is_depth_map": False,
        }
    else:
        info |= {"video.is_depth_map": False, "video.fps": fps, "video.channels": 3}
        info["has_audio"] = False
    return info


def _features(
    motor_names: Sequence[str],
    camera_keys: Sequence[str],
    height: int,
    width: int,
    video: bool,
    fps: int,
    flavor: Flavor,
) -> dict[str, dict[str, Any]]:
    names: Any = list(motor_names)
    if flavor == "converted-v2.1":
        names = {"motors": list(motor_names)}
    dim = len(motor_names)
    features: dict[str, dict[str, Any]] = {
        "action": {"dtype": "float32", "shape": [dim], "names": names},
        "observation.state": {"dtype": "float32", "shape": [dim], "names": names},
    }
    for key in camera_keys:
        features[key] = {
            "dtype": "video" if video else "image",
            "shape": [height, width, 3],
            "names": ["height", "width", "channel" if flavor == "converted-v2.1" else "channels"],
        }
    features["timestamp"] = {"dtype": "float32", "shape": [1], "names": None}
    for key in ("frame_index", "episode_index", "index", "task_index"):
        features[key] = {"dtype": "int64", "shape": [1], "names": None}
    if flavor == "converted-v2.1":
        for feature in features.values():
            if feature["dtype"] != "video":
                feature["fps"] = fps
    return features


def _data_schema(features: dict[str, dict[str, Any]], flavor: Flavor) -> pa.Schema:
    """The frames' arrow schema, with the `huggingface` metadata `datasets` writes."""
    fields: list[pa.Field] = []
    hf: dict[str, Any] = {}
    image_type = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
    for key, feature in features.items():
        dtype, shape = feature["dtype"], feature["shape"]
        if dtype == "video":
            continue
        if dtype == "image":
            fields.append(pa.field(key, image_type))
            hf[key] = {"_type": "Image"}
        elif shape == [1]:
            fields.append(pa.field(key, pa.from_numpy_dtype(np.dtype(dtype))))
            hf[key] = {"dtype": dtype, "_type": "Value"}
        else:
            value = pa.from_numpy_dtype(np.dtype(dtype))
            element = {"dtype": dtype, "_type": "Value"}
            if flavor == "converted-v2.1":  # pandas round trip: variable-length lists
                fields.append(pa.field(key, pa.list_(value)))
                hf[key] = {"feature": element, "_type": "List"}
            else:
                fields.append(pa.field(key, pa.list_(value, shape[0])))
                hf[key] = {"feature": element, "length": shape[0], "_type": "List"}
    schema = pa.schema(fields)
    has_images = any(f["dtype"] == "image" for f in features.values())
    if flavor != "converted-v2.1" or has_images:
        schema = schema.with_metadata({"huggingface": json.dumps({"info": {"features": hf}})})
    return schema


def _episode_columns(
    truth: LeRobotEpisodeTruth,
    camera_keys: Sequence[str],
    video: bool,
    first_index: int,
    fps: int,
    image_format: str,
) -> dict[str, Any]:
    length = truth.length
    columns: dict[str, Any] = {"action": truth.action, "observation.state": truth.state}
    if not video:
        suffix = "png" if image_format == "png" else "jpg"
        for key in camera_keys:
            frames = truth.frames[key]
            columns[key] = [
                {
                    "bytes": _png(frame)
                    if image_format == "png"
                    else simplejpeg.encode_jpeg(np.ascontiguousarray(frame), quality=95),
                    "path": f"frame-{i:06d}.{suffix}",
                }
                for i, frame in enumerate(frames)
            ]
    frame_index = np.arange(length, dtype=np.int64)
    columns["timestamp"] = (frame_index / fps).astype(np.float32)
    columns["frame_index"] = frame_index
    columns["episode_index"] = np.full(length, truth.episode_index, np.int64)
    columns["index"] = first_index + frame_index
    columns["task_index"] = truth.task_index
    return columns


def _to_table(columns: dict[str, Any], schema: pa.Schema) -> pa.Table:
    arrays: list[pa.Array] = []
    for field in schema:
        value = columns[field.name]
        if isinstance(value, np.ndarray) and value.ndim == 2:
            flat = pa.array(value.reshape(-1))
            if pa.types.is_fixed_size_list(field.type):
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, value.shape[1]))
            else:
                offsets = pa.array(np.arange(0, value.size + 1, value.shape[1], dtype=np.int32))
                arrays.append(pa.ListArray.from_arrays(offsets, flat))
        else:
            arrays.append(pa.array(value, type=field.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _write_tasks(root: Path, task_list: list[str], flavor: Flavor) -> None:
    """What `DataFrame({"task_index": ...}, index=tasks).to_parquet` writes, without pandas."""
    index_name = "task" if flavor == "lerobot-0.6" else None
    index_column = index_name or "__index_level_0__"
    pandas_meta = {
        "index_columns": [index_column],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": index_name,
                "field_name": index_column,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3",
    }
    table = pa.table(
        {
            "task_index": pa.array(range(len(task_list)), pa.int64()),
            index_column: pa.array(task_list, pa.string()),
        }
    ).replace_schema_metadata({"pandas": json.dumps(pandas_meta)})
    pq.write_table(table, root / TASKS_PATH)


def _flat_stats(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    return {
        f"stats/{feature}/{name}": value.tolist()
        for feature, by_name in stats.items()
        for name, value in by_name.items()
    }


def _check_arguments(
    root: Path,
    *,
    episodes: int,
    frames: int | Sequence[int],
    tasks: Sequence[str],
    video: bool,
    vcodec: str,
    image_format: str,
    episodes_per_file: int | None,
) -> tuple[list[int], int]:
    """Each episode's length and the episodes per file, once the arguments are checked."""
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root} exists and is not an empty directory")
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1: {episodes}")
    lengths = [frames] * episodes if isinstance(frames, int) else list(frames)
    if len(lengths) != episodes or min(lengths) < 1:
        raise ValueError(f"frames must be one length >= 1 or {episodes} of them: {frames!r}")
    if not tasks:
        raise ValueError("at least one task is needed")
    if video and vcodec not in VIDEO_CODECS:
        raise ValueError(f"vcodec must be one of {VIDEO_CODECS}, not {vcodec!r}")
    if image_format not in ("png", "jpeg"):
        raise ValueError(f"image_format must be 'png' or 'jpeg', not {image_format!r}")
    per_file = episodes if episodes_per_file is None else episodes_per_file
    if per_file < 1:
        raise ValueError(f"episodes_per_file must be >= 1: {episodes_per_file}")
    return lengths, per_file


def _episode_truths(
    lengths: Sequence[int],
    tasks: Sequence[str],
    motors: Sequence[str],
    camera_keys: Sequence[str],
    height: int,
    width: int,
    seed: int,
) -> tuple[list[LeRobotEpisodeTruth], list[str]]:
    """Every episode's states, actions, frames and tasks, and the tasks in order of first use.

    States are a random walk from a random start, actions the next state plus noise, all drawn
    from one generator seeded with `seed`, episode by episode.
    """
    rng = np.random.default_rng(seed)
    task_list: list[str] = []
    truths: list[LeRobotEpisodeTruth] = []
    motor_count = len(motors)
    for episode, length in enumerate(lengths):
        task = tasks[episode % len(tasks)]
        if task not in task_list:
            task_list.append(task)
        start = rng.uniform(-0.5, 0.5, motor_count)
        state = start + np.cumsum(rng.normal(0.0, 0.02, (length, motor_count)), axis=0)
        action = np.concatenate([state[1:], state[-1:]]) + rng.normal(0.0, 0.005, state.shape)
        truths.append(
            LeRobotEpisodeTruth(
                episode_index=episode,
                state=state.astype(np.float32),
                action=action.astype(np.float32),
                frames={
                    key: render_frames(length, episode, c, height, width)
                    for c, key in enumerate(camera_keys)
                },
                tasks=[task] * length,
                task_index=np.full(length, task_list.index(task), np.int64),
            )
        )
    return truths, task_list


def _episode_stats(
    truth: LeRobotEpisodeTruth,
    columns: dict[str, Any],
    features: dict[str, dict[str, Any]],
    quantiles: bool,
) -> dict[str, dict[str, np.ndarray]]:
    """One episode's stats of every feature: cameras from their frames, the rest per channel."""
    stats: dict[str, dict[str, np.ndarray]] = {}
    for key in features:
        if key in truth.frames:
            stats[key] = _image_stats(truth.frames[key], quantiles)
        else:
            values = np.asarray(columns[key])
            stats[key] = _stats(values.reshape(truth.length, -1), quantiles)
    return stats


def _episode_row(
    truth: LeRobotEpisodeTruth, chunk_index: int, file_index: int, first_index: int
) -> dict[str, Any]:
    """An episode's meta/episodes row up to its data file and frame range (videos follow)."""
    return {
        "episode_index": truth.episode_index,
        "tasks": sorted(set(truth.tasks)),
        "length": truth.length,
        "data/chunk_index": chunk_index,
        "data/file_index": file_index,
        "dataset_from_index": first_index,
        "dataset_to_index": first_index + truth.length,
    }


def _write_data_file(path: Path, tables: list[pa.Table], schema: pa.Schema, flavor: Flavor) -> None:
    """A data parquet of its episodes' tables: one row group each, or one in all if converted."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(path, schema, compression="snappy", use_dictionary=True) as writer:
        if flavor == "converted-v2.1":  # pandas wrote the concatenation at once
            writer.write_table(pa.concat_tables(tables))
        else:
            for table in tables:  # lerobot writes one row group per episode
                writer.write_table(table)


def _write_camera_video(
    path: Path,
    workdir: Path,
    key: str,
    group: Sequence[LeRobotEpisodeTruth],
    fps: int,
    vcodec: str,
) -> list[tuple[float, float]]:
    """One camera's video file of `group`: each episode its own mp4, then concatenated.

    Returns each episode's from and to timestamps in the file, running sums of the episode
    videos' durations as lerobot keeps them.
    """
    parts: list[Path] = []
    spans: list[tuple[float, float]] = []
    timestamp = 0.0
    for truth in group:
        part = workdir / f"{key}-episode-{truth.episode_index:06d}.mp4"
        _encode_episode(part, truth.frames[key], fps, vcodec)
        duration = _duration_s(part)
        spans.append((timestamp, timestamp + duration))
        timestamp += duration
        parts.append(part)
    path.parent.mkdir(parents=True, exist_ok=True)
    _concatenate(parts, path, workdir)
    return spans


def _write_files(
    root: Path,
    truths: Sequence[LeRobotEpisodeTruth],
    *,
    per_file: int,
    chunks_size: int,
    camera_keys: Sequence[str],
    features: dict[str, dict[str, Any]],
    video: bool,
    vcodec: str,
    fps: int,
    image_format: str,
    flavor: Flavor,
) -> tuple[list[dict[str, Any]], list[dict[str, dict[str, np.ndarray]]]]:
    """The data files and video files, `per_file` episodes each, chunk by chunk.

    Returns each episode's meta/episodes row so far and its stats. Puts the `info` block of
    the first video file of each camera on its feature in `features`.
    """
    schema = _data_schema(features, flavor)
    quantiles = flavor != "converted-v2.1"
    rows: list[dict[str, Any]] = []
    episode_stats: list[dict[str, dict[str, np.ndarray]]] = []
    chunk_index, file_index = 0, 0
    first_index = 0
    with tempfile.TemporaryDirectory(prefix="synthetic_lerobot_") as tmp:
        workdir = Path(tmp)
        for first in range(0, len(truths), per_file):
            group = truths[first : first + per_file]
            tables: list[pa.Table] = []
            for truth in group:
                columns = _episode_columns(
                    truth, camera_keys, video, first_index, fps, image_format
                )
                tables.append(_to_table(columns, schema))
                episode_stats.append(_episode_stats(truth, columns, features, quantiles))
                rows.append(_episode_row(truth, chunk_index, file_index, first_index))
                first_index += truth.length
            data_path = root / DATA_PATH.format(chunk_index=chunk_index, file_index=file_index)
            _write_data_file(data_path, tables, schema, flavor)
            for key in camera_keys if video else ():
                video_path = root / VIDEO_PATH.format(
                    video_key=key, chunk_index=chunk_index, file_index=file_index
                )
                spans = _write_camera_video(video_path, workdir, key, group, fps, vcodec)
                for truth, (from_timestamp, to_timestamp) in zip(group, spans, strict=True):
                    rows[truth.episode_index] |= {
                        f"videos/{key}/chunk_index": chunk_index,
                        f"videos/{key}/file_index": file_index,
                        f"videos/{key}/from_timestamp": from_timestamp,
                        f"videos/{key}/to_timestamp": to_timestamp,
                    }
                if first == 0:
                    features[key]["info"] = _video_info(video_path, fps, vcodec, flavor)
            chunk_index, file_index = _next_file(chunk_index, file_index, chunks_size)
    return rows, episode_stats


def _write_episodes(
    root: Path,
    rows: list[dict[str, Any]],
    episode_stats: list[dict[str, dict[str, np.ndarray]]],
    flavor: Flavor,
) -> None:
    """meta/episodes: each row with its stats, in row groups of lerobot's metadata buffer."""
    for row, stats in zip(rows, episode_stats, strict=True):
        row |= _flat_stats(stats)
        row |= {"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0}
    if flavor == "converted-v2.1":  # the converter's merge order
        first_keys = ["episode_index", "data/chunk_index", "data/file_index"]
        first_keys += ["dataset_from_index", "dataset_to_index"]
        first_keys += sorted(k for k in rows[0] if k.startswith("videos/"))
        first_keys += ["tasks", "length"]
        rows = [{k: row[k] for k in first_keys} | row for row in rows]
    episodes_path = root / EPISODES_PATH.format(chunk_index=0, file_index=0)
    episodes_path.parent.mkdir(parents=True)
    step = len(rows) if flavor == "converted-v2.1" else _EPISODES_PER_ROW_GROUP
    batches = [pa.Table.from_pylist(rows[i : i + step]) for i in range(0, len(rows), step)]
    with pq.ParquetWriter(
        episodes_path, batches[0].schema, compression="snappy", use_dictionary=True
    ) as writer:
        for batch in batches:
            writer.write_table(batch.cast(batches[0].schema))


def _info(
    *,
    flavor: Flavor,
    fps: int,
    features: dict[str, dict[str, Any]],
    episodes: int,
    total_frames: int,
    total_tasks: int,
    chunks_size: int,
    video: bool,
    robot_type: str | None,
) -> dict[str, Any]:
    """meta/info.json, its keys in the order the flavour's writer puts them."""
    total = {
        "total_episodes": episodes,
        "total_frames": total_frames,
        "total_tasks": total_tasks,
    }
    files = {
        "chunks_size": chunks_size,
        "data_files_size_in_mb": DATA_FILES_SIZE_IN_MB,
        "video_files_size_in_mb": VIDEO_FILES_SIZE_IN_MB,
    }
    paths = {"data_path": DATA_PATH, "video_path": VIDEO_PATH if video else None}
    splits = {"splits": {"train": f"0:{episodes}"}}
    info: dict[str, Any]
    if flavor == "lerobot-0.6":  # dataclasses.asdict(DatasetInfo)
        info = {"codebase_version": CODEBASE_VERSION, "fps": fps, "features": features}
        info |= total | files | paths | {"robot_type": robot_type} | splits
    elif flavor == "converted-v2.1":  # the v2.1 info.json, edited in place
        info = {"codebase_version": CODEBASE_VERSION, "robot_type": robot_type} | total
        info |= {"chunks_size": chunks_size, "fps": fps} | splits | paths
        info |= {"features": features} | {k: v for k, v in files.items() if k != "chunks_size"}
    else:  # create_empty_dataset_info
        info = {"codebase_version": CODEBASE_VERSION, "robot_type": robot_type} | total
        info |= files | {"fps": fps} | splits | paths | {"features": features}
    return info


def _aggregated_stats(
    episode_stats: list[dict[str, dict[str, np.ndarray]]],
) -> dict[str, dict[str, Any]]:
    """meta/stats.json: every feature's stats over all episodes, as lists."""
    return {
        key: {
            name: value.tolist()
            for name, value in _aggregate([s[key] for s in episode_stats]).items()
        }
        for key in episode_stats[0]
    }


def write_lerobot_dataset(
    root: str | Path,
    *,
    episodes: int = 2,
    frames: int | Sequence[int] = 20,
    cameras: Sequence[str] = ("top", "wrist"),
    video: bool = True,
    vcodec: str = "libsvtav1",
    episodes_per_file: int | None = None,
    chunks_size: int = DEFAULT_CHUNK_SIZE,
    fps: int = 30,
    height: int = 48,
    width: int = 64,
    robot_type: str | None = "aloha",
    motor_names: Sequence[str] | None = None,
    tasks: Sequence[str] = ("pick up the cube", "put it in the bowl"),
    image_format: Literal["png", "jpeg"] = "png",
    flavor: Flavor = "lerobot-0.4",
    seed: int = 0,
) -> list[LeRobotEpisodeTruth]:
    """Write a LeRobot v3.0 dataset at `root` (created; an error if it is a non-empty dir).

    `episodes` episodes of `frames` frames (one length, or one per episode); camera `c` is the
    feature `observation.images.<c>`, an mp4 per file (`video=True`, codec `vcodec`) or PNG /
    JPEG bytes in the data parquet (`video=False`). `episodes_per_file` episodes share a data
    file and a video file per camera (None: all of them), `chunks_size` files a chunk
    directory. Episode e does `tasks[e % len(tasks)]`. `motor_names` (default ALOHA's 14)
    name the state and action channels. `flavor` picks which writer's quirks to follow:
    lerobot 0.4 (most v3.0 datasets), lerobot 0.6 (tasks column `task`, encoder settings in
    the video info, info.json in dataclass order), or a dataset converted from v2.1
    (variable-length lists, `names: {"motors": [...]}`, `fps` on features, no quantiles).
    """
    root = Path(root)
    lengths, per_file = _check_arguments(
        root,
        episodes=episodes,
        frames=frames,
        tasks=tasks,
        video=video,
        vcodec=vcodec,
        image_format=image_format,
        episodes_per_file=episodes_per_file,
    )
    motors = list(ALOHA_MOTORS if motor_names is None else motor_names)
    camera_keys = [IMAGE_PREFIX + camera for camera in cameras]
    truths, task_list = _episode_truths(lengths, tasks, motors, camera_keys, height, width, seed)
    features = _features(motors, camera_keys, height, width, video, fps, flavor)
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta").mkdir()
    rows, episode_stats = _write_files(
        root,
        truths,
        per_file=per_file,
        chunks_size=chunks_size,
        camera_keys=camera_keys,
        features=features,
        video=video,
        vcodec=vcodec,
        fps=fps,
        image_format=image_format,
        flavor=flavor,
    )
    _write_episodes(root, rows, episode_stats, flavor)
    _write_tasks(root, task_list, flavor)
    info = _info(
        flavor=flavor,
        fps=fps,
        features=features,
        episodes=episodes,
        total_frames=sum(lengths),
        total_tasks=len(task_list),
        chunks_size=chunks_size,
        video=video,
        robot_type=robot_type,
    )
    _write_json(root / INFO_PATH, info)
    _write_json(root / STATS_PATH, _aggregated_stats(episode_stats))
    return truths


def _write_json(path: Path, data: dict[str, Any]) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=4, ensure_ascii=False)
