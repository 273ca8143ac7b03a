"""MetaWorld's Sawyer tasks (the `metaworld` extra), with its own scripted experts.

State is what a robot knows of itself: the hand's position (x, y, z, metres) and the
gripper's opening. Actions are absolute: the hand's next target position and the gripper
command in [-1, 1]. MetaWorld itself takes position deltas (scaled by its action_scale,
clipped to [-1, 1]); the conversion is exact both ways, so a recorded episode replays
step for step. Frames come from MuJoCo's renderer at the size asked for, no shadows and no
multisampling (the same for recording and evaluation).

Success is MetaWorld's own (`info["success"]`: the object at its goal, a state check, not a
momentary contact); it is also the strict success, and the registered limit is the task's
`max_path_length` (500), the one limit there is.

The expert is MetaWorld's scripted policy, with one correction (`FINGERTIP_GOAL_TASKS`):
where it steers the *hand* to the goal but success is judged at the fingertips' middle
(reach) or at the object they hold (pick-place), it is given the goal raised by the hand's
height over the fingertips (4.5 cm), so that what is judged arrives there. Uncorrected, the
expert's own fingertips end 4.5-4.9 cm from reach's goal, inside its 5 cm radius by a few
millimetres: its demonstrations succeed by a hair, and a policy that copies them to within a
centimetre often fails (reach alone: 51/100, against 85/100 on the corrected expert's;
sim README). Corrected, they end 2.8 cm off ten ticks after success and still closing
(seeds 1000-1019, the median; pick-place's puck 2.0 cm against 3.9, of 7:
benchmarks/expert_margin.py).
"""

from __future__ import annotations

import contextlib
import pickle
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from polymimic_sim.tasks.rendering import (
    camera_renderer,
    camera_views,
    ensure_headless_rendering,
    render_cameras,
)
from polymimic_sim.tasks.task_types import (
    STOCK_EXPERT,
    MissingExtraError,
    SimTask,
    Step,
    UnknownTaskError,
    observation_of,
)

EMBODIMENT = "sim/metaworld_sawyer"
DEFAULT_CAMERAS = ("corner2",)


def _metaworld() -> Any:
    ensure_headless_rendering()
    try:
        import metaworld
        import metaworld.env_dict
        import metaworld.policies
        import metaworld.types
    except ModuleNotFoundError as exc:
        raise MissingExtraError(
            f"metaworld tasks need the metaworld extra ({exc.name} is missing): "
            "install polymimic-sim[metaworld]"
        ) from exc
    return metaworld


def task_names() -> list[str]:
    """MetaWorld's task names that have a scripted expert, e.g. reach-v3."""
    return sorted(_metaworld().policies.ENV_POLICY_MAP)


def benchmark_tasks(benchmark: str) -> list[str]:
    """The tasks of one of MetaWorld's multi-task benchmarks (e.g. MT10_V3), in its order."""
    return list(getattr(_metaworld().env_dict, benchmark))


def _prompt(task: str) -> str:
    return task.removesuffix("-v3").replace("-", " ")


_PLACEMENT_DRAWS = 100

# Tasks whose expert steers the hand to the goal while success is judged at the fingertips
# (or the object held between them): their expert is given the goal raised by the hand's
# height over the fingertips (module docstring). The recorded episodes say so (`expert`).
FINGERTIP_GOAL_TASKS = frozenset({"reach-v3", "pick-place-v3"})
FINGERTIP_EXPERT = "fingertips_to_goal"


def expert_variant(task: str, asked: str | None = None) -> str:
    """The expert `task` (e.g. reach-v3) runs: `asked`, or its default.

    The default is FINGERTIP_EXPERT for FINGERTIP_GOAL_TASKS, STOCK_EXPERT for the others;
    STOCK_EXPERT is MetaWorld's policy as written (for figures that compare with work that
    recorded with it). ValueError for another name, or the correction asked of a task it
    was not measured on.
    """
    if asked is None:
        return FINGERTIP_EXPERT if task in FINGERTIP_GOAL_TASKS else STOCK_EXPERT
    if asked == STOCK_EXPERT or (asked == FINGERTIP_EXPERT and task in FINGERTIP_GOAL_TASKS):
        return asked
    raise ValueError(
        f"expert {asked!r} for metaworld/{task}: {STOCK_EXPERT!r} (MetaWorld's policy as "
        f"written) or, for {sorted(FINGERTIP_GOAL_TASKS)}, {FINGERTIP_EXPERT!r}"
    )


