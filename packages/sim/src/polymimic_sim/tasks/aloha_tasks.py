"""ALOHA's bimanual ViperX tasks (gym-aloha; the `aloha` extra): transfer_cube and insertion.

State is the 14 joint positions gym-aloha reports (per arm six joints, then the gripper
normalised to 0 closed .. 1 open); actions are the 14 joint targets in the same units, at
50 Hz. A seed draws the objects exactly as `gym_aloha.AlohaEnv.reset(seed=...)` does, so
seed N here is seed N there. Success is gym-aloha's: the task's top reward (4), when the
left gripper holds the cube in the air or the peg touches the socket's pin, in any one tick
(also when the right gripper never lets go of the cube: gym-aloha issue #4, ACT's own
definition). Strict success asks for the task done, then kept done for half a second (25
ticks in a row from the standard success's tick on):

- transfer_cube: the cube off the table, between both fingers of the left gripper (a cube
  lying on one finger, as one dropped after the touch can, is not held) and touched by no
  part of the right arm (the hand-over finished), for 0.5 s in a row;
- insertion: an end of the peg inside the socket's tube (by the two bodies' poses), neither
  object on the table, for 0.5 s in a row. Not "both grippers released": ACT's scripted
  expert (and so every demonstration) holds both objects to the end, so no policy could
  learn a release; what a momentary touch of the pin does not prove, and this does, is a
  peg that went in and stayed. Not the pin's contact for 0.5 s: a peg pushed home touches
  the pin on and off (the expert's contact comes and goes).

gym-aloha registers both tasks with a 300-step limit (`registered_steps`); episodes here may
run 400 (`max_steps`, the scripts' length, as ACT and LeRobot evaluate).

The scripted expert is ACT's recipe (Zhao et al. 2023) in our own code: waypoints for each
gripper (approach, grasp, lift, hand over or insert, release) run in the end-effector
(mocap) variant of the task, built from gym-aloha's XML with dm_control; the joint
positions that episode went through are then the actions replayed in the joint task. Two
things make that work under MuJoCo 3 (measured by the probe of issue 21):

- the mocap welds track orientation badly from MuJoCo 3.0 on (13 degrees at rest); their
  torque scale (`eq_data[:, 10] = 10`) restores MuJoCo 2.3's behaviour, without which a
  script closes on the cube's edge (5 of 20 succeed instead of 20 of 20);
- the end-effector task draws its objects unseeded; here it draws them from the seed, so
  the replay meets the objects the script saw.

Frames come from one MuJoCo renderer per camera, at the size asked for, with no shadows and
no multisampling (gym-aloha renders three 480x640 cameras every step, about 30x the cost).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from polymimic_data.geometry import matrix_to_quat
from polymimic_sim.tasks.camera_frames import look_at, place_camera
from polymimic_sim.tasks.rendering import (
    base_camera,
    camera_renderer,
    camera_views,
    ensure_headless_rendering,
    render_cameras,
)
from polymimic_sim.tasks.task_types import (
    HeldFor,
    MissingExtraError,
    Step,
    UnknownTaskError,
    observation_of,
    stock_expert_only,
)

EMBODIMENT = "sim/aloha"
JOINTS_MASKED_EMBODIMENT = "sim/aloha_joints_ego_masked"
DEFAULT_CAMERAS = ("top",)
# The egocentric camera: where a seated person's eyes would be, in front of the table,
# looking down at where the hands work. A person carries it on the head (hands/<task>,
# moving); eva carries one on its head too (aloha_ego/<task>, fixed). Both are the model's
# `angle` camera moved there; episodes call it aria's name.
HEAD_CAMERA = "front_1"
MUJOCO_HEAD_CAMERA = "angle"
EYE = np.array([0.0, 0.15, 0.5])
GAZE = np.array([0.0, 0.55, 0.05])
MAX_STEPS = 400  # the scripts' length (gym-aloha registers 300, too short for them)
REGISTERED_STEPS = 300  # gym-aloha's max_episode_steps for both tasks
HOLD_SECONDS = 0.5  # how long a strict success holds
WELD_TORQUE_SCALE = 10.0
PROMPTS = {
    "transfer_cube": "pick up the cube with the right arm and hand it to the left arm",
    "insertion": "pick up the peg and the socket and insert the peg into the socket",
}
SKIN = (0.87, 0.67, 0.55, 1.0)  # how a masked robot's grippers and a person's hands are drawn
_ARM = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate"]
CHANNELS = [f"{side}_{j}" for side in ("left", "right") for j in [*_ARM, "gripper"]]


def _gym_aloha() -> Any:
    ensure_headless_rendering()
    try:
        import dm_control.mujoco
        import dm_control.rl.control  # noqa: F401
        import gym_aloha.constants
        import gym_aloha.tasks.sim
        import gym_aloha.tasks.sim_end_effector
        import gym_aloha.utils
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            f"aloha tasks need the aloha extra ({exc.name} is missing): "
            "install polymimic-sim[aloha]"
        ) from exc
    return gym_aloha


def task_names() -> list[str]:
    """The ALOHA tasks with a scripted expert."""
    return sorted(PROMPTS)


# -- the scripted expert: waypoints of each gripper in the end-effector task ------------------


@dataclass(frozen=True)
class Waypoint:
    """Where one gripper is at tick `t`: position (m), orientation (w, x, y, z), opening."""

    t: int
    xyz: np.ndarray
    quat: np.ndarray
    gripper: float  # normalised: 0 closed, 1 open


def _about_y(quat: np.ndarray, degrees: float) -> np.ndarray:
    """`quat` turned by `degrees` about its own y axis (the Hamilton product quat * r)."""
    half = np.deg2rad(degrees) / 2
    w1, x1, y1, z1 = quat
    w2, y2 = np.cos(half), np.sin(half)
    return np.array([w1 * w2 - y1 * y2, x1 * w2 - z1 * y2, w1 * y2 + y1 * w2, z1 * w2 + x1 * y2])


def _off(base: np.ndarray, dx: float, dy: float, dz: float) -> np.ndarray:
    """`base` moved by (dx, dy, dz) metres."""
    return base + np.array([dx, dy, dz])


def interpolate(
    waypoints: Sequence[Waypoint],
    steps: int,
    warp: Callable[[np.ndarray], np.ndarray] | None = None,
) -> np.ndarray:
    """(steps, 8) mocap commands (position, unit quaternion, gripper), linear in between.

    `warp` maps the waypoints' ticks to the ticks they are reached at (a person's timing).
    """
    times = np.array([w.t for w in waypoints], dtype=np.float64)
    times = warp(times) if warp is not None else times
    values = np.stack([np.concatenate([w.xyz, w.quat, [w.gripper]]) for w in waypoints])
    ticks = np.arange(steps, dtype=np.float64)
    out = np.stack([np.interp(ticks, times, values[:, k]) for k in range(8)], axis=1)
    out[:, 3:7] /= np.linalg.norm(out[:, 3:7], axis=1, keepdims=True)
    return out


def _transfer_cube_script(
    left: np.ndarray, right: np.ndarray, objects: np.ndarray
) -> tuple[list[Waypoint], list[Waypoint]]:
    """The right gripper picks the cube, meets the left in the middle, which takes it."""
    cube = objects[:3]
    meet = np.array([0.0, 0.5, 0.25])
    pick = _about_y(right[3:], -60)  # the right gripper tilted down onto the cube
    take = np.array([np.cos(np.pi / 4), np.sin(np.pi / 4), 0, 0])  # 90 degrees about x
    level = np.array([1.0, 0, 0, 0])
    wp = Waypoint
    left_path = [
        wp(0, left[:3], left[3:], 0),
        wp(100, _off(meet, -0.1, 0, -0.02), take, 1),  # to the meeting point, open
        wp(260, _off(meet, 0.02, 0, -0.02), take, 1),  # around the cube
        wp(310, _off(meet, 0.02, 0, -0.02), take, 0),  # close on it
        wp(360, _off(meet, -0.1, 0, -0.02), level, 0),  # draw it away
        wp(MAX_STEPS, _off(meet, -0.1, 0, -0.02), level, 0),
    ]
    right_path = [
        wp(0, right[:3], right[3:], 0),
        wp(90, _off(cube, 0, 0, 0.08), pick, 1),  # above the cube, open
        wp(130, _off(cube, 0, 0, -0.015), pick, 1),  # down around it
        wp(170, _off(cube, 0, 0, -0.015), pick, 0),  # close
        wp(200, _off(meet, 0.05, 0, 0), pick, 0),  # lift it towards the meeting point
        wp(220, meet, pick, 0),
        wp(310, meet, pick, 1),  # let go once the left gripper holds it
        wp(360, _off(meet, 0.1, 0, 0), pick, 1),  # and move away
        wp(MAX_STEPS, _off(meet, 0.1, 0, 0), pick, 1),
    ]
    return left_path, right_path


def _insertion_script(
    left: np.ndarray, right: np.ndarray, objects: np.ndarray
) -> tuple[list[Waypoint], list[Waypoint]]:
    """The left gripper picks the socket, the right the peg; they meet, the peg goes in."""
    peg, socket = objects[:3], objects[7:10]
    meet = np.array([0.0, 0.5, 0.15])
    lift = 0.00715  # the peg held a little higher than the socket's opening
    # both tilted down, mirror images (from the right gripper's start: the two start level)
    left_quat, right_quat = _about_y(right[3:], 60), _about_y(right[3:], -60)
    wp = Waypoint
    left_path = [
        wp(0, left[:3], left[3:], 0),
        wp(120, _off(socket, 0, 0, 0.08), left_quat, 1),  # above the socket, open
        wp(170, _off(socket, 0, 0, -0.03), left_quat, 1),  # down around it
        wp(220, _off(socket, 0, 0, -0.03), left_quat, 0),  # close
        wp(285, _off(meet, -0.1, 0, 0), left_quat, 0),  # carry it to the middle
        wp(340, _off(meet, -0.05, 0, 0), left_quat, 0),  # and towards the peg
        wp(MAX_STEPS, _off(meet, -0.05, 0, 0), left_quat, 0),
    ]
    right_path = [
        wp(0, right[:3], right[3:], 0),
        wp(120, _off(peg, 0, 0, 0.08), right_quat, 1),
        wp(170, _off(peg, 0, 0, -0.03), right_quat, 1),
        wp(220, _off(peg, 0, 0, -0.03), right_quat, 0),
        wp(285, _off(meet, 0.1, 0, lift), right_quat, 0),
        wp(340, _off(meet, 0.05, 0, lift), right_quat, 0),  # into the socket
        wp(MAX_STEPS, _off(meet, 0.05, 0, lift), right_quat, 0),
    ]
    return left_path, right_path


Script = Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[list[Waypoint], list[Waypoint]]]
SCRIPTS: dict[str, Script] = {
    "transfer_cube": _transfer_cube_script,
    "insertion": _insertion_script,
}


# -- the tasks ---------------------------------------------------------------------------------


def object_poses(task: str, seed: int) -> np.ndarray:
    """The objects' poses (x, y, z, quaternion; the cube, or the peg then the socket)."""
    utils = _gym_aloha().utils
    if task == "transfer_cube":
        return np.asarray(utils.sample_box_pose(seed), np.float64)
    return np.concatenate(utils.sample_insertion_pose(seed)).astype(np.float64)


