"""A person doing ALOHA's tasks: `hands/transfer_cube`, `hands/insertion` (recording only).

The human analog of `aloha_ee/<task>` (DESIGN.md, "the closed loop"): the same objects from
the same seed, the expert's motions, but holding only what human data holds, with its gaps:

- an egocentric camera (`front_1`, aria's name) where a seated person's eyes would be,
  looking down at the table from the front, not the robot's `top` camera; the head moves a
  little every frame (a slow random walk, about 2 cm and 2 degrees), recorded as
  `obs_head_pose` (xyz + quaternion in the world, +x right, +y down, +z forward);
- an appearance gap: the robot's arms are not drawn (transparent at render time; collisions
  unchanged); the grippers are the only "hands", drawn skin-coloured;
- no joints and no gripper command: per hand the wrist pose (`<side>.obs_wrist_pose`, the
  gripper's pose) and 3 keypoints (`<side>.obs_keypoints`: the two fingertips and the grasp
  point between them), in the world, as aria stores them; with hand-tracking noise (about
  1 cm and 2 degrees) and the 1e9 not-detected sentinel for a hand whose wrist is out of
  view. The declaration expresses them in the head's frame at each sample's frame and
  takes the next frame's poses as the actions, as aria's layouts do; the opening of a hand
  is the distance between its fingertips (keypoints in the wrist's frame).
- a person's timing: 30 Hz, and every segment between the expert's waypoints sped up or
  slowed down by up to 20% per episode (one time warp for both hands, so the hand-over
  still meets), so the demonstrations are not the robot's trajectories re-rendered.

The task steps the physics at the robot's 50 Hz: one 30 Hz frame is one or two ticks, the
mocap targets interpolated between frames. Its actions are the hands' world targets (16:
per hand xyz, quaternion, opening); they are not stored (a person's data has none). It
records; a policy is evaluated on `aloha_ee/<task>` (or `aloha_ego/<task>`, the robot
seeing from this viewpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from polymimic_data.geometry import matrix_to_quat, pose_to_matrix
from polymimic_sim.tasks.aloha_tasks import (
    EYE,
    GAZE,
    HEAD_CAMERA,
    MAX_STEPS,
    MUJOCO_HEAD_CAMERA,
    SCRIPTS,
    AlohaScene,
    mocap_plan,
)
from polymimic_sim.tasks.camera_frames import look_at, project
from polymimic_sim.tasks.task_types import Step, observation_of

EMBODIMENT = "sim/hands"
CAMERA = HEAD_CAMERA  # the episodes' name for the egocentric camera
MUJOCO_CAMERA = MUJOCO_HEAD_CAMERA  # the model's camera it moves (in front of the table)
SIDES = ("left", "right")
FPS = 30.0
TICKS_PER_FRAME = 50.0 / FPS  # the physics runs at the robot's 50 Hz
NOT_DETECTED = 1e9
POSITION_NOISE = 0.01 / np.sqrt(3)  # per axis: about 1 cm in all
ROTATION_NOISE = np.deg2rad(2.0)
KEYPOINT_NOISE = 0.003
TIMING = 0.2  # each segment takes (1 +- TIMING) of the expert's time
STATE_WIDTH = 2 * (7 + 9) + 7  # per hand wrist pose and keypoints, then the head's pose


def time_warp(task: str, rng: np.random.Generator) -> Any:
    """A person's timing: a piecewise-linear map of the expert's ticks.

    Each segment between waypoints is scaled by a factor in [1 - TIMING, 1 + TIMING], the
    same for both hands.
    """
    dummy = np.zeros(7)
    dummy[3] = 1.0
    left, right = SCRIPTS[task](dummy, dummy, np.zeros(14))
    knots = np.unique([w.t for w in left + right]).astype(np.float64)
    scales = rng.uniform(1 - TIMING, 1 + TIMING, size=len(knots) - 1)
    warped = np.concatenate([[knots[0]], knots[0] + np.cumsum(np.diff(knots) * scales)])
    return lambda ticks: np.interp(ticks, knots, warped)


def _rotation_noise(rng: np.random.Generator, sigma: float) -> np.ndarray:
    """A random rotation matrix of angle about N(0, sigma) about a random axis."""
    axis = rng.normal(size=3)
    axis /= np.linalg.norm(axis)
    angle = rng.normal(0.0, sigma)
    k = np.array([[0, -axis[2], axis[1]], [axis[2], 0, -axis[0]], [-axis[1], axis[0], 0]])
    return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * (k @ k)


class HeadMotion:
    """A person's head: a slow random walk of the eyes, the gaze point and the roll."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.eye = EYE + rng.uniform(-0.02, 0.02, size=3)
        self.gaze = GAZE + rng.uniform(-0.03, 0.03, size=3)
        self.drift = np.zeros(3)
        self.look = np.zeros(3)
        self.roll = 0.0

    def next_pose(self) -> np.ndarray:
        """The head's (camera's) pose at the next frame."""
        self.drift = np.clip(0.95 * self.drift + self.rng.normal(0, 0.002, 3), -0.02, 0.02)
        self.look = np.clip(0.95 * self.look + self.rng.normal(0, 0.004, 3), -0.03, 0.03)
        self.roll = float(np.clip(0.95 * self.roll + self.rng.normal(0, 0.3), -2.0, 2.0))
        rotation = look_at(self.eye + self.drift, self.gaze + self.look)
        c, s = np.cos(np.deg2rad(self.roll)), np.sin(np.deg2rad(self.roll))
        rotation = rotation @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]])
        return np.concatenate([self.eye + self.drift, matrix_to_quat(rotation)])


