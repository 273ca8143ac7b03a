"""The robot driven in the hands' layout: `aloha_as_hands/<task>`, for a policy that never saw it.

h2r's N = 0 control (benchmarks/h2r.py): a policy trained on `hands/<task>` alone acts on the
robot of `aloha_ego_masked/<task>` (ALOHA's mocap robot seen from its head camera at the
person's viewpoint, its arms masked as the hands' are drawn) through the hands' own layout
(`sim/hands`), so what it learnt from the hands is all it has, and nothing untrained (a
readout, a stem, a head's gripper channel) stands between it and the robot:

- observation: per hand the gripper's pose and its keypoints (the two fingertips and the
  grasp point) read from the robot's physics, exactly (no tracking noise, never the
  not-detected sentinel: a robot knows where its grippers are), in the form the loader gives
  `sim/hands` episodes: position and rot6d in the head camera's frame, keypoints in the
  wrist's frame. The head holds still where `aloha_ego`'s camera is.
- action (the same 36 channels: the hands at the next frame): each gripper's mocap target is
  where it holds the gripper at the predicted wrist pose (the weld between them holds the
  target 13.5 cm ahead of the wrist, along the fingers: a target at the wrist's pose would
  hold it 13.5 cm short), within the robot's workspace and step limits (aloha_ee_tasks');
  its opening comes from the predicted fingertips' distance, the gripper's own geometry
  inverted (`Fingertips`): an opening under GRASP (0.8 of the gripper's travel) is a grasp
  and closes it fully. A hand holding the cube shows the cube's width (openings 0.5 to 0.75
  in the recorded hands episodes; open, 0.9 and more), and a position-controlled gripper
  commanded to that width would not squeeze it.
- the hands' timing: 30 frames a second, each one or two ticks of the 50 Hz physics; an
  episode runs the robot's 400 ticks (240 frames), and gym-aloha's 300 (180 frames) is the
  registered limit. The scripted expert is the robot's, at that rate.

It evaluates; it records nothing (a person's episodes are `hands/<task>`'s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from polymimic_data.geometry import (
    convert,
    express_in,
    invert,
    matrix_to_pose,
    points_in_frame,
    pose_to_matrix,
)
from polymimic_sim.tasks.aloha_ee_tasks import MAX_STEP, limited
from polymimic_sim.tasks.aloha_tasks import MAX_STEPS, REGISTERED_STEPS, _gym_aloha, head_pose
from polymimic_sim.tasks.camera_frames import camera_to_world
from polymimic_sim.tasks.hands_tasks import SIDES, TICKS_PER_FRAME, HandsTask, HeadMotion
from polymimic_sim.tasks.task_types import Step, observation_of

HAND_WIDTH = 3 + 6 + 9  # per hand in the hands' layout: position, rot6d, 3 keypoints
GRASP = 0.8  # an opening under this (of the gripper's travel) is a grasp: closed fully


@dataclass(frozen=True)
class Fingertips:
    """A gripper's keypoints in its wrist's frame as a function of its opening (0 .. 1).

    The fingers slide apart along `axis` about `middle` (the grasp point): the fingertips'
    distance is `closed + travel * opening`, `travel` twice a finger's joint travel.
    """

    middle: np.ndarray  # (3,) the grasp point, midway between the fingertips
    axis: np.ndarray  # (3,) unit, from the right fingertip to the left one
    closed: float  # the fingertips' distance at opening 0
    travel: float  # how much further apart they are at opening 1

    @classmethod
    def measured(cls, keypoints: np.ndarray, opening: float, travel: float) -> Fingertips:
        """From keypoints (9,) in the wrist's frame seen at a known `opening`."""
        left, right = keypoints[0:3], keypoints[3:6]
        distance = float(np.linalg.norm(left - right))
        return cls((left + right) / 2, (left - right) / distance, distance - travel * opening,
                   travel)  # fmt: skip

    def keypoints(self, opening: float) -> np.ndarray:
        """(9,) the fingertips and the grasp point at `opening`."""
        half = 0.5 * (self.closed + self.travel * opening) * self.axis
        return np.concatenate([self.middle + half, self.middle - half, self.middle])

    def opening(self, keypoints: np.ndarray) -> float:
        """The opening (0 .. 1) keypoints (9,) show; 0 where they show a grasp (GRASP)."""
        distance = float(np.linalg.norm(keypoints[0:3] - keypoints[3:6]))
        opening = (distance - self.closed) / self.travel
        return 0.0 if opening < GRASP else min(opening, 1.0)


