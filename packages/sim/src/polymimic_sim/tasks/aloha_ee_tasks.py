"""ALOHA driven by end-effector poses, the way eva is: `aloha_ee/<task>`.

The same bimanual ViperX tasks as `aloha/<task>` (objects drawn from the seed the same way,
success the same top reward), run in their end-effector variant: each gripper follows a
mocap target (gym-aloha's `sim_end_effector` tasks, with aloha_tasks' weld fix). Poses are
in a camera's frame (+x right, +y down, +z forward), rotations as rot6d, so the policy sees
the arms as eva's layouts give them and no quaternion sign flip reaches a regression target:
the `top` camera's (it looks straight down: a level gripper sits at w = 0).

`aloha_ego/<task>` is the same robot seen as eva sees, through a camera on its head
(`front_1`, aria's name, as eva wears an Aria): fixed where a seated person's eyes would be,
the viewpoint of the person's egocentric camera in `hands/<task>` without the head's motion,
the arms drawn. Its poses are in that camera's frame, so it is its own embodiment
(`sim/aloha_ego`): its state and actions mean other things than `sim/aloha_ee`'s.

`aloha_ego_masked/<task>` is `aloha_ego` with the arms masked the way `hands/<task>` draws
them (the arms not drawn, the grippers skin-coloured; collisions unchanged): the sim's
form of EgoMimic's arm masking, which paints over the robot's and the person's arms so the
policy sees one kind of hand. It closes the appearance gap between the robot's frames and
the person's, to measure how much of the human-to-robot gap that gap is.

- state (20): per arm (left, then right) the gripper's position (3) and rotation (rot6d, 6)
  in the camera frame, and its opening (1; 0 closed .. 1 open);
- actions (20): per arm the target pose in the same form, and the commanded opening.

Episodes store them as eva does (`left.obs_ee_pose`, `left.cmd_ee_pose`: xyz + quaternion;
`left.obs_gripper`, `left.cmd_gripper`) and declare the rot6d conversion, so the loader gives
exactly the vectors the task takes. The scripted expert is the joint task's: its waypoints,
run here directly rather than replayed through joints.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from polymimic_data.geometry import convert
from polymimic_sim.tasks.aloha_tasks import (
    HEAD_CAMERA,
    MAX_STEPS,
    AlohaScene,
    mocap_plan,
)
from polymimic_sim.tasks.camera_frames import camera_pose, camera_to_world, world_to_camera
from polymimic_sim.tasks.task_types import Step, observation_of

EMBODIMENT = "sim/aloha_ee"
EGO_EMBODIMENT = "sim/aloha_ego"
MASKED_EMBODIMENT = "sim/aloha_ego_masked"
FRAME_CAMERA = "top"  # the camera whose frame the poses are in (the head camera's, with one)
SIDES = ("left", "right")
ARM_WIDTH = 10  # position 3, rot6d 6, gripper 1
# A robot's controller's limits on a target: within reach, and at most this far from the last
# one per tick (the expert moves under 1 cm a tick; a wild target would tear the weld apart
# and the simulator give up, as an untrained policy's did)
WORKSPACE = (np.array([-0.6, 0.0, 0.0]), np.array([0.6, 1.0, 0.6]))  # metres, world frame
MAX_STEP = 0.03  # metres per tick


def limited(command: np.ndarray, last: np.ndarray, max_step: float) -> np.ndarray:
    """A (16,) world command, each gripper's position kept near its last one.

    Within WORKSPACE and `max_step` metres of its position in `last` (the previous command).
    """
    command = command.copy()
    for hand in (0, 8):
        move = command[hand : hand + 3] - last[hand : hand + 3]
        length = float(np.linalg.norm(move))
        if length > max_step:
            move *= max_step / length
        command[hand : hand + 3] = np.clip(last[hand : hand + 3] + move, *WORKSPACE)
    return command


def arm_vector(poses: np.ndarray, grippers: np.ndarray) -> np.ndarray:
    """(2, 7) poses and (2,) openings -> the (20,) vector: per arm xyz, rot6d, opening."""
    rot6d = convert(poses[:, 3:7], "quaternion", "rot6d")
    return np.concatenate(
        [np.concatenate([poses[i, :3], rot6d[i], grippers[i : i + 1]]) for i in range(2)]
    ).astype(np.float32)


def split_arm_vector(vector: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The inverse of arm_vector: (2, 7) poses (unit quaternions) and (2,) openings."""
    arms = np.asarray(vector, np.float64).reshape(2, ARM_WIDTH)
    quats = convert(arms[:, 3:9], "rot6d", "quaternion")
    return np.concatenate([arms[:, :3], quats], axis=1), arms[:, 9].copy()


