"""Reading a LeRobot v3 dataset on disk, without the `lerobot` package: pyarrow and PyAV.

A v3 root holds `meta/info.json` (fps, robot_type, features, path templates),
`meta/tasks.parquet`, `meta/episodes/chunk-*/file-*.parquet` (per episode: its length,
its data file, and per camera its video file and from/to timestamps), the frames' rows in
`data/chunk-*/file-*.parquet`, and per camera `videos/<key>/chunk-*/file-*.mp4`, several
episodes to a file. Everything an import needs is checked by `LeRobotSource(root)` and
`check_episode`, before any frame is decoded, with errors naming the file and key.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from fractions import Fraction
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

IMAGE_PREFIX = "observation.images."
_BOOKKEEPING = ("timestamp", "frame_index", "episode_index", "index", "task_index")


class LeRobotFormatError(ValueError):
    """A dataset this reader cannot take, with the file and key at fault."""


@contextmanager
def lerobot_extra() -> Iterator[None]:
    """Around an import of the `lerobot` extra (pyarrow, av, PIL): a clear error without it."""
    try:
        yield
    except ImportError as exc:
        raise ImportError(
            f"reading LeRobot datasets needs {exc.name}: install polymimic-data[lerobot] "
            "(pyarrow, PyAV, Pillow)"
        ) from None


def _pyarrow() -> Any:
    with lerobot_extra():
        import pyarrow.parquet as pq
    return pq


def _list_type_ids() -> set[int]:
    with lerobot_extra():
        import pyarrow as pa
    return {pa.list_(pa.float32()).id, pa.large_list(pa.float32()).id, pa.list_(pa.float32(), 1).id}


def camera_name(key: str) -> str:
    """`observation.images.top` -> `top`; any other key with its dots as underscores."""
    return key.removeprefix(IMAGE_PREFIX).replace(".", "_")


def channel_names(key: str, feature: dict[str, Any]) -> list[str]:
    """A vector feature's channel names, else `<key>_<i>`.

    `names` is a list, or a dict holding one list, as older datasets wrote them.
    """
    width = int(np.prod(feature["shape"]))
    names = feature.get("names")
    if isinstance(names, dict) and len(names) == 1:
        names = next(iter(names.values()))
    if isinstance(names, list) and len(names) == width and all(isinstance(n, str) for n in names):
        return list(names)
    return [f"{key.replace('.', '_')}_{i}" for i in range(width)]


@dataclass(frozen=True)
class LeRobotEpisode:
    """One episode's row of `meta/episodes`: where its rows and video frames are."""

    index: int
    length: int
    data_file: Path
    videos: dict[str, tuple[Path, float, float]]  # camera key -> (file, from_ts, to_ts)