def environment(task: str, end_effector: bool, poses: list[np.ndarray]) -> Any:
    """A dm_control environment of `task` whose objects are `poses[0]` at every reset.

    Its observation is the joint state only: frames are rendered by the caller.
    """
    gym_aloha = _gym_aloha()
    from dm_control import mujoco as dm_mujoco
    from dm_control.rl import control

    joint, ee = gym_aloha.tasks.sim, gym_aloha.tasks.sim_end_effector
    base = {
        ("transfer_cube", False): joint.TransferCubeTask,
        ("insertion", False): joint.InsertionTask,
        ("transfer_cube", True): ee.TransferCubeEndEffectorTask,
        ("insertion", True): ee.InsertionEndEffectorTask,
    }[(task, end_effector)]

    class Seeded(base):  # type: ignore[misc, valid-type]
        def initialize_episode(self, physics: Any) -> None:
            if not end_effector:  # the joint tasks read the poses from a module global
                joint.BOX_POSE[0] = poses[0]
                return super().initialize_episode(physics)
            self.initialize_robots(physics)  # the end-effector tasks draw them unseeded
            physics.data.qpos[16 : 16 + len(poses[0])] = poses[0]
            return None

        def get_observation(self, physics: Any) -> dict[str, Any]:
            return {"qpos": self.get_qpos(physics)}

    prefix = "bimanual_viperx_end_effector_" if end_effector else "bimanual_viperx_"
    path = gym_aloha.constants.ASSETS_DIR / f"{prefix}{task}.xml"
    physics = dm_mujoco.Physics.from_xml_path(str(path))
    if end_effector:
        model: Any = physics.model  # dm_control's wrapper (mujoco's stubs lack eq_data)
        model.eq_data[:, 10] = WELD_TORQUE_SCALE  # the welds' torque scale: see the module
    dt = gym_aloha.constants.DT
    return control.Environment(
        physics, Seeded(), float("inf"), control_timestep=dt, flat_observation=False
    )