def hands_vector(head: np.ndarray, wrists: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
    """(36,) the hands' layout of world wrist poses (2, 7) and keypoints (2, 3, 3).

    As the loader gives `sim/hands` episodes: per hand the wrist's position and rot6d in the
    frame of the `head` pose (7,), then its keypoints in the wrist's own frame.
    """
    parts = []
    for wrist, points in zip(wrists, keypoints, strict=True):
        pose = express_in(head, wrist)
        parts += [pose[:3], convert(pose[3:7], "quaternion", "rot6d"),
                  points_in_frame(wrist, points).reshape(-1)]  # fmt: skip
    return np.concatenate(parts).astype(np.float32)


def weld_offsets(model: Any) -> np.ndarray:
    """(2, 4, 4) per gripper (left, right): its mocap target in its own frame, at rest.

    The inverse of the relative pose its weld holds (MuJoCo's `relpose`: the gripper in the
    target's frame).
    """
    offsets = np.zeros((len(SIDES), 4, 4))
    for i, side in enumerate(SIDES):
        (weld,) = [
            e for e in range(model.neq) if model.body(model.eq_obj1id[e]).name == f"mocap_{side}"
        ]
        offsets[i] = invert(pose_to_matrix(model.eq_data[weld][3:10]))
    return offsets


class StillHead(HeadMotion):
    """The robot's head camera: where `aloha_ego`'s is, and still."""

    def __init__(self) -> None:
        self.pose = head_pose()

    def next_pose(self) -> np.ndarray:
        """The same pose every frame."""
        return self.pose.copy()


class AlohaAsHandsTask(HandsTask):
    """`aloha_as_hands/<task>`: the masked robot in the hands' layout (module docstring)."""

    family = "aloha_as_hands"

    def __init__(self, task: str, **options: Any) -> None:
        super().__init__(task, **options)
        self.max_steps = round(MAX_STEPS / TICKS_PER_FRAME)
        self.registered_steps = round(REGISTERED_STEPS / TICKS_PER_FRAME)
        constants = _gym_aloha().constants
        # the fingers' distance grows by both fingers' joint travel from closed to open
        self.travel = 2 * (
            constants.PUPPET_GRIPPER_POSITION_OPEN - constants.PUPPET_GRIPPER_POSITION_CLOSE
        )
        self.fingertips: list[Fingertips] = []
        self.offsets = weld_offsets(self.model)

    def declaration(self) -> dict[str, Any]:
        """Nothing: this task records no episodes (ValueError naming the ones that do)."""
        raise ValueError(
            f"{self.name} drives the robot in the hands' layout to evaluate a policy trained on "
            f"hands/{self.task}; it records nothing: record hands/{self.task} (the person) or "
            f"aloha_ego_masked/{self.task} (the robot)"
        )

    def _head_motion(self) -> HeadMotion:
        return StillHead()

    def _time_warp(self) -> None:
        return None  # the robot expert's timing

    def _tracked(self, wrist: np.ndarray, keypoints: np.ndarray) -> np.ndarray:
        return np.concatenate([wrist, keypoints.reshape(-1)])  # exact, always seen

    def _observation(self) -> dict[str, Any]:
        """The hands' vector (36,) of the robot's grippers (module docstring)."""
        wrists, keypoints = self.hands()
        state = hands_vector(self.head, wrists, keypoints)
        return observation_of(state, self.render(), self.prompt)

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode from `seed`; each gripper's fingertips measured at its opening."""
        observation = super().reset(seed)
        openings = np.asarray(self.env.task.get_qpos(self.env.physics))[[6, 13]]
        hands = np.asarray(observation["state"], np.float64).reshape(2, HAND_WIDTH)
        self.fingertips = [
            Fingertips.measured(hands[i, 9:], float(openings[i]), self.travel) for i in range(2)
        ]
        return observation

    def world_target(self, action: np.ndarray) -> np.ndarray:
        """A (36,) hands' action as the robot's (16,) world target: poses, openings."""
        hands = self._checked(action, 2 * HAND_WIDTH).reshape(2, HAND_WIDTH)
        target = np.zeros(16)
        for i, hand in enumerate(hands):
            pose = np.concatenate([hand[:3], convert(hand[3:9], "rot6d", "quaternion")])
            wrist = pose_to_matrix(camera_to_world(self.head, pose))
            target[8 * i : 8 * i + 7] = matrix_to_pose(wrist @ self.offsets[i])
            target[8 * i + 7] = self.fingertips[i].opening(hand[9:])
        return target

    def hands_action(self, target: np.ndarray) -> np.ndarray:
        """A (16,) world target as the (36,) hands' action: `world_target`'s inverse."""
        parts = []
        for i in range(len(SIDES)):
            wrist = pose_to_matrix(target[8 * i : 8 * i + 7]) @ invert(self.offsets[i])
            pose = express_in(self.head, matrix_to_pose(wrist))
            parts += [pose[:3], convert(pose[3:7], "quaternion", "rot6d"),
                      self.fingertips[i].keypoints(float(target[8 * i + 7]))]  # fmt: skip
        return np.concatenate(parts).astype(np.float32)

    def step(self, action: np.ndarray) -> Step:
        """Move the grippers to the hands' action (36,) by the next frame.

        Each position within the workspace and MAX_STEP a tick of the last target, over the
        frame's one or two ticks (aloha_ee's limits).
        """
        assert self.seed is not None, "reset the task first"
        ticks = round((self.steps + 1) * TICKS_PER_FRAME) - round(self.steps * TICKS_PER_FRAME)
        target = limited(self.world_target(action), self._command, MAX_STEP * ticks)
        return super().step(target)

    def expert_action(self) -> np.ndarray:
        """The robot expert's target at the next frame, as the hands' action (36,)."""
        return self.hands_action(super().expert_action().astype(np.float64))
