"""Converting a LeRobot v3 dataset into polymimic episodes: `polymimic-data import-lerobot`.

Each LeRobot episode becomes one episode folder, written atomically by EpisodeWriter, so
an interrupted import, run again, skips the finished ones. Vector features are copied
bit-exact as float32; video frames are decoded once per episode (seeked by its
timestamps) and stored as JPEG; image-mode JPEGs are kept as they are, other images
re-encoded. Each task becomes an annotation span. The episodes declare their embodiment
(`lerobot/<robot_type>`: state and action keys, joint and gripper groups named from the
channel names, the cameras), so the resolver knows it without the source.
"""

from __future__ import annotations

import io
import re
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import simplejpeg
from tqdm import tqdm

from polymimic_data.embodiments.declared import DECLARATION, check_declaration
from polymimic_data.lerobot.source import (
    LeRobotEpisode,
    LeRobotFormatError,
    LeRobotSource,
    camera_name,
    channel_names,
    lerobot_extra,
)
from polymimic_data.store.episode_store import EPISODE_SUFFIX, EpisodeWriter

STATE_KEY, ACTION_KEY = "observation.state", "action"


_ARM = re.compile(r"(left|right)[_.]", re.IGNORECASE)


def joint_groups(names: Sequence[str]) -> list[dict[str, Any]]:
    """Channel groups from channel names.

    Each gripper channel is its own `gripper` group; runs of other channels are `joint`
    groups (`joints`), one per arm where the names say which (`left_`, `right_`).
    """
    groups: list[dict[str, Any]] = []
    for name in names:
        if "gripper" in name.lower():
            groups.append({"name": name, "kind": "gripper", "width": 1})
            continue
        arm = _ARM.match(name)
        label = f"{arm[1].lower()}_joints" if arm else "joints"
        if groups and groups[-1]["kind"] == "joint" and groups[-1]["name"] == label:
            groups[-1]["width"] += 1
        else:
            groups.append({"name": label, "kind": "joint", "width": 1})
    seen: dict[str, int] = {}
    for group in groups:  # a name met twice (joints, gripper, joints) gets a suffix
        count = seen.get(group["name"], 0)
        seen[group["name"]] = count + 1
        if count:
            group["name"] = f"{group['name']}_{count + 1}"
    return groups


def declaration_for(
    source: LeRobotSource,
    cameras: Sequence[str],
    *,
    name: str | None = None,
    state_key: str = STATE_KEY,
    action_key: str = ACTION_KEY,
) -> dict[str, Any]:
    """The embodiment a converted episode declares (see polymimic_data.embodiments.declared)."""
    state, action = source.feature(state_key), source.feature(action_key)
    info = source.root / "meta" / "info.json"
    for key, feature in ((state_key, state), (action_key, action)):
        if len(feature.get("shape", ())) != 1 or not str(feature["dtype"]).startswith("float"):
            raise LeRobotFormatError(
                f"{info}: feature {key!r} must be a float vector, got dtype "
                f"{feature.get('dtype')!r} shape {feature.get('shape')}"
            )
    if state["shape"] != action["shape"]:
        raise LeRobotFormatError(
            f"{info}: {state_key!r} has shape {state['shape']} and {action_key!r} "
            f"{action['shape']}; a joint-space embodiment needs the same channels in both"
        )
    return {
        "name": name or f"lerobot/{source.robot_type}",
        "family": "robot",
        "fps": source.fps,
        "cameras": [camera_name(c) for c in cameras],
        "state": [state_key],
        "actions": [action_key],
        "channels": channel_names(action_key, action),
        "groups": joint_groups(channel_names(action_key, action)),
    }


def parse_episodes(text: str) -> list[int]:
    """`0,3-7` -> [0, 3, 4, 5, 6, 7]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not match:
            raise ValueError(f"--episodes: {part!r} is not N or N-M")
        lo, hi = int(match[1]), int(match[2] or match[1])
        if hi < lo:
            raise ValueError(f"--episodes: {part!r} runs backwards")
        out += range(lo, hi + 1)
    return list(dict.fromkeys(out))


def _jpeg(image: Any, quality: int) -> bytes:
    """Image-mode cell ({bytes, path}) or decoded frame -> JPEG bytes (JPEGs kept as are)."""
    if isinstance(image, np.ndarray):
        return simplejpeg.encode_jpeg(np.ascontiguousarray(image), quality=quality)
    data = image["bytes"] if isinstance(image, dict) else image
    if data is None:
        raise LeRobotFormatError(f"an image cell without bytes ({image.get('path')!r})")
    if data[:2] == b"\xff\xd8":
        return bytes(data)
    with lerobot_extra():
        from PIL import Image
    rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    return simplejpeg.encode_jpeg(np.ascontiguousarray(rgb), quality=quality)


def _spans(task_index: np.ndarray, tasks: dict[int, str]) -> list[tuple[str, int, int]]:
    """Contiguous runs of one task: (text, start, end)."""
    spans: list[tuple[str, int, int]] = []
    start = 0
    for i in range(1, len(task_index) + 1):
        if i == len(task_index) or task_index[i] != task_index[start]:
            spans.append((tasks.get(int(task_index[start]), ""), start, i))
            start = i
    return spans


@dataclass
class ImportReport:
    """What an import did: episodes written and skipped (already there), frames, seconds."""

    written: list[Path] = field(default_factory=list)
    skipped: list[Path] = field(default_factory=list)
    frames: int = 0
    seconds: float = 0.0
    embodiment: str = ""


def episode_path(dest: Path, source: LeRobotSource, index: int) -> Path:
    """The folder episode `index` of `source` is written to under `dest`."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", source.root.resolve().name)
    return dest / f"lerobot-{slug}-ep{index:06d}{EPISODE_SUFFIX}"