class LeRobotSource:
    """A LeRobot v3 dataset root, its metadata read and checked."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        info_path = self.root / "meta" / "info.json"
        if not info_path.is_file():
            legacy = (self.root / "meta" / "episodes.jsonl").is_file()
            raise LeRobotFormatError(
                f"{info_path}: missing; "
                + (
                    "this is a LeRobot v2 dataset (meta/episodes.jsonl): convert it to v3.0 "
                    "with lerobot's `convert_dataset_v21_to_v30` first"
                    if legacy
                    else "not a LeRobot dataset root"
                )
            )
        try:
            self.info: dict[str, Any] = json.loads(info_path.read_text())
        except ValueError as exc:
            raise LeRobotFormatError(f"{info_path}: not JSON ({exc})") from None
        version = str(self.info.get("codebase_version", ""))
        if not version.startswith("v3."):
            raise LeRobotFormatError(
                f"{info_path}: codebase_version {version or None!r}; this reader takes v3.x. "
                "Convert a v2.x dataset with lerobot's `convert_dataset_v21_to_v30` first"
            )
        for field in ("fps", "features", "data_path"):
            if field not in self.info:
                raise LeRobotFormatError(f"{info_path}: field {field!r} is missing")
        self.fps = float(self.info["fps"])
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self.robot_type = str(self.info.get("robot_type") or "unknown")
        self.version = version

    @property
    def cameras(self) -> list[str]:
        """Feature keys of the cameras (video or image), in info.json's order."""
        return [k for k, f in self.features.items() if f.get("dtype") in ("video", "image")]

    def is_video(self, camera: str) -> bool:
        return self.features[camera]["dtype"] == "video"

    def vector_keys(self) -> list[str]:
        """Float features of one dimension, bookkeeping columns left out."""
        return [
            k
            for k, f in self.features.items()
            if k not in _BOOKKEEPING
            and str(f.get("dtype", "")).startswith("float")
            and len(f.get("shape", ())) == 1
        ]

    def feature(self, key: str) -> dict[str, Any]:
        if key not in self.features:
            raise LeRobotFormatError(
                f"{self.root / 'meta' / 'info.json'}: no feature {key!r}; it has "
                f"{sorted(self.features)}"
            )
        return self.features[key]

    @cached_property
    def tasks(self) -> dict[int, str]:
        """task_index -> task (meta/tasks.parquet: the task string is the index column)."""
        path = self.root / "meta" / "tasks.parquet"
        if not path.is_file():
            return {}
        table = _pyarrow().read_table(path).to_pydict()
        indices = table.get("task_index")
        names = table.get("task") or table.get("__index_level_0__")
        if indices is None or names is None:
            raise LeRobotFormatError(
                f"{path}: expected columns task_index and task (or the task as the index), "
                f"got {sorted(table)}"
            )
        return {int(i): str(t) for i, t in zip(indices, names, strict=True)}

    @cached_property
    def episodes(self) -> dict[int, LeRobotEpisode]:
        files = sorted((self.root / "meta" / "episodes").glob("chunk-*/file-*.parquet"))
        if not files:
            raise LeRobotFormatError(
                f"{self.root / 'meta' / 'episodes'}: no chunk-*/file-*.parquet files"
            )
        needed = ["episode_index", "length", "data/chunk_index", "data/file_index"]
        for camera in self.cameras:
            if self.is_video(camera):
                needed += [
                    f"videos/{camera}/{c}"
                    for c in ("chunk_index", "file_index", "from_timestamp", "to_timestamp")
                ]
        out: dict[int, LeRobotEpisode] = {}
        pq = _pyarrow()
        for path in files:
            names = pq.read_schema(path).names
            missing = [c for c in needed if c not in names]
            if missing:
                raise LeRobotFormatError(f"{path}: columns {missing} are missing")
            rows = pq.read_table(path, columns=needed).to_pylist()
            for row in rows:
                videos = {
                    camera: (
                        self._path("video_path", camera, row[f"videos/{camera}/chunk_index"],
                                   row[f"videos/{camera}/file_index"]),
                        float(row[f"videos/{camera}/from_timestamp"]),
                        float(row[f"videos/{camera}/to_timestamp"]),
                    )
                    for camera in self.cameras
                    if self.is_video(camera)
                }  # fmt: skip
                index = int(row["episode_index"])
                out[index] = LeRobotEpisode(
                    index,
                    int(row["length"]),
                    self._path("data_path", None, row["data/chunk_index"], row["data/file_index"]),
                    videos,
                )
        return dict(sorted(out.items()))

    def _path(self, template: str, camera: str | None, chunk: int, file: int) -> Path:
        pattern = self.info.get(template)
        if not pattern:
            raise LeRobotFormatError(f"{self.root / 'meta' / 'info.json'}: {template} is not set")
        return self.root / pattern.format(
            video_key=camera, chunk_index=int(chunk), file_index=int(file)
        )

    def check_episode(self, episode: LeRobotEpisode, keys: Sequence[str]) -> None:
        """Its files exist and its columns have info.json's shapes; reads no frame."""
        for path in [episode.data_file, *(v[0] for v in episode.videos.values())]:
            if not path.is_file():
                raise LeRobotFormatError(
                    f"episode {episode.index}: {path} is missing (named by meta/episodes)"
                )
        schema = _pyarrow().read_schema(episode.data_file)
        for key in keys:
            if key not in schema.names:
                raise LeRobotFormatError(f"{episode.data_file}: column {key!r} is missing")
            declared = int(np.prod(self.features[key]["shape"]))
            width = getattr(schema.field(key).type, "list_size", None)
            if width is not None and width != declared:
                raise LeRobotFormatError(
                    f"{episode.data_file}: column {key!r} holds {width} values per row; "
                    f"meta/info.json declares shape {self.features[key]['shape']}"
                )

    def rows(self, episode: LeRobotEpisode, keys: Sequence[str]) -> dict[str, np.ndarray]:
        """The episode's rows of `keys` (and frame_index, task_index), in frame order."""
        columns = list(dict.fromkeys([*keys, "episode_index", "frame_index", "task_index"]))
        table = _pyarrow().read_table(
            episode.data_file, columns=columns, filters=[("episode_index", "=", episode.index)]
        )
        out: dict[str, np.ndarray] = {}
        order = np.argsort(np.asarray(table.column("frame_index").to_numpy()), kind="stable")
        for key in columns:
            column = table.column(key)
            if key in keys and self.features[key]["dtype"] not in ("image", "video"):
                column = column.combine_chunks()
                # fixed-size lists as lerobot writes them; variable lists as converted
                # datasets have them; a plain column for a shape-(1,) feature
                flat = column.flatten() if column.type.id in _list_type_ids() else column
                values = np.array(flat.to_numpy(zero_copy_only=False))  # a copy, writable
                declared = int(np.prod(self.features[key]["shape"]))
                if values.size != declared * len(table):
                    raise LeRobotFormatError(
                        f"{episode.data_file}: column {key!r} holds {values.size} values for "
                        f"{len(table)} rows; meta/info.json declares shape "
                        f"{self.features[key]['shape']}"
                    )
                values = values.reshape(len(table), declared)
                out[key] = values[order]
            elif key in keys:
                out[key] = np.asarray(column.to_pylist(), dtype=object)[order]
            else:
                out[key] = np.asarray(column.to_numpy())[order]
        if len(table) != episode.length or not np.array_equal(
            out["frame_index"], np.arange(episode.length)
        ):
            raise LeRobotFormatError(
                f"{episode.data_file}: episode {episode.index} has {len(table)} rows with "
                f"frame_index not 0..{episode.length - 1}; meta/episodes says length "
                f"{episode.length}"
            )
        return out

    def video_frames(self, episode: LeRobotEpisode, camera: str) -> Iterator[np.ndarray]:
        """The episode's frames of one camera, (H, W, 3) uint8 RGB, decoded once.

        The file is seeked to the episode's `from_timestamp` (back to the keyframe before
        it); frames before it are decoded and dropped; `length` frames follow.
        """
        with lerobot_extra():
            import av
        path, start, _ = episode.videos[camera]
        tolerance = 0.5 / self.fps
        with av.open(str(path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            time_base = stream.time_base or Fraction(1, 1)
            container.seek(int(start / time_base), stream=stream, backward=True)
            taken = 0
            for frame in container.decode(stream):
                if frame.pts is None:
                    continue
                time = float(frame.pts * time_base)
                if time < start - tolerance:
                    continue
                expected = start + taken / self.fps
                if abs(time - expected) > tolerance:
                    raise LeRobotFormatError(
                        f"{path}: episode {episode.index}, camera {camera!r}: frame {taken} is "
                        f"at {time:.4f} s, expected {expected:.4f} s (from_timestamp {start})"
                    )
                yield frame.to_ndarray(format="rgb24")
                taken += 1
                if taken == episode.length:
                    return
        raise LeRobotFormatError(
            f"{path}: episode {episode.index}, camera {camera!r}: {taken} frames from "
            f"{start} s, expected {episode.length}"
        )
