"""The registry of embodiments: store keys, cameras, fps and the layouts each can produce.

Adding an embodiment is registering one `Embodiment`; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from polymimic_data.geometry.layouts import Layout, get_layout


@dataclass(frozen=True)
class VectorRecipe:
    """How one vector (state or action step) is assembled from store keys.

    Each entry is (store key, frame offset): the action step j of a sample at frame t
    reads `key` at frame t + j + offset. The concatenation must match the layout's width.
    """

    entries: tuple[tuple[str, int], ...]

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.entries)


@dataclass(frozen=True)
class LayoutRecipe:
    """How a layout's state and actions are made from store keys.

    Entries are read in order, then: a `*_pose` entry (xyz + quaternion) becomes xyz and the
    rotation in `rotation`, expressed in the `frame` (the pose under key `frame` at the
    sample's own frame, e.g. the head at the chunk's first step); a `*_keypoints` entry is
    expressed in the frame of the pose entry just before it, at the same step (per-step wrist
    framing); any other entry passes through.
    """

    layout: str
    state: VectorRecipe
    actions: VectorRecipe
    rotation: str = "quaternion"
    frame: str | None = None


@dataclass(frozen=True)
class CameraIntrinsics:
    """Pinhole intrinsics at a given image size (camera axes: +x right, +y down, +z forward)."""

    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    def project(self, points: np.ndarray) -> np.ndarray:
        """Camera-frame points (..., 3) to pixel coordinates (..., 2)."""
        z = np.maximum(points[..., 2], 1e-6)
        return np.stack(
            [self.fx * points[..., 0] / z + self.cx, self.fy * points[..., 1] / z + self.cy], -1
        )

    def scaled_to(self, height: int, width: int) -> CameraIntrinsics:
        sx, sy = width / self.width, height / self.height
        return CameraIntrinsics(
            self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy, width, height
        )


@dataclass(frozen=True)
class Embodiment:
    """One embodiment: its store keys, cameras, fps and the layouts it can produce.

    `recipes` say how each layout is made from the store keys. `intrinsics` and `extrinsics`
    are the defaults for an episode whose attributes carry none of its own.
    """

    name: str
    family: str  # "robot" or "human"
    numeric_keys: tuple[str, ...]
    cameras: tuple[str, ...]
    fps: float
    recipes: tuple[LayoutRecipe, ...]
    default_layout: str
    intrinsics: dict[str, CameraIntrinsics] = field(default_factory=dict)
    extrinsics: dict[str, tuple[float, ...]] = field(default_factory=dict)  # camera -> pose (7)

    def camera_pose(self, attrs: dict, camera: str) -> np.ndarray:
        """A camera's pose (xyz + quaternion) in the arms' frame.

        The episode's attribute `camera_extrinsics` where it has one, else the default.
        """
        own = (attrs.get("camera_extrinsics") or {}).get(camera)
        pose = own if own is not None else self.extrinsics.get(camera)
        if pose is None or len(pose) != 7:
            raise KeyError(
                f"no extrinsics (xyz + quaternion) for camera {camera!r} of {self.name}; set the "
                "episode attribute camera_extrinsics or the embodiment's extrinsics"
            )
        return np.asarray(pose, dtype=np.float64)

    @property
    def image_keys(self) -> tuple[str, ...]:
        return tuple(f"images.{c}" for c in self.cameras)

    @property
    def layouts(self) -> tuple[str, ...]:
        return tuple(r.layout for r in self.recipes)

    def recipe(self, layout: str) -> LayoutRecipe:
        for r in self.recipes:
            if r.layout == layout:
                return r
        raise KeyError(
            f"embodiment {self.name!r} cannot produce layout {layout!r}; it can produce "
            f"{list(self.layouts)}"
        )

    def layout(self, name: str | None = None) -> Layout:
        return get_layout(self.recipe(name or self.default_layout).layout)


def camera_intrinsics(embodiment: Embodiment, attrs: dict, camera: str) -> CameraIntrinsics:
    """An episode's own intrinsics where it has them, else the embodiment's default.

    An episode's own are its attribute `camera_intrinsics`: camera -> [fx, fy, cx, cy,
    width, height].
    """
    own = (attrs.get("camera_intrinsics") or {}).get(camera)
    if own is not None:
        if len(own) != 6:
            raise ValueError(
                f"camera_intrinsics[{camera!r}] must be [fx, fy, cx, cy, width, height], got {own}"
            )
        fx, fy, cx, cy, width, height = own
        return CameraIntrinsics(float(fx), float(fy), float(cx), float(cy), int(width), int(height))
    if camera not in embodiment.intrinsics:
        raise KeyError(f"no intrinsics for camera {camera!r} of {embodiment.name}")
    return embodiment.intrinsics[camera]


_REGISTRY: dict[str, Embodiment] = {}


def register_embodiment(embodiment: Embodiment) -> Embodiment:
    """Add an embodiment; an error if its name is taken or a recipe reads keys it lacks."""
    key = embodiment.name.lower()
    if key in _REGISTRY:
        raise ValueError(f"embodiment {embodiment.name!r} is already registered")
    for recipe in embodiment.recipes:
        frame = (recipe.frame,) if recipe.frame and not recipe.frame.startswith("camera:") else ()
        missing = set(recipe.state.keys + recipe.actions.keys + frame) - set(
            embodiment.numeric_keys
        )
        if missing:
            raise ValueError(
                f"embodiment {embodiment.name!r}, layout {recipe.layout!r}: keys {sorted(missing)} "
                "are not among its numeric_keys"
            )
    _REGISTRY[key] = embodiment
    return embodiment


def add_cameras(name: str, cameras: Sequence[str]) -> Embodiment:
    """The registered embodiment `name` with `cameras` it lacks added after its own; registered.

    A camera is a dataset's choice, not part of what an embodiment is: the same robot recorded
    through another view is the same embodiment (declared.declare, its one caller, for
    declared embodiments; a built-in's cameras are its code's). Which cameras one episode
    holds is its own declaration's (declared.lacking_cameras).
    """
    known = get_embodiment(name)
    added = tuple(c for c in dict.fromkeys(cameras) if c not in known.cameras)
    if added:
        _REGISTRY[known.name.lower()] = known = replace(known, cameras=known.cameras + added)
    return known


def get_embodiment(name: str) -> Embodiment:
    """Look up an embodiment by its EgoVerse name, case-insensitively."""
    try:
        return _REGISTRY[name.lower()]
    except KeyError:
        raise KeyError(f"unknown embodiment {name!r}; registered: {sorted(_REGISTRY)}") from None


def registered_embodiments() -> list[str]:
    """The names of the registered embodiments, sorted."""
    return sorted(_REGISTRY)


# The synthetic generator renders at this size; real episodes carry their own intrinsics.
_FRONT_INTRINSICS = CameraIntrinsics(fx=160.0, fy=160.0, cx=80.0, cy=64.0, width=160, height=128)

_SUFFIX = {"quaternion": "quat", "euler": "ypr", "rot6d": "rot6d"}  # layout name suffixes

_EVA_KEYS = tuple(
    f"{side}.{k}"
    for side in ("left", "right")
    for k in ("obs_ee_pose", "cmd_ee_pose", "obs_joints", "cmd_joints", "gripper")
)
_EVA_STATE = VectorRecipe(
    (("left.obs_ee_pose", 0), ("left.gripper", 0), ("right.obs_ee_pose", 0), ("right.gripper", 0))
)
_EVA_ACTIONS = VectorRecipe(
    (("left.cmd_ee_pose", 0), ("left.gripper", 1), ("right.cmd_ee_pose", 0), ("right.gripper", 1))
)
_EVA_RECIPES = tuple(
    LayoutRecipe(
        f"eva_cartesian_{suffix}",
        _EVA_STATE,
        _EVA_ACTIONS,
        rotation=rotation,
        frame="camera:front_1",
    )
    for rotation, suffix in _SUFFIX.items()
)

_HUMAN_KEYS = (
    "left.obs_ee_pose",
    "right.obs_ee_pose",
    "left.obs_wrist_pose",
    "right.obs_wrist_pose",
    "left.obs_keypoints",
    "right.obs_keypoints",
    "obs_head_pose",
)
_HUMAN_HEAD = "obs_head_pose"  # human poses are expressed in the head frame at the sample's frame
_HAND_ENTRIES = tuple(
    f"{s}.{k}" for s in ("left", "right") for k in ("obs_wrist_pose", "obs_keypoints")
)
_HUMAN_RECIPES = (
    LayoutRecipe(
        "human_keypoints_rot6d",
        VectorRecipe(tuple((key, 0) for key in _HAND_ENTRIES)),
        VectorRecipe(tuple((key, 1) for key in _HAND_ENTRIES)),
        rotation="rot6d",
        frame=_HUMAN_HEAD,
    ),
    *(
        LayoutRecipe(
            f"human_cartesian_{suffix}",
            VectorRecipe((("left.obs_ee_pose", 0), ("right.obs_ee_pose", 0))),
            VectorRecipe((("left.obs_ee_pose", 1), ("right.obs_ee_pose", 1))),
            rotation=rotation,
            frame=_HUMAN_HEAD,
        )
        for rotation, suffix in _SUFFIX.items()
    ),
)

register_embodiment(
    Embodiment(
        name="eva_bimanual",
        family="robot",
        numeric_keys=_EVA_KEYS,
        cameras=("front_1", "left_wrist", "right_wrist"),
        fps=30.0,
        recipes=_EVA_RECIPES,
        default_layout="eva_cartesian_quat",
        intrinsics={"front_1": _FRONT_INTRINSICS},
        # Synthetic episodes are generated in the camera frame; real rigs set
        # `camera_extrinsics` on their episodes.
        extrinsics={"front_1": (0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0)},
    )
)
for _source in ("aria", "mecka", "scale"):
    register_embodiment(
        Embodiment(
            name=f"{_source}_bimanual",
            family="human",
            numeric_keys=_HUMAN_KEYS,
            cameras=("front_1",),
            fps=30.0,
            recipes=_HUMAN_RECIPES,
            default_layout="human_keypoints_rot6d",
            intrinsics={"front_1": _FRONT_INTRINSICS},
        )
    )