def mocap_plan(
    task: str,
    physics: Any,
    objects: np.ndarray,
    steps: int,
    warp: Callable[[np.ndarray], np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The scripted expert's mocap commands (steps, 8) per gripper, world frame, per tick.

    From the grippers' poses in `physics` (an end-effector task just reset) and the objects'
    poses; `warp` re-times the waypoints (see interpolate).
    """
    start_left = np.concatenate([physics.data.mocap_pos[0], physics.data.mocap_quat[0]])
    start_right = np.concatenate([physics.data.mocap_pos[1], physics.data.mocap_quat[1]])
    left_path, right_path = SCRIPTS[task](start_left, start_right, objects)
    return interpolate(left_path, steps, warp), interpolate(right_path, steps, warp)


def scripted_joint_trajectory(task: str, seed: int) -> tuple[np.ndarray, float]:
    """The joint targets (MAX_STEPS, 14) of the scripted episode from `seed`; its top reward.

    Row t holds the joint positions the end-effector episode reached at tick t, the grippers
    as commanded (their positions lag their commands).
    """
    poses = [object_poses(task, seed)]
    env = environment(task, True, poses)
    env.reset()
    left, right = mocap_plan(task, env.physics, poses[0], MAX_STEPS)
    targets, best = np.empty((MAX_STEPS, 14)), 0.0
    for tick in range(MAX_STEPS):
        step = env.step(np.concatenate([left[tick], right[tick]]))
        best = max(best, float(step.reward or 0.0))
        targets[tick] = step.observation["qpos"]
        targets[tick, 6], targets[tick, 13] = left[tick, 7], right[tick, 7]
    return targets, best


def contact_pairs(physics: Any) -> set[frozenset[str]]:
    """The pairs of geoms (by name, unordered) in contact now."""
    model, data = physics.model, physics.data
    return {
        frozenset((model.id2name(c.geom1, "geom"), model.id2name(c.geom2, "geom")))
        for c in (data.contact[i] for i in range(data.ncon))
    }


def _touching(contacts: set[frozenset[str]], name: str) -> set[str]:
    """The geoms `name` touches."""
    return {next(iter(pair - {name}), name) for pair in contacts if name in pair}


LEFT_FINGERS = {f"vx300s_left/10_{side}_gripper_finger" for side in ("left", "right")}


def _strict_transfer_cube(physics: Any, contacts: set[frozenset[str]]) -> bool:
    """The cube in the air, in the left gripper's grasp, nothing of the right arm on it.

    A grasp is both fingers on it: a cube lying on one finger is not held.
    """
    del physics  # contacts say it all
    touching = _touching(contacts, "red_box")
    right = any(name.startswith("vx300s_right/") for name in touching)
    return touching >= LEFT_FINGERS and not right and "table" not in touching


SOCKET_HALF_LENGTH, SOCKET_INNER, PEG_HALF_LENGTH = 0.06, 0.018, 0.06  # gym-aloha's XML (m)


def _strict_insertion(physics: Any, contacts: set[frozenset[str]]) -> bool:
    """An end of the peg inside the socket's tube, neither object on the table.

    Geometric, not the pin's contact: a peg pushed home touches the pin on and off as the
    grippers jiggle (the scripted expert's contact comes and goes), while it stays inside.
    """
    on_table = _touching(contacts, "table")
    if "red_peg" in on_table or any(name.startswith("socket-") for name in on_table):
        return False
    data = physics.named.data
    socket, rotation = np.asarray(data.xpos["socket"]), np.asarray(data.xmat["socket"])
    peg, axis = np.asarray(data.xpos["peg"]), np.asarray(data.xmat["peg"]).reshape(3, 3)[:, 0]
    for sign in (1.0, -1.0):  # each end, in the socket's frame (its tube along x)
        end = (peg + sign * PEG_HALF_LENGTH * axis - socket) @ rotation.reshape(3, 3)
        if abs(end[0]) < SOCKET_HALF_LENGTH and max(abs(end[1]), abs(end[2])) < SOCKET_INNER:
            return True
    return False


STRICT: dict[str, Callable[[Any, set[frozenset[str]]], bool]] = {
    "transfer_cube": _strict_transfer_cube,
    "insertion": _strict_insertion,
}


def hide_mocap_sites(model: Any) -> None:
    """Make the mocap targets' marker sites invisible: a policy must not see its own command."""
    model.site_rgba[:, 3] = 0.0


def hand_geoms(model: Any) -> tuple[list[int], list[int]]:
    """Geom ids of the arms (hidden) and of the grippers (the hands): each ViperX's bodies."""
    arms, hands = [], []
    for geom in range(model.ngeom):
        body = model.body(model.geom_bodyid[geom]).name
        if not body.startswith("vx300s_"):
            continue
        name = model.geom(geom).name
        is_hand = body.endswith(("gripper_link", "finger_link")) and "bar" not in name
        (hands if is_hand else arms).append(geom)
    return arms, hands


def draw_as_hands(model: Any) -> None:
    """Arms transparent, grippers skin-coloured (rendering only: collisions are unchanged)."""
    arms, hands = hand_geoms(model)
    model.geom_matid[arms + hands] = -1
    model.geom_rgba[arms, 3] = 0.0
    model.geom_rgba[hands] = SKIN


def head_pose(eye: np.ndarray = EYE, gaze: np.ndarray = GAZE) -> np.ndarray:
    """The egocentric camera's pose (7,: xyz, quaternion, project axes), level, at `eye`."""
    return np.concatenate([eye, matrix_to_quat(look_at(eye, gaze))])


class AlohaScene:
    """What every ALOHA task shares.

    Its name and prompt, the simulator with its objects placed from the seed, a renderer,
    the episode's seed and tick, `close`. A family (`aloha`, `aloha_ee`, `aloha_ego`,
    `hands`, ...) sets `family`, `end_effector` (the mocap variant of the task, its target
    markers hidden), `head_camera` (the robot carries eva's head camera, `front_1`: the
    model's `angle` camera moved to the person's viewpoint at `head`) and `masked` (the arms
    drawn as a person's hands are: `draw_as_hands`).
    """

    family = "aloha"
    expert_variant: str  # its scripted expert, the one there is (registry.expert_variant)
    end_effector = False
    default_cameras: tuple[str, ...] = DEFAULT_CAMERAS
    head_camera = False
    masked = False
    fps: float  # each family's rate of observations and actions

    def __init__(
        self,
        task: str,
        *,
        image_size: Sequence[int] = (96, 128),
        cameras: Sequence[str] | None = None,
        cheap_rendering: bool = True,
        expert: str | None = None,
    ) -> None:
        if task not in PROMPTS:
            raise UnknownTaskError(
                f"task {self.family}/{task}: gym-aloha has no such task; choose one of "
                f"{task_names()}"
            )
        self.task, self.name, self.prompt = task, f"{self.family}/{task}", PROMPTS[task]
        self.expert_variant = stock_expert_only(self.name, expert)
        self.cameras = list(cameras or self.default_cameras)
        if HEAD_CAMERA in self.cameras and not self.head_camera:
            raise ValueError(
                f"cameras: {HEAD_CAMERA!r} is the camera on eva's head; the robots that carry "
                f"it are aloha_ego/{task}, aloha_ego_masked/{task} and "
                f"aloha_joints_ego_masked/{task}"
            )
        moved = [c for c in self.cameras if base_camera(c) == MUJOCO_HEAD_CAMERA]
        if HEAD_CAMERA in self.cameras and moved:  # narrowed too (rendering.camera_view)
            raise ValueError(
                f"cameras: {HEAD_CAMERA!r} is the model's {MUJOCO_HEAD_CAMERA!r} camera moved to "
                f"the robot's head; ask for one of them, got {self.cameras}"
            )
        self.head = head_pose() if self.head_camera else None  # where `render` puts it
        self._poses: list[np.ndarray] = [object_poses(task, 0)]
        self.env = environment(task, self.end_effector, self._poses)
        self.model = self.env.physics.model.ptr
        if self.end_effector:
            hide_mocap_sites(self.model)
        if self.masked:
            draw_as_hands(self.model)
        self.image_size = tuple(int(v) for v in image_size)
        self.views = tuple(  # drawn from the model's cameras, each frame under its own name
            replace(view, name=camera)
            for camera, view in zip(
                self.cameras,
                camera_views(self.model, self.name, self.mujoco_cameras()),
                strict=True,
            )
        )
        self.renderer = camera_renderer(self.model, self.image_size, cheap_rendering)
        self.max_steps, self.registered_steps = MAX_STEPS, REGISTERED_STEPS
        self.seed: int | None = None
        self.steps = 0
        self._held = HeldFor(1)  # made at each reset, from the family's fps
        self._succeeded = False  # a standard success this episode

    def mujoco_cameras(self) -> list[str]:
        """The model's cameras that `render` draws: the head camera is its `angle` one, moved."""
        return [MUJOCO_HEAD_CAMERA if c == HEAD_CAMERA else c for c in self.cameras]

    def render(self) -> dict[str, np.ndarray]:
        """The cameras' frames of the current state, the head camera at the robot's head."""
        data = self.env.physics.data.ptr
        if HEAD_CAMERA in self.cameras and self.head is not None:
            place_camera(self.model, data, self.model.camera(MUJOCO_HEAD_CAMERA).id, self.head)
        return render_cameras(self.renderer, data, self.views)

    def _observation(self) -> dict[str, Any]:
        raise NotImplementedError  # each family observes in its own form

    def _checked(self, action: np.ndarray, width: int) -> np.ndarray:
        """`action` as float64 (width,), or ValueError naming the task."""
        target = np.asarray(action, dtype=np.float64)
        if target.shape != (width,) or not np.isfinite(target).all():
            raise ValueError(f"{self.name}: an action is ({width},) finite, got {target.shape}")
        return target

    def _ticked(self, reward: float) -> Step:
        """One tick done: its Step (a success at the task's top reward; strict: see the module)."""
        self.steps += 1
        success = reward >= self.env.task.max_reward
        self._succeeded = self._succeeded or success
        physics = self.env.physics  # held from the standard success on: it comes first
        strict = self._held.update(
            self._succeeded and STRICT[self.task](physics, contact_pairs(physics))
        )
        done = self.steps >= self.max_steps
        return Step(self._observation(), reward, success, done, strict_success=strict)

    def gripper_poses(self) -> np.ndarray:
        """(2, 7) world poses of the two grippers (left, right), xyz + quaternion."""
        data = self.env.physics.data.ptr
        bodies = [data.body(f"vx300s_{side}/gripper_link") for side in ("left", "right")]
        return np.stack([np.concatenate([body.xpos, body.xquat]) for body in bodies])

    def _reset_scene(self, seed: int) -> Any:
        """Objects placed from `seed`, the simulator reset: its first time step."""
        self.seed, self.steps = int(seed), 0
        self._held = HeldFor(max(1, round(HOLD_SECONDS * self.fps)))
        self._succeeded = False
        self._poses[0] = object_poses(self.task, self.seed)
        return self.env.reset()

    def mocap_commands(self) -> np.ndarray:
        """(16,) the grippers' current mocap targets (world) and openings 0: where they start."""
        data = self.env.physics.data
        return np.concatenate(
            [np.concatenate([data.mocap_pos[i], data.mocap_quat[i], [0.0]]) for i in range(2)]
        )

    def close(self) -> None:
        """Release the renderer and the simulator."""
        self.renderer.close()
        self.env.close()


class AlohaTask(AlohaScene):
    """One ALOHA task (see the module docstring); `reset(seed)` places its objects."""

    embodiment = EMBODIMENT

    def __init__(self, task: str, **options: Any) -> None:
        super().__init__(task, **options)  # image_size, cameras, cheap_rendering, expert
        self.fps = float(_gym_aloha().constants.FPS)
        self._qpos: np.ndarray | None = None
        self._plan: np.ndarray | None = None

    def declaration(self) -> dict[str, Any]:
        """The embodiment its episodes declare: two arms' joints and grippers."""
        groups = [
            {"name": f"{side}_{part}", "kind": kind, "width": width}
            for side in ("left", "right")
            for part, kind, width in (("arm", "joint", 6), ("gripper", "gripper", 1))
        ]
        return {
            "name": self.embodiment,
            "family": "robot",
            "fps": self.fps,
            "cameras": list(self.cameras),
            "state": ["observation.state"],
            "actions": ["action"],
            "channels": CHANNELS,
            "groups": groups,
        }

    def _observation(self) -> dict[str, Any]:
        assert self._qpos is not None
        return observation_of(self._qpos, self.render(), self.prompt)

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode, its objects drawn from `seed`: the first observation."""
        self._plan = None
        self._qpos = np.asarray(self._reset_scene(seed).observation["qpos"])
        return self._observation()

    def step(self, action: np.ndarray) -> Step:
        """Move every joint towards its target."""
        assert self._qpos is not None, "reset the task first"
        step = self.env.step(self._checked(action, 14))
        self._qpos = np.asarray(step.observation["qpos"])
        return self._ticked(float(step.reward or 0.0))

    def expert_action(self) -> np.ndarray:
        """The scripted episode's joint targets (planned at the episode's first tick)."""
        assert self.seed is not None, "reset the task first"
        if self._plan is None:
            self._plan, _ = scripted_joint_trajectory(self.task, self.seed)
        return self._plan[min(self.steps, MAX_STEPS - 1)].astype(np.float32)


class AlohaJointsEgoMaskedTask(AlohaTask):
    """`aloha_joints_ego_masked/<task>`: the joint-driven robot as `aloha_ego_masked` sees.

    Driven by its 14 joints as `aloha/<task>` is, seen through eva's head camera with its
    arms masked as the hands' are drawn, as `aloha_ego_masked/<task>` is: the two robots'
    frames are alike and only their action spaces differ, so cotraining this one with
    `hands/<task>` asks whether a person's demonstrations help a robot whose actions share
    no channel with theirs (the trunk and the image stem are all they share).
    """

    embodiment = JOINTS_MASKED_EMBODIMENT
    family = "aloha_joints_ego_masked"
    default_cameras = (HEAD_CAMERA,)
    head_camera = True
    masked = True