class HandsTask(AlohaScene):
    """A person doing one ALOHA task (see the module docstring); it records, not evaluates."""

    embodiment = EMBODIMENT
    family = "hands"
    end_effector = True
    head_camera = True  # a moving one: `head` is the person's pose at this frame
    masked = True
    default_cameras = (CAMERA,)  # its only one

    def __init__(self, task: str, **options: Any) -> None:
        cameras = options.get("cameras")
        if cameras and list(cameras) != list(self.default_cameras):  # none, or []: its own
            raise ValueError(f"cameras: hands/{task} has one camera, {CAMERA!r}; got {cameras}")
        merged: dict[str, Any] = {**options, "cameras": list(self.default_cameras)}
        super().__init__(task, **merged)
        self.camera_id = self.model.camera(MUJOCO_CAMERA).id
        self.fovy = float(self.model.cam_fovy[self.camera_id])
        self.fps = FPS
        self.max_steps = int(MAX_STEPS * (1 + TIMING) / TICKS_PER_FRAME)
        self._rng = np.random.default_rng(0)
        self._head = HeadMotion(self._rng)
        self.head = np.zeros(7)
        self._plan: tuple[np.ndarray, np.ndarray] | None = None
        self._command = np.zeros(16)

    def declaration(self) -> dict[str, Any]:
        """Its episodes' embodiment: aria's keys, in the head's frame, actions the next poses."""
        keys = [f"{s}.obs_{k}" for s in SIDES for k in ("wrist_pose", "keypoints")]
        groups = [
            {"name": f"{side}_{part}", "kind": kind, "width": width}
            for side in SIDES
            for part, kind, width in (("position", "position", 3), ("rotation", "rot6d", 6),
                                      ("keypoints", "keypoints", 9))
        ]  # fmt: skip
        return {
            "name": EMBODIMENT,
            "family": "human",
            "fps": self.fps,
            "cameras": [CAMERA],
            "state": keys,
            "actions": [[key, 1] for key in keys],
            "frame": "obs_head_pose",
            "rotation": "rot6d",
            "groups": groups,
        }

    def episode_arrays(self, states: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        """What an episode stores: aria's keys, from the observed states (no actions)."""
        del actions  # a person's data holds what was observed, not what was commanded
        states = np.asarray(states, np.float32)
        arrays = {}
        for i, side in enumerate(SIDES):
            arrays[f"{side}.obs_wrist_pose"] = states[:, 16 * i : 16 * i + 7]
            arrays[f"{side}.obs_keypoints"] = states[:, 16 * i + 7 : 16 * i + 16]
        arrays["obs_head_pose"] = states[:, 32:39]
        return arrays

    def hands(self) -> tuple[np.ndarray, np.ndarray]:
        """The true wrist poses (2, 7) and keypoints (2, 3, 3) in the world."""
        data = self.env.physics.data.ptr
        keypoints = []
        for side in SIDES:
            tips = [data.body(f"vx300s_{side}/{f}_finger_link").xpos for f in SIDES]
            keypoints.append(np.stack([tips[0], tips[1], (tips[0] + tips[1]) / 2]))
        return self.gripper_poses(), np.stack(keypoints)

    def _tracked(self, wrist: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
        """One hand as a tracker reports it: (16,) noisy, or the sentinel when out of view."""
        _, inside = project(self.head, self.fovy, self.image_size, wrist[None, :3])
        if not inside[0]:
            return np.full(16, NOT_DETECTED)
        noise = np.eye(4)
        noise[:3, :3] = _rotation_noise(self._rng, ROTATION_NOISE)
        noise[:3, 3] = self._rng.normal(0, POSITION_NOISE, 3)
        true = pose_to_matrix(wrist)
        seen = true @ noise  # the error in the wrist's own frame, carried by its keypoints
        relative = np.linalg.inv(true)
        points = keypoints @ relative[:3, :3].T + relative[:3, 3]
        points = points @ seen[:3, :3].T + seen[:3, 3]
        points += self._rng.normal(0, KEYPOINT_NOISE, points.shape)
        pose = np.concatenate([seen[:3, 3], matrix_to_quat(seen[:3, :3])])
        return np.concatenate([pose, points.reshape(-1)])

    def _observation(self) -> dict[str, Any]:
        wrists, keypoints = self.hands()
        hands = [self._tracked(wrists[i], keypoints[i]) for i in range(2)]
        state = np.concatenate([*hands, self.head]).astype(np.float32)
        return observation_of(state, self.render(), self.prompt)

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode: objects, timing, head motion and tracking noise from `seed`."""
        self._plan = None
        self._reset_scene(seed)
        self._rng = np.random.default_rng([int(seed), 2])  # apart from the objects' draw
        self._head = self._head_motion()
        self.head = self._head.next_pose()
        self._command = self.mocap_commands()
        return self._observation()

    def step(self, action: np.ndarray) -> Step:
        """Move the hands to `action` (16: per hand xyz, quaternion, opening) by the next frame."""
        assert self.seed is not None, "reset the task first"
        target = self._checked(action, 16)
        first = round(self.steps * TICKS_PER_FRAME)
        last = round((self.steps + 1) * TICKS_PER_FRAME)
        reward = 0.0
        for tick in range(first + 1, last + 1):
            fraction = (tick - first) / (last - first)
            command = self._command + fraction * (target - self._command)
            for hand in (0, 8):  # keep the quaternions unit
                command[hand + 3 : hand + 7] /= np.linalg.norm(command[hand + 3 : hand + 7])
            reward = max(reward, float(self.env.step(command).reward or 0.0))
        self._command = target
        self.head = self._head.next_pose()
        return self._ticked(reward)

    def _head_motion(self) -> HeadMotion:
        """The head's motion this episode (drawn from the episode's generator)."""
        return HeadMotion(self._rng)

    def _time_warp(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """The person's timing this episode (None: the robot expert's)."""
        return time_warp(self.task, self._rng)

    def expert_action(self) -> np.ndarray:
        """Where the expert's (re-timed) hands are at the next frame, in the world."""
        assert self.seed is not None, "reset the task first"
        if self._plan is None:
            warp = self._time_warp()
            ticks = int(np.ceil(warp(np.array([float(MAX_STEPS)]))[0])) if warp else MAX_STEPS
            self._plan = mocap_plan(self.task, self.env.physics, self._poses[0], ticks, warp)
        left, right = self._plan
        tick = min(round((self.steps + 1) * TICKS_PER_FRAME), len(left) - 1)
        return np.concatenate([left[tick], right[tick]]).astype(np.float32)