class _Refused(Exception):
    """The task asked for another placement at reset (see MetaWorldTask.reset)."""


@contextlib.contextmanager
def _refusing_a_redraw(sim: Any) -> Iterator[None]:
    """A second draw of the (frozen) placement within one `reset_model` raises _Refused.

    Every v3 task's `reset_model` draws once, then again only inside a `while` that rejects
    the draw (and a reset runs `reset_model` twice: SawyerXYZEnv's, then MujocoEnv's).
    """
    draw, reset_model = sim._get_state_rand_vec, sim.reset_model
    calls = [0]

    def once() -> np.ndarray:
        calls[0] += 1
        if calls[0] > 1:
            raise _Refused
        return draw()

    def counted() -> Any:
        calls[0] = 0
        return reset_model()

    sim._get_state_rand_vec, sim.reset_model = once, counted
    try:
        yield
    finally:
        del sim._get_state_rand_vec, sim.reset_model  # the class's own again


class MetaWorldTask:
    """One MetaWorld task (see the module docstring); `reset(seed)` draws its goal and objects."""

    embodiment = EMBODIMENT
    default_cameras: tuple[str, ...] = DEFAULT_CAMERAS  # rendered where none are asked for

    def __init__(
        self,
        task: str,
        *,
        image_size: Sequence[int] = (96, 128),
        cameras: Sequence[str] | None = None,
        cheap_rendering: bool = True,
        expert: str | None = None,
    ) -> None:
        metaworld = _metaworld()
        experts = metaworld.policies.ENV_POLICY_MAP
        if task not in experts:
            raise UnknownTaskError(
                f"task metaworld/{task}: MetaWorld has no such task with a scripted expert; "
                f"choose one of {sorted(experts)}"
            )
        self.name, self.prompt = f"metaworld/{task}", _prompt(task)
        # The environment itself, not gym.make's MT1: that wrapper draws a new goal at every
        # reset from a generator of its own, whatever the seed. Here a seed is the episode.
        self.sim = metaworld.env_dict.ALL_V3_ENVIRONMENTS[task]()
        self._task_type = metaworld.types.Task
        self.cameras = list(cameras or self.default_cameras)
        self.views = camera_views(self.sim.model, self.name, self.cameras)
        self.renderer = camera_renderer(self.sim.model, image_size, cheap_rendering)
        self.expert = experts[task]()
        self.expert_variant = expert_variant(task, expert)  # `expert`: None for the default
        self.fps = float(self.sim.metadata["render_fps"])
        self.max_steps = self.registered_steps = int(self.sim.max_path_length)
        self.scale = float(self.sim.action_scale)
        self._raw: np.ndarray | None = None
        self.steps = 0

    def declaration(self) -> dict[str, Any]:
        """The embodiment its episodes declare: hand position and gripper, state and action."""
        return {
            "name": EMBODIMENT,
            "family": "robot",
            "fps": self.fps,
            "cameras": list(self.cameras),
            "state": ["observation.state"],
            "actions": ["action"],
            "channels": ["hand_x", "hand_y", "hand_z", "gripper"],
            "groups": [
                {"name": "hand_position", "kind": "position", "width": 3},
                {"name": "gripper", "kind": "gripper", "width": 1},
            ],
        }

    def render(self) -> dict[str, np.ndarray]:
        """The cameras' frames of the current state."""
        return render_cameras(self.renderer, self.sim.data, self.views)

    def _observation(self) -> dict[str, Any]:
        assert self._raw is not None
        return observation_of(self._raw[:4], self.render(), self.prompt)

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode from `seed` (its goal and objects drawn from it): the first observation.

        The placement is the seed's first draw from MetaWorld's reset space, or its next
        where the task refuses one: a task whose goal must start some way from its object
        (push, pick-place, reach, ...) draws again in a loop at reset, and with the placement
        given (frozen) it would draw the same one forever.
        """
        space = self.sim._random_reset_space  # where MetaWorld draws goals and objects from
        draws = np.random.default_rng(int(seed))
        for _ in range(_PLACEMENT_DRAWS):
            placement = draws.uniform(space.low, space.high)
            data = {"env_cls": type(self.sim), "rand_vec": placement, "partially_observable": False}
            self.sim.set_task(self._task_type(env_name=self.name, data=pickle.dumps(data)))
            self.sim.seed(int(seed))
            try:
                with _refusing_a_redraw(self.sim):
                    self._raw, _ = self.sim.reset()
            except _Refused:
                continue
            self.steps = 0
            return self._observation()
        raise RuntimeError(
            f"{self.name}: no placement the task accepts in {_PLACEMENT_DRAWS} draws "
            f"from seed {seed}"
        )

    def step(self, action: np.ndarray) -> Step:
        """Move towards the absolute target (x, y, z, gripper command)."""
        assert self._raw is not None, "reset the task first"
        target = np.asarray(action, dtype=np.float64)
        if target.shape != (4,) or not np.isfinite(target).all():
            raise ValueError(f"{self.name}: an action is (4,) finite, got {target.shape}")
        delta = np.clip((target[:3] - self._raw[:3]) / self.scale, -1.0, 1.0)
        command = np.append(delta, np.clip(target[3], -1.0, 1.0)).astype(np.float32)
        self._raw, reward, terminated, truncated, info = self.sim.step(command)
        self.steps += 1
        done = bool(terminated or truncated or self.steps >= self.max_steps)
        success = bool(info["success"])
        return Step(self._observation(), float(reward), success, done, strict_success=success)

    def expert_action(self) -> np.ndarray:
        """MetaWorld's scripted expert (its goal corrected for some tasks), as an absolute target.

        See the module docstring for the correction (FINGERTIP_GOAL_TASKS).
        """
        assert self._raw is not None, "reset the task first"
        seen = self._raw
        if self.expert_variant == FINGERTIP_EXPERT:  # the hand's height over the fingertips
            seen = seen.copy()  # added to the goal the expert reads (the observation's last 3)
            seen[-3:] += seen[:3] - self.sim.tcp_center
        with warnings.catch_warnings():  # its gains exceed 1 by design; the env clips them
            warnings.filterwarnings("ignore", message="Constant", category=UserWarning)
            delta = np.clip(np.asarray(self.expert.get_action(seen), np.float64), -1, 1)
        return np.append(self._raw[:3] + delta[:3] * self.scale, delta[3]).astype(np.float32)

    def close(self) -> None:
        """Release the renderer and the simulator."""
        self.renderer.close()
        self.sim.close()


def distances_to_goal(task: SimTask) -> dict[str, float]:
    """How far from the goal, in metres, what the task judges (`judged`) and its hand are.

    For the tasks judged by a point's distance from the goal whose expert can be corrected
    (FINGERTIP_GOAL_TASKS): the fingertips' middle for reach, the puck for pick-place.
    `judged_x`, `judged_y`, `judged_z`: the judged point minus the goal along each axis (a
    negative one is short of the goal along it). benchmarks/expert_margin.py measures the
    experts' ends with it. ValueError for another task.
    """
    task_name = task.name.removeprefix("metaworld/")
    if not isinstance(task, MetaWorldTask) or task_name not in FINGERTIP_GOAL_TASKS:
        raise ValueError(
            f"distances_to_goal: {task.name} is not one of "
            f"{sorted('metaworld/' + t for t in FINGERTIP_GOAL_TASKS)}"
        )
    sim = task.sim
    goal = np.asarray(sim._target_pos, float)
    if task.name.endswith("/reach-v3"):
        judged = np.asarray(sim.tcp_center, float)
    else:
        judged = np.asarray(sim._get_pos_objects(), float)[:3]
    hand = np.asarray(sim.data.body("hand").xpos, float)
    offset = judged - goal
    return {
        "judged": float(np.linalg.norm(offset)),
        "hand": float(np.linalg.norm(hand - goal)),
        **{f"judged_{axis}": float(value) for axis, value in zip("xyz", offset, strict=True)},
    }
