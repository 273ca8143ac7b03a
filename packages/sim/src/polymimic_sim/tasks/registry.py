"""Simulated tasks by name, behind one interface: observations as a robot sends them.

A task gives observations in the form polymimic-serve takes (`state` (S,), `images` {camera:
uint8 HWC}, `prompt`), takes absolute actions in the units its episodes record, says when it
has succeeded, and has a scripted expert for demonstrations. Names: `metaworld/<task>` (e.g.
`metaworld/reach-v3`; the `metaworld` extra) and `aloha/transfer_cube`, `aloha/insertion`,
the same driven by end-effector poses (`aloha_ee/<task>`; `aloha_ego/<task>` seen through a
camera on the robot's head, as eva's; `aloha_ego_masked/<task>` the same with its arms
masked as the hands'; `aloha_joints_ego_masked/<task>` the joint-driven robot seen as that
one is) and done by a person's hands (`hands/<task>`; that robot driven in the
hands' layout, `aloha_as_hands/<task>`, evaluates a policy trained on hands alone; all need
the `aloha` extra). A suite names several tasks at once (`metaworld/mt10`, `metaworld/mt50`:
MetaWorld's multi-task benchmarks); `suite_tasks` expands it, and `record` and the rollouts
take either.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from polymimic_sim.tasks.task_types import SimTask, UnknownTaskError, stock_expert_only


def metaworld_tasks() -> list[str]:
    """Every MetaWorld task name (needs the `metaworld` extra)."""
    from polymimic_sim.tasks.metaworld_tasks import task_names

    return [f"metaworld/{name}" for name in task_names()]


def aloha_tasks() -> list[str]:
    """ALOHA's tasks: joint- and end-effector-driven, and a person's hands doing them.

    Their experts need the `aloha` extra; the names do not.
    """
    from polymimic_sim.tasks.aloha_tasks import task_names

    return [f"{family}/{name}" for family in ALOHA_FAMILIES for name in task_names()]


ALOHA_FAMILIES = (
    "aloha",
    "aloha_ee",
    "aloha_ego",
    "aloha_ego_masked",
    "aloha_joints_ego_masked",
    "hands",
    "aloha_as_hands",
)


SUITES = {"metaworld/mt10": "MT10_V3", "metaworld/mt50": "MT50_V3"}


def staged_reward(name: str) -> bool:
    """Whether the task's reward counts stages.

    ALOHA's do (gym-aloha's, 0 to 4, the hands' scene included); MetaWorld's are shaped
    (10.0 at success, fractions on the way).
    """
    return name.partition("/")[0] in ALOHA_FAMILIES


def suite_tasks(name: str) -> list[str]:
    """The tasks a suite names (MetaWorld's MT10 in its order, ...), or [name] for one task."""
    if name not in SUITES:
        return [name]
    from polymimic_sim.tasks.metaworld_tasks import benchmark_tasks

    return [f"metaworld/{task}" for task in benchmark_tasks(SUITES[name])]


FAMILIES = ("metaworld", *ALOHA_FAMILIES)


def _task_class(family: str) -> type:
    """The class of a family's tasks, imported when one is made (each needs an extra)."""
    if family == "metaworld":
        from polymimic_sim.tasks.metaworld_tasks import MetaWorldTask

        return MetaWorldTask
    if family == "aloha":
        from polymimic_sim.tasks.aloha_tasks import AlohaTask

        return AlohaTask
    if family == "aloha_ee":
        from polymimic_sim.tasks.aloha_ee_tasks import AlohaEndEffectorTask

        return AlohaEndEffectorTask
    if family == "aloha_ego":
        from polymimic_sim.tasks.aloha_ee_tasks import AlohaEgoTask

        return AlohaEgoTask
    if family == "aloha_ego_masked":
        from polymimic_sim.tasks.aloha_ee_tasks import AlohaEgoMaskedTask

        return AlohaEgoMaskedTask
    if family == "aloha_joints_ego_masked":
        from polymimic_sim.tasks.aloha_tasks import AlohaJointsEgoMaskedTask

        return AlohaJointsEgoMaskedTask
    if family == "aloha_as_hands":
        from polymimic_sim.tasks.aloha_as_hands import AlohaAsHandsTask

        return AlohaAsHandsTask
    from polymimic_sim.tasks.hands_tasks import HandsTask

    return HandsTask


def default_cameras(name: str) -> tuple[str, ...] | None:
    """The cameras task (or suite) `name` renders where none are asked for; None if unknown.

    Read from its class, without making it (no simulator is started).
    """
    family = name.partition("/")[0]
    return tuple(_task_class(family).default_cameras) if family in FAMILIES else None


def expert_variant(name: str, asked: str | None = None) -> str:
    """The expert task `name` runs, `asked` or its default, by name (no simulator started).

    STOCK_EXPERT (the expert as its source wrote it), or a variant its family has
    (metaworld_tasks.FINGERTIP_GOAL_TASKS: the default there). A recording writes it into
    each episode (`expert`; an episode without one was recorded by the stock expert), and a
    resumed recording refuses kept episodes of another expert. ValueError for an expert
    the task does not have.
    """
    family, _, task = name.partition("/")
    if family == "metaworld":
        from polymimic_sim.tasks.metaworld_tasks import expert_variant as metaworld_variant

        return metaworld_variant(task, asked)
    return stock_expert_only(name, asked)


EMBODIMENTS = {
    "aloha": "sim/aloha",
    "aloha_ee": "sim/aloha_ee",
    "aloha_ego": "sim/aloha_ego",
    "aloha_ego_masked": "sim/aloha_ego_masked",
    "aloha_joints_ego_masked": "sim/aloha_joints_ego_masked",
    "hands": "sim/hands",
    "aloha_as_hands": "sim/hands",  # the robot acting in the hands' layout
    "metaworld": "sim/metaworld_sawyer",
}


def task_embodiment(name: str) -> str:
    """The embodiment a task's episodes declare (`sim/aloha_ee` for `aloha_ee/transfer_cube`)."""
    family = name.partition("/")[0]
    if family not in EMBODIMENTS:
        raise UnknownTaskError(f"task {name!r}: not one of this package's simulators")
    return EMBODIMENTS[family]


def object_poses(name: str, seed: int) -> np.ndarray:
    """Where ALOHA task `name`'s objects start for `seed`: (objects, 7), xyz + quaternion.

    In the world: the cube; or the peg, then the socket. The same in every family of the
    task (`aloha_ee/transfer_cube`'s seed 3 places the cube where `hands/transfer_cube`'s does).
    """
    family, _, task = name.partition("/")
    if family not in ALOHA_FAMILIES or not task:
        raise UnknownTaskError(
            f"task {name!r}: object poses are known for ALOHA's tasks ("
            f"{', '.join(f + '/<task>' for f in ALOHA_FAMILIES)}), e.g. aloha/transfer_cube"
        )
    from polymimic_sim.tasks import aloha_tasks

    if task not in aloha_tasks.task_names():
        raise UnknownTaskError(f"task {name!r}: choose one of {aloha_tasks.task_names()}")
    return aloha_tasks.object_poses(task, seed).reshape(-1, 7)


def make_task(
    name: str,
    *,
    image_size: Sequence[int] = (96, 128),
    cameras: Sequence[str] | None = None,
    cheap_rendering: bool = True,
    expert: str | None = None,
) -> SimTask:
    """The task called `name` (e.g. `metaworld/reach-v3`), rendering at `image_size` (H, W).

    `cheap_rendering`: no shadows, no multisampling (the default, for recording and
    evaluation alike); off only to measure what it saves. `expert`: the scripted expert
    `expert_action` runs (expert_variant; None: the task's default).
    """
    family, _, task = name.partition("/")
    if name in SUITES:
        raise UnknownTaskError(
            f"task {name!r} is a suite of {len(suite_tasks(name))} tasks: make each of "
            "suite_tasks(name)"
        )
    if family in FAMILIES and task:
        return _task_class(family)(
            task,
            image_size=image_size,
            cameras=cameras,
            cheap_rendering=cheap_rendering,
            expert=expert,
        )
    raise UnknownTaskError(
        f"task {name!r}: not one of this package's simulators; use metaworld/<task> "
        "(e.g. metaworld/reach-v3), or aloha/<task>, aloha_ee/<task>, aloha_ego/<task>, "
        "aloha_ego_masked/<task>, aloha_joints_ego_masked/<task> or hands/<task> "
        "(transfer_cube, insertion)"
    )


def parse_image_size(text: str) -> tuple[int, int]:
    """`96x128` -> (96, 128) (height x width)."""
    height, sep, width = text.lower().partition("x")
    if not sep or not height.isdigit() or not width.isdigit() or min(int(height), int(width)) < 8:
        raise ValueError(f"image size: {text!r} is not HEIGHTxWIDTH (e.g. 96x128)")
    return int(height), int(width)