def episode_arrays(prefix: str, vectors: np.ndarray) -> dict[str, np.ndarray]:
    """(T, 20) vectors as eva-style keys: `<side>.<prefix>_ee_pose` (7) and `_gripper` (1)."""
    arms = np.asarray(vectors, np.float64).reshape(len(vectors), 2, ARM_WIDTH)
    quats = convert(arms[..., 3:9], "rot6d", "quaternion")
    arrays = {}
    for i, side in enumerate(SIDES):
        pose = np.concatenate([arms[:, i, :3], quats[:, i]], axis=1)
        arrays[f"{side}.{prefix}_ee_pose"] = pose.astype(np.float32)
        arrays[f"{side}.{prefix}_gripper"] = arms[:, i, 9:10].astype(np.float32)
    return arrays


class AlohaEndEffectorTask(AlohaScene):
    """One ALOHA task driven by end-effector targets (see the module docstring)."""

    embodiment = EMBODIMENT
    family = "aloha_ee"
    end_effector = True

    def __init__(self, task: str, **options: Any) -> None:
        super().__init__(task, **options)  # image_size, cameras, cheap_rendering, expert
        self.fps = 50.0
        self._camera = np.zeros(7)
        self._last = np.zeros(16)  # the last target sent (world frame)
        self._plan: tuple[np.ndarray, np.ndarray] | None = None

    def declaration(self) -> dict[str, Any]:
        """Its episodes' embodiment: eva's keys, poses in a camera's frame, rot6d."""
        groups = [
            {"name": f"{side}_{part}", "kind": kind, "width": width}
            for side in SIDES
            for part, kind, width in (("position", "position", 3), ("rotation", "rot6d", 6),
                                      ("gripper", "gripper", 1))
        ]  # fmt: skip
        return {
            "name": self.embodiment,
            "family": "robot",
            "fps": self.fps,
            "cameras": list(self.cameras),
            "state": [f"{s}.obs_{k}" for s in SIDES for k in ("ee_pose", "gripper")],
            "actions": [f"{s}.cmd_{k}" for s in SIDES for k in ("ee_pose", "gripper")],
            "rotation": "rot6d",
            "groups": groups,
        }

    def episode_arrays(self, states: np.ndarray, actions: np.ndarray) -> dict[str, np.ndarray]:
        """What an episode stores: the vectors as eva-style pose and gripper keys."""
        return episode_arrays("obs", states) | episode_arrays("cmd", actions)

    def _observation(self) -> dict[str, Any]:
        qpos = np.asarray(self.env.task.get_qpos(self.env.physics))
        poses = world_to_camera(self._camera, self.gripper_poses())
        state = arm_vector(poses, np.array([qpos[6], qpos[13]]))
        return observation_of(state, self.render(), self.prompt)

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode, its objects drawn from `seed`: the first observation."""
        self._plan = None
        self._reset_scene(seed)
        self._camera = (
            self.head
            if self.head is not None
            else camera_pose(self.env.physics.data.ptr, self.model.camera(FRAME_CAMERA).id)
        )
        self._last = self.mocap_commands()
        return self._observation()

    def to_world(self, action: np.ndarray) -> np.ndarray:
        """A (20,) camera-frame action as the end-effector task's (16,) world command."""
        poses, grippers = split_arm_vector(action)
        world = camera_to_world(self._camera, poses)
        return np.concatenate([world[0], grippers[:1], world[1], grippers[1:]])

    def _limited(self, command: np.ndarray) -> np.ndarray:
        """`command` with each position within WORKSPACE and MAX_STEP of the last target."""
        self._last = limited(command, self._last, MAX_STEP)
        return self._last

    def to_action(self, command: np.ndarray) -> np.ndarray:
        """A (16,) world command (the expert's) as the task's (20,) camera-frame action."""
        command = np.asarray(command, np.float64).reshape(2, 8)
        poses = world_to_camera(self._camera, command[:, :7])
        return arm_vector(poses, command[:, 7])

    def step(self, action: np.ndarray) -> Step:
        """Move each gripper's target to the action's pose and set its opening."""
        assert self.seed is not None, "reset the task first"
        target = self._checked(action, 2 * ARM_WIDTH)
        step = self.env.step(self._limited(self.to_world(target)))
        return self._ticked(float(step.reward or 0.0))

    def expert_action(self) -> np.ndarray:
        """The scripted expert's target for this tick, in the task's action form."""
        assert self.seed is not None, "reset the task first"
        if self._plan is None:  # planned from the grippers' start poses of this episode
            self._plan = mocap_plan(self.task, self.env.physics, self._poses[0], MAX_STEPS)
        tick = min(self.steps, MAX_STEPS - 1)
        left, right = self._plan
        return self.to_action(np.concatenate([left[tick], right[tick]]))


class AlohaEgoTask(AlohaEndEffectorTask):
    """`aloha_ego/<task>`: the end-effector robot through eva's head camera (module docstring)."""

    embodiment = EGO_EMBODIMENT
    family = "aloha_ego"
    default_cameras = (HEAD_CAMERA,)
    head_camera = True


class AlohaEgoMaskedTask(AlohaEgoTask):
    """`aloha_ego_masked/<task>`: eva's view, its arms masked as the hands' (module docstring)."""

    embodiment = MASKED_EMBODIMENT
    family = "aloha_ego_masked"
    masked = True
