"""`polymimic-data view`: episodes in rerun, the viewer robot-learning tools already use.

One rerun recording holds every episode asked for, each under `episodes/<hash>/` on its
own `frame` and `time` timelines (both from 0, so two episodes line up side by side,
an eva one beside an aria one):

- `images/<camera>`: the stored JPEG bytes as encoded images (never decoded and re-sent);
- `<key>/<channel>`: every numeric key as scalar series, the key's dots as path parts
  (`left/obs_ee_pose/x`, `left/obs_keypoints/4/y`); a bad value (NaN, the 1e9 sentinel) is
  a gap, not a spike;
- `world/<key>`: every pose (`*_pose`: xyz + quaternion w, x, y, z) as a 3D transform with
  axes, so the observed and commanded poses, the wrists and the head are seen in their
  frame; hand keypoints as 3D points with the hand's bones; the camera's frustum on the
  head where the episode has one (`obs_head_pose`: aria's egocentric camera);
- `annotations`: each language span at its first frame; `flags`: each frame that
  `validate --deep` would flag (NaN, the sentinel, a broken quaternion, a JPEG that does not
  decode), with the key and the reason.

Frames are sent in blocks of BLOCK per camera, so a long episode streams through in
pieces. Needs the `viz` extra (`pip install 'polymimic-data[viz]'`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from polymimic_data.embodiments.declared import declared_channel_names
from polymimic_data.episodes.bad_values import frame_faults
from polymimic_data.episodes.checks import decodes
from polymimic_data.store.episode_store import EpisodeReader

BLOCK = 256  # frames of one camera sent at once: a long episode streams in pieces
NUMERIC_BLOCK = 1024  # frames of one key's series, transforms and points sent at once
APPLICATION = "polymimic_data_view"
QUATERNION_NAMES = ("x", "y", "z", "qw", "qx", "qy", "qz")
AXIS_LENGTH = 0.05  # metres: the drawn axes of each pose
# bones of a hand's keypoints, by how many points it has: 21 is the MediaPipe/MANO order
# (the wrist, then four points per finger from thumb to little finger); 3 is polymimic-sim's
# (two fingertips and the grasp point between them)
BONES = {
    21: [(0, 1), (1, 2), (2, 3), (3, 4), (0, 5), (5, 6), (6, 7), (7, 8), (0, 9), (9, 10),
         (10, 11), (11, 12), (0, 13), (13, 14), (14, 15), (15, 16), (0, 17), (17, 18),
         (18, 19), (19, 20), (5, 9), (9, 13), (13, 17)],
    3: [(0, 2), (2, 1)],
}  # fmt: skip
SERVER_MEMORY = "1GiB"  # rerun's default: what its server keeps of a served recording
HEAD_POSE = "obs_head_pose"
HEAD_CAMERA = "front_1"


class MissingViewerError(ImportError):
    """rerun-sdk is not installed: the `viz` extra."""


def require_rerun(feature: str = "polymimic-data view", extra: str = "polymimic-data[viz]") -> Any:
    """The rerun module, or a MissingViewerError naming `feature` and the `extra` to install."""
    try:
        import rerun
    except ImportError as exc:
        raise MissingViewerError(
            f"{feature} needs rerun-sdk: pip install '{extra}' (uv sync --extra viz in the "
            "workspace)"
        ) from exc
    return rerun


class RecordingFile:
    """A rerun recording stream saved to `dest` (.rrd), whole or not at all.

    Written beside it (`<dest>.partial`) and renamed into place by `close`; `abort` drops
    it. Streams that share an `application` and a `recording_id` open as one recording
    when their files are opened together.
    """

    def __init__(self, dest: str | Path, application: str, recording_id: str, rr: Any) -> None:
        self.rr = rr
        self.dest = Path(dest)
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        self.partial = self.dest.with_name(self.dest.name + ".partial")
        self.rec = rr.RecordingStream(application, recording_id=recording_id)
        self.rec.save(os.fspath(self.partial))

    def close(self) -> Path:
        """Flush and move the recording into place."""
        self.rec.flush()
        self.rec.disconnect()
        self.partial.replace(self.dest)
        return self.dest

    def abort(self) -> None:
        """Drop a recording that failed part way: nothing at `dest`."""
        self.rec.disconnect()
        self.partial.unlink(missing_ok=True)


def log_chunk(rec: Any, entity: str, start: float, actions: Any, *, spacing: float = 1.0,
              names: Sequence[str] | None = None) -> None:  # fmt: skip
    """An action chunk predicted at the stream's current time, as the future it proposes.

    Per channel i (named by `names`, else its index), `<entity>/<name>` is a line over
    x = start, start + spacing, ... (one point per action step), so a later chunk that
    proposes another future shows as the line jumping.
    """
    import rerun

    chunk = np.asarray(actions, dtype=np.float64)
    chunk = chunk.reshape(-1, chunk.shape[-1])  # (H, A)
    x = start + spacing * np.arange(len(chunk), dtype=np.float64)
    labels = list(names) if names is not None else [str(i) for i in range(chunk.shape[1])]
    if len(labels) != chunk.shape[1]:
        raise ValueError(f"{entity}: {len(labels)} names for {chunk.shape[1]} action channels")
    for i, name in enumerate(labels):
        line = np.stack([x, chunk[:, i]], axis=1)
        rec.log(f"{entity}/{name}", rerun.LineStrips2D([line]))


def channel_names(reader: EpisodeReader, key: str, width: int) -> list[str]:
    """Names of a key's channels.

    The stored feature's names, else those the episode's embodiment declares for its one
    state or action key (polymimic-sim's joint-driven ALOHA: `left_waist`, ...), else by the
    key's kind.
    """
    features = reader.attrs.get("features") or {}
    named = (features.get(key) or {}).get("names")
    if named and len(named) == width:
        return [str(n) for n in named]
    declared = declared_channel_names(reader.attrs, key, width)
    if declared is not None:
        return declared
    if key.endswith("_pose") and width == 7:
        return list(QUATERNION_NAMES)
    if key.endswith("_keypoints") and width % 3 == 0:
        return [f"{i}/{axis}" for i in range(width // 3) for axis in "xyz"]
    if width == 1:
        return []  # the key's own series
    return [str(i) for i in range(width)]


def numeric_keys(reader: EpisodeReader) -> list[str]:
    """The episode's numeric arrays: everything but images and annotations."""
    stored = reader.keys()
    return [k for k in stored if not k.startswith("images.") and k != "annotations"]


def cameras(reader: EpisodeReader) -> list[str]:
    """The episode's cameras (`images.<camera>` keys)."""
    stored = reader.keys()
    return [k.removeprefix("images.") for k in stored if k.startswith("images.")]


def _path(key: str) -> str:
    return key.replace(".", "/")


class EpisodeLogger:
    """Sends one episode into a recording stream under `episodes/<hash>/`."""

    def __init__(self, rec: Any, reader: EpisodeReader) -> None:
        self.rr = require_rerun()
        self.rec = rec
        self.reader = reader
        self.root = f"episodes/{reader.hash}"
        self.frames = np.arange(reader.total_frames)
        fps = float(reader.attrs.get("fps") or 0.0)
        self.seconds = self.frames / fps if fps > 0 else None
        self.flagged: dict[int, list[str]] = {}

    def _indexes(self, frames: np.ndarray) -> list[Any]:
        rr = self.rr
        indexes = [rr.TimeColumn("frame", sequence=frames)]
        if self.seconds is not None:
            indexes.append(rr.TimeColumn("time", duration=self.seconds[frames]))
        return indexes

    def _send(self, entity: str, frames: np.ndarray, columns: Any) -> None:
        if len(frames):
            self.rec.send_columns(
                f"{self.root}/{entity}", indexes=self._indexes(frames), columns=columns
            )

    def _flag(self, frame: int, why: str) -> None:
        self.flagged.setdefault(int(frame), []).append(why)

    def log(self) -> None:
        """Everything the module docstring lists, for this episode."""
        self.rec.log(f"{self.root}", self.rr.TextDocument(self._description()), static=True)
        for key in numeric_keys(self.reader):
            self._numeric(key)
        for camera in cameras(self.reader):
            self._camera(camera)
        self._annotations()
        self._flags()

    def _description(self) -> str:
        attrs = self.reader.attrs
        return (
            f"{self.reader.hash}: {self.reader.embodiment}, {self.reader.total_frames} frames at "
            f"{attrs.get('fps', '?')} fps, task {attrs.get('task_name', '')!r} "
            f"({self.reader.path})"
        )

    def _numeric(self, key: str) -> None:
        values = self.reader.read_numeric(key)
        values = values.reshape(len(values), -1)
        bad, reasons = frame_faults(key, values)
        for frame in np.flatnonzero(bad):
            self._flag(int(frame), f"{key}: {reasons[frame]}")
        shown = np.where(np.isfinite(values) & (np.abs(values) < 1e8), values, np.nan)
        names = channel_names(self.reader, key, values.shape[1])
        pose = key.endswith("_pose") and values.shape[1] == 7
        if pose:
            self.rec.log(f"{self.root}/world/{_path(key)}", self.rr.TransformAxes3D(AXIS_LENGTH),
                         static=True)  # fmt: skip
        for start in range(0, len(values), NUMERIC_BLOCK):  # a long episode, a piece at a time
            frames = self.frames[start : start + NUMERIC_BLOCK]
            part, ok = shown[frames], ~bad[frames]
            for i, name in enumerate(names or [""]):
                entity = f"{_path(key)}/{name}" if name else _path(key)
                self._send(entity, frames, self.rr.Scalars.columns(scalars=part[:, i]))
            if pose:
                self._pose(key, frames[ok], values[frames[ok]])
            elif key.endswith("_keypoints") and values.shape[1] % 3 == 0:
                self._keypoints(key, frames[ok], values[frames[ok]].reshape(int(ok.sum()), -1, 3))
        if pose and key == HEAD_POSE and HEAD_CAMERA in cameras(self.reader):
            self._frustum(f"world/{_path(key)}/{HEAD_CAMERA}")

    def _pose(self, key: str, frames: np.ndarray, poses: np.ndarray) -> None:
        xyzw = np.concatenate([poses[:, 4:7], poses[:, 3:4]], axis=1)
        columns = self.rr.Transform3D.columns(translation=poses[:, :3], quaternion=xyzw)
        self._send(f"world/{_path(key)}", frames, columns)

    def _frustum(self, entity: str) -> None:
        """The egocentric camera's frustum on the head.

        Its intrinsics are not stored: a nominal field of view, the image's aspect.
        """
        rr = self.rr
        height, width = _jpeg_size(self.reader.read_jpeg(HEAD_CAMERA, 0))
        pinhole = rr.Pinhole(
            fov_y=1.2,
            aspect_ratio=width / height,
            camera_xyz=rr.ViewCoordinates.RDF,  # +x right, +y down, +z forward
            image_plane_distance=0.1,
        )
        self.rec.log(f"{self.root}/{entity}", pinhole, static=True)

    def _keypoints(self, key: str, frames: np.ndarray, points: np.ndarray) -> None:
        rr = self.rr
        entity = f"world/{_path(key)}"
        count = points.shape[1]
        lengths = [count] * len(frames)
        columns = rr.Points3D.columns(positions=points.reshape(-1, 3)).partition(lengths=lengths)
        self._send(entity, frames, columns)
        bones = BONES.get(count)
        if bones:
            strips = points[:, np.array(bones)]  # (T, bones, 2, 3)
            columns = rr.LineStrips3D.columns(strips=strips.reshape(-1, 2, 3))
            self._send(
                f"{entity}/bones", frames, columns.partition(lengths=[len(bones)] * len(frames))
            )

    def _camera(self, camera: str) -> None:
        rr = self.rr
        for start in range(0, self.reader.total_frames, BLOCK):
            stop = min(start + BLOCK, self.reader.total_frames)
            blobs, frames = [], []
            for frame in range(start, stop):
                try:
                    data = self.reader.read_jpeg(camera, frame)
                    decodes(data)
                except Exception as exc:
                    self._flag(frame, f"images.{camera}: {exc}")
                    continue
                blobs.append(data)
                frames.append(frame)
            columns = rr.EncodedImage.columns(blob=blobs, media_type=["image/jpeg"] * len(blobs))
            self._send(f"images/{camera}", np.asarray(frames, dtype=np.int64), columns)

    def _annotations(self) -> None:
        rr = self.rr
        for span in self.reader.read_annotations():
            start, stop = int(span.get("start_idx", 0)), int(span.get("end_idx", 0))
            self._at(start)
            self.rec.log(f"{self.root}/annotations",
                         rr.TextLog(f"{span.get('text', '')} [frames {start}-{stop})"))  # fmt: skip

    def _flags(self) -> None:
        rr = self.rr
        for frame, why in sorted(self.flagged.items()):
            self._at(frame)
            self.rec.log(
                f"{self.root}/flags", rr.TextLog("; ".join(why), level=rr.TextLogLevel.WARN)
            )
        self.rec.reset_time()

    def _at(self, frame: int) -> None:
        self.rec.set_time("frame", sequence=frame)
        if self.seconds is not None and frame < len(self.seconds):
            self.rec.set_time("time", duration=float(self.seconds[frame]))


def _jpeg_size(data: bytes) -> tuple[int, int]:
    import simplejpeg

    height, width, _, _ = simplejpeg.decode_jpeg_header(data)
    return int(height), int(width)


def blueprint(readers: Sequence[EpisodeReader]) -> Any:
    """The layout a recording opens in.

    Per episode its 3D world, its cameras and one plot per numeric key (all its channels in
    it); episodes side by side, in tabs past three.
    """
    import rerun.blueprint as rrb

    columns = []
    for reader in readers:
        root = f"episodes/{reader.hash}"
        plots = [
            rrb.TimeSeriesView(origin=f"{root}/{_path(key)}", name=key)
            for key in numeric_keys(reader)
        ]
        images = [
            rrb.Spatial2DView(origin=f"{root}/images/{camera}", name=camera)
            for camera in cameras(reader)
        ]
        top = rrb.Horizontal(rrb.Spatial3DView(origin=f"{root}/world", name="world"), *images)
        events = rrb.TextLogView(origin=root, contents=[f"{root}/annotations", f"{root}/flags"],
                                 name="language and flags")  # fmt: skip
        columns.append(
            rrb.Vertical(top, rrb.Grid(*plots), events, row_shares=[2, 3, 1], name=reader.hash)
        )
    layout = rrb.Horizontal(*columns) if len(columns) <= 3 else rrb.Tabs(*columns)
    return rrb.Blueprint(layout, collapse_panels=False)


def send_episodes(rec: Any, paths: Sequence[Path], *, progress: bool = True) -> None:
    """The episodes at `paths` into `rec`, after the layout they open in (`blueprint`)."""
    from tqdm.auto import tqdm

    readers = [EpisodeReader(path) for path in paths]
    rec.send_blueprint(blueprint(readers))
    for reader in tqdm(readers, desc="view", unit="episode", disable=not progress):
        EpisodeLogger(rec, reader).log()
    rec.flush()


def _stream() -> Any:
    return require_rerun().RecordingStream(APPLICATION, recording_id=f"view-{time.time_ns()}")


def save_recording(paths: Sequence[Path], dest: Path, *, progress: bool = True) -> Path:
    """The episodes at `paths` as one rerun recording at `dest` (.rrd).

    Written beside it and renamed into place when whole, so an interrupted view leaves no
    half a file.
    """
    out = RecordingFile(dest, APPLICATION, f"view-{time.time_ns()}", require_rerun())
    try:
        send_episodes(out.rec, paths, progress=progress)
    except BaseException:
        out.abort()
        raise
    return out.close()


def serve_recording(
    paths: Sequence[Path],
    *,
    port: int,
    grpc_port: int,
    progress: bool = True,
    memory_limit: str = SERVER_MEMORY,
) -> tuple[Any, str]:
    """Serve the episodes in rerun's web viewer at http://localhost:`port`; (stream, url).

    The stream keeps the data; the caller keeps it alive while the viewer is wanted. rerun's
    server holds the whole recording in memory, for each browser that connects, up to
    `memory_limit` ("4GiB", "50%"); past it, the earliest data is dropped.
    """
    rec = _stream()
    url = rec.serve_grpc(grpc_port=grpc_port, server_memory_limit=memory_limit)
    require_rerun().serve_web_viewer(web_port=port, open_browser=False, connect_to=url)
    send_episodes(rec, paths, progress=progress)
    return rec, f"http://localhost:{port}/?url={url}"


def spawn_viewer(paths: Sequence[Path], *, progress: bool = True) -> None:
    """Open rerun's native viewer (a desktop) and send the episodes to it."""
    rec = _stream()
    rec.spawn()
    send_episodes(rec, paths, progress=progress)