def _convert(
    source: LeRobotSource,
    episode: LeRobotEpisode,
    path: Path,
    *,
    cameras: Sequence[str],
    declaration: dict[str, Any],
    quality: int,
) -> None:
    vectors = source.vector_keys()
    image_cameras = [c for c in cameras if not source.is_video(c)]
    rows = source.rows(episode, [*vectors, *image_cameras])
    spans = _spans(rows["task_index"], source.tasks)
    attrs = {
        DECLARATION: declaration,
        "task": spans[0][0] if spans else "",
        "source": {
            "format": "lerobot",
            "dataset": str(source.root.resolve()),
            "codebase_version": source.version,
            "robot_type": source.robot_type,
            "fps": source.fps,
            "episode_index": episode.index,
        },
    }
    with EpisodeWriter(
        path,
        embodiment=declaration["name"],
        fps=source.fps,
        task_name=attrs["task"],
        task_description=attrs["task"],
        metadata=attrs,
        names={k: channel_names(k, source.feature(k)) for k in vectors},
    ) as writer:
        images: dict[str, list[bytes]] = {}
        for camera in cameras:
            if source.is_video(camera):
                frames = source.video_frames(episode, camera)
            else:
                frames = iter(rows[camera])
            images[camera_name(camera)] = [_jpeg(f, quality) for f in frames]
        writer.extend({k: rows[k].astype(np.float32, copy=False) for k in vectors}, images)
        for text, start, end in spans:
            writer.annotate(text, start, end)


def import_lerobot(
    src: str | Path,
    dest: str | Path,
    *,
    episodes: Iterable[int] | None = None,
    cameras: Sequence[str] | None = None,
    jpeg_quality: int = 90,
    embodiment: str | None = None,
    progress: bool = True,
) -> ImportReport:
    """Convert `src` (a LeRobot v3 root) into episode folders under `dest`.

    `episodes`: LeRobot episode indices (default all); `cameras`: short names (`top`) or
    keys (`observation.images.top`), default all; `embodiment`: the name to declare
    (default `lerobot/<robot_type>`). Every check (metadata, files, shapes) runs before the
    first frame is decoded; episodes already in `dest` are skipped.
    """
    if not 1 <= jpeg_quality <= 100:
        raise ValueError(f"--jpeg-quality: 1..100, got {jpeg_quality}")
    source = LeRobotSource(src)
    keys = source.cameras
    if cameras is not None:
        by_name = {camera_name(k): k for k in keys} | {k: k for k in keys}
        unknown = [c for c in cameras if c not in by_name]
        if unknown:
            raise LeRobotFormatError(
                f"{source.root}: cameras {unknown} not in the dataset; it has "
                f"{[camera_name(k) for k in keys]}"
            )
        keys = [by_name[c] for c in cameras]
    declaration = declaration_for(source, keys, name=embodiment)
    available = source.episodes
    wanted = list(available) if episodes is None else list(episodes)
    absent = [e for e in wanted if e not in available]
    if absent:
        raise LeRobotFormatError(
            f"{source.root}: episodes {absent} are not in meta/episodes "
            f"({len(available)} episodes, {min(available)}..{max(available)})"
        )
    image_keys = [k for k in keys if not source.is_video(k)]
    for index in wanted:
        source.check_episode(available[index], [*source.vector_keys(), *image_keys])
    check_declaration(declaration, source=str(source.root))  # after the checks: shapes first
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    report = ImportReport(embodiment=declaration["name"])
    todo: list[tuple[int, Path]] = []
    for index in wanted:
        path = episode_path(dest, source, index)
        if path.exists():
            report.skipped.append(path)
        else:
            todo.append((index, path))
    started = time.perf_counter()
    total = sum(available[i].length for i, _ in todo)
    with tqdm(total=total, unit="frame", desc="import-lerobot", disable=not progress) as bar:
        for index, path in todo:
            _convert(
                source,
                available[index],
                path,
                cameras=keys,
                declaration=declaration,
                quality=jpeg_quality,
            )
            report.written.append(path)
            report.frames += available[index].length
            bar.update(available[index].length)
            bar.set_postfix(episodes=f"{len(report.written)}/{len(todo)}")
    report.seconds = time.perf_counter() - started
    return report
