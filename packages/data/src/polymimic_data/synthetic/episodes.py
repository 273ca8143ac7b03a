"""A generator of learnable synthetic episodes in the real on-disk format.

Each episode shows two coloured targets; each arm (or hand) moves toward its target
from a random start, so the future trajectory follows from the image (where the
targets are) and the state (where the arm is). A policy that learns beats the mean.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import simplejpeg
from tqdm.auto import tqdm

from polymimic_data.embodiments.registry import CameraIntrinsics, Embodiment, get_embodiment
from polymimic_data.store.atomic_files import write_json_atomic
from polymimic_data.store.episode_store import EPISODE_SUFFIX, write_episode
from polymimic_data.synthetic.egoverse_layout import write_egoverse_episode

APPROACH_RATE = 0.07  # fraction of the remaining distance covered per frame
_SIDES = ("left", "right")
_TARGET_COLOURS = {"left": (230, 40, 40), "right": (40, 80, 230)}
_EFFECTOR_COLOURS = {"left": (250, 220, 40), "right": (40, 220, 230)}
_COMPLETE_MARKER = ".complete.json"


def _tilted_yaw_quaternion(yaw: np.ndarray, tilt: float, tilt_axis: float) -> np.ndarray:
    """Unit quaternions (w, x, y, z): a yaw about z composed with a fixed tilt in the xy plane."""
    c, s = np.cos(yaw / 2.0), np.sin(yaw / 2.0)
    w2 = np.cos(tilt / 2.0)
    x2, y2 = np.sin(tilt / 2.0) * np.cos(tilt_axis), np.sin(tilt / 2.0) * np.sin(tilt_axis)
    return np.stack([c * w2, c * x2 - s * y2, c * y2 + s * x2, s * w2], -1)


def _sample_point(rng: np.random.Generator, side: str) -> np.ndarray:
    x = rng.uniform(-0.22, -0.03) if side == "left" else rng.uniform(0.03, 0.22)
    return np.array([x, rng.uniform(-0.12, 0.12), rng.uniform(0.45, 0.75)])


def _approach(start: np.ndarray, target: np.ndarray, frames: int) -> np.ndarray:
    """Exponential approach: x_t = target + (1 - rate)^t (start - target)."""
    decay = (1.0 - APPROACH_RATE) ** np.arange(frames, dtype=np.float64)
    return target + decay[:, None] * (start - target)[None, :]


def _draw_disc(
    image: np.ndarray, centre: np.ndarray, radius: float, colour: tuple[int, ...]
) -> None:
    h, w = image.shape[:2]
    yy, xx = np.ogrid[:h, :w]
    mask = (xx - centre[0]) ** 2 + (yy - centre[1]) ** 2 <= radius**2
    image[mask] = colour


def _background(height: int, width: int) -> np.ndarray:
    ramp = np.linspace(70, 130, height, dtype=np.float32)[:, None, None]
    return np.broadcast_to(ramp, (height, width, 3)).astype(np.uint8).copy()


def _render(
    background: np.ndarray,
    intrinsics: CameraIntrinsics,
    targets: dict[str, np.ndarray],
    effectors: dict[str, np.ndarray],
) -> bytes:
    image = background.copy()
    scale = image.shape[1] / 160.0
    for side in _SIDES:
        t, e = targets[side], effectors[side]
        _draw_disc(image, intrinsics.project(t), 6.0 * scale * 0.6 / t[2], _TARGET_COLOURS[side])
        _draw_disc(image, intrinsics.project(e), 4.0 * scale * 0.6 / e[2], _EFFECTOR_COLOURS[side])
    return simplejpeg.encode_jpeg(image, quality=90, colorspace="RGB")


def _trajectories(rng: np.random.Generator, frames: int) -> tuple[dict, dict, dict]:
    """Per side: target point, (frames, 3) positions and (frames, 4) quaternions."""
    targets, positions, quats = {}, {}, {}
    for side in _SIDES:
        targets[side] = _sample_point(rng, side)
        positions[side] = _approach(_sample_point(rng, side), targets[side], frames)
        positions[side] += rng.normal(0.0, 0.0005, positions[side].shape)
        yaw = _approach(np.array([rng.uniform(-1, 1)]), np.array([rng.uniform(-1, 1)]), frames)
        quats[side] = _tilted_yaw_quaternion(
            yaw[:, 0], rng.uniform(0.0, 0.3), rng.uniform(0.0, 2 * np.pi)
        )
    return targets, positions, quats


def generate_episode(
    path: Path,
    embodiment: Embodiment,
    *,
    frames: int,
    height: int,
    width: int,
    seed: int,
    layout: str = "polymimic",
) -> Path:
    """Write one synthetic episode of `embodiment` at `path`.

    `layout`: "polymimic" (our writer) or "egoverse" (EgoVerse's writer's layout: zarr's
    default codecs, padded arrays, float64, an upper-case embodiment; see egoverse_layout).
    """
    if layout not in ("polymimic", "egoverse"):
        raise ValueError(f"layout must be 'polymimic' or 'egoverse', got {layout!r}")
    rng = np.random.default_rng(seed)
    intrinsics = embodiment.intrinsics["front_1"].scaled_to(height, width)
    targets, positions, quats = _trajectories(rng, frames)
    background = _background(height, width)
    images = {
        "front_1": [
            _render(
                background,
                intrinsics,
                targets,
                {s: positions[s][t] for s in _SIDES},
            )
            for t in range(frames)
        ]
    }
    arrays: dict[str, np.ndarray] = {}
    for side in _SIDES:
        pose = np.concatenate([positions[side], quats[side]], -1)
        arrays[f"{side}.obs_ee_pose"] = pose
        if embodiment.family == "robot":
            arrays[f"{side}.cmd_ee_pose"] = np.concatenate([pose[1:], pose[-1:]], 0)
            distance = np.linalg.norm(positions[side] - targets[side], axis=-1)
            arrays[f"{side}.gripper"] = np.clip(distance / 0.05, 0.0, 1.0)[:, None]
            joints = np.tanh(pose @ rng.normal(0, 1, (7, 7)))
            arrays[f"{side}.obs_joints"] = joints
            arrays[f"{side}.cmd_joints"] = np.concatenate([joints[1:], joints[-1:]], 0)
        else:
            arrays[f"{side}.obs_wrist_pose"] = pose + np.array([0, 0.02, 0, 0, 0, 0, 0])
            fingers = rng.normal(0, 0.03, (1, 21, 3)) + positions[side][:, None, :]
            arrays[f"{side}.obs_keypoints"] = fingers.reshape(frames, 63)
    if embodiment.family == "human":
        arrays["obs_head_pose"] = np.tile([0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0], (frames, 1))
    if embodiment.family == "robot":
        for camera in embodiment.cameras[1:]:
            images[camera] = images["front_1"]  # wrist views: the front view stands in
    egoverse = layout == "egoverse"
    write = write_egoverse_episode if egoverse else write_episode
    return write(
        path,
        embodiment=embodiment.name.upper() if egoverse else embodiment.name,
        fps=embodiment.fps,
        arrays={k: v.astype(np.float64 if egoverse else np.float32) for k, v in arrays.items()},
        images=images,
        annotations=[{"text": "reach the red and blue targets", "start_idx": 0, "end_idx": frames}],
        task_name="synthetic_reach",
        task_description="Move each arm to the target of its colour.",
        metadata={
            "synthetic": True,
            "camera_intrinsics": {
                "front_1": [
                    intrinsics.fx,
                    intrinsics.fy,
                    intrinsics.cx,
                    intrinsics.cy,
                    width,
                    height,
                ]
            },
        },
    )


def episode_name(embodiment: Embodiment, index: int, settings: dict) -> str:
    """EgoVerse-style hashes, distinct across generator settings.

    Timestamps for robot episodes, 24-hex ids for human ones.
    """
    digest = int(hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12], 16)
    if embodiment.family == "robot":
        rng = np.random.default_rng(digest)
        month, day, hour, minute, second = (
            int(rng.integers(lo, hi)) for lo, hi in ((1, 13), (1, 29), (0, 24), (0, 60), (0, 60))
        )
        return f"2026-{month:02d}-{day:02d}-{hour:02d}-{minute:02d}-{second:02d}-{index:06d}"
    return np.random.default_rng([digest, index]).bytes(12).hex()


def ensure_synthetic_episodes(
    root: str | Path,
    embodiment: str,
    *,
    episodes: int,
    frames: int,
    height: int = 128,
    width: int = 160,
    seed: int = 0,
    layout: str = "polymimic",
    progress: bool = True,
) -> Path:
    """Generate a synthetic data set once; later calls with the same settings reuse it.

    The episodes go to a folder named by the settings, so different settings never mix;
    an interrupted generation resumes where it stopped (each episode is atomic).
    `layout` picks the writer (see generate_episode).
    """
    spec = get_embodiment(embodiment)
    settings = {
        "embodiment": spec.name,
        "episodes": episodes,
        "frames": frames,
        "height": height,
        "width": width,
        "seed": seed,
    }
    name = f"{spec.name}-e{episodes}-f{frames}-{height}x{width}-s{seed}"
    if layout != "polymimic":  # existing folders keep their names
        settings["layout"] = layout
        name += f"-{layout}"
    folder = Path(root) / name
    marker = folder / _COMPLETE_MARKER
    if marker.exists() and json.loads(marker.read_text()) == settings:
        return folder
    folder.mkdir(parents=True, exist_ok=True)
    todo = [
        i
        for i in range(episodes)
        if not (folder / f"{episode_name(spec, i, settings)}{EPISODE_SUFFIX}").exists()
    ]
    for i in tqdm(todo, desc=f"generating {spec.name} episodes", disable=not progress):
        path = folder / f"{episode_name(spec, i, settings)}{EPISODE_SUFFIX}"
        try:
            generate_episode(
                path,
                spec,
                frames=frames,
                height=height,
                width=width,
                seed=seed * 100_003 + i,
                layout=layout,
            )
        except (FileExistsError, OSError):
            if not path.exists():  # not a concurrent generator that finished first
                raise
    write_json_atomic(marker, settings)
    return folder
