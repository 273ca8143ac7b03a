"""Layouts: the names, kinds and slices of the channels in `state` and `actions`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# `joint`: a robot's joint positions (radians or metres), normalised, no rotation semantics.
ChannelKind = Literal["position", "quaternion", "euler", "rot6d", "gripper", "keypoints", "joint"]
CHANNEL_KINDS: tuple[str, ...] = (
    "position",
    "quaternion",
    "euler",
    "rot6d",
    "gripper",
    "keypoints",
    "joint",
)
UNNORMALISED_KINDS: frozenset[str] = frozenset({"rot6d"})
_AXES = {"position": "xyz", "quaternion": "wxyz", "euler": ("roll", "pitch", "yaw")}


@dataclass(frozen=True)
class ChannelGroup:
    """A named run of channels of one kind, e.g. the left arm's xyz position."""

    name: str
    kind: str
    start: int
    stop: int

    def __post_init__(self) -> None:
        if self.kind not in CHANNEL_KINDS:
            raise ValueError(
                f"channel group {self.name!r}: kind {self.kind!r} is not one of {CHANNEL_KINDS}"
            )
        if not 0 <= self.start < self.stop:
            raise ValueError(f"channel group {self.name!r}: empty slice {self.start}:{self.stop}")

    @property
    def width(self) -> int:
        return self.stop - self.start


@dataclass(frozen=True)
class Layout:
    """The channel groups of one vector (state or action), contiguous from channel 0."""

    name: str
    groups: tuple[ChannelGroup, ...]

    def __post_init__(self) -> None:
        expected = 0
        for group in self.groups:
            if group.start != expected:
                raise ValueError(
                    f"layout {self.name!r}: group {group.name!r} starts at {group.start}, "
                    f"expected {expected} (groups must be contiguous)"
                )
            expected = group.stop

    @property
    def dim(self) -> int:
        return self.groups[-1].stop if self.groups else 0

    def groups_of_kind(self, kind: str) -> tuple[ChannelGroup, ...]:
        return tuple(g for g in self.groups if g.kind == kind)

    def group(self, name: str) -> ChannelGroup:
        for g in self.groups:
            if g.name == name:
                return g
        raise KeyError(f"layout {self.name!r} has no group {name!r}; it has {self.group_names}")

    @property
    def group_names(self) -> list[str]:
        return [g.name for g in self.groups]

    def channel_names(self) -> list[str]:
        """A name per channel: `<group>` for a one-channel group, else `<group>/<axis>`.

        Axes by the group's kind: x, y, z for a position; w, x, y, z for a quaternion; roll,
        pitch, yaw for euler angles; `<point>/<x|y|z>` for keypoints; else the index.
        """
        names: list[str] = []
        for group in self.groups:
            axes = _AXES.get(group.kind)
            if group.width == 1:
                names.append(group.name)
            elif axes is not None and len(axes) == group.width:
                names += [f"{group.name}/{axis}" for axis in axes]
            elif group.kind == "keypoints" and group.width % 3 == 0:
                names += [f"{group.name}/{i // 3}/{'xyz'[i % 3]}" for i in range(group.width)]
            else:
                names += [f"{group.name}/{i}" for i in range(group.width)]
        return names

    def normalised_mask(self) -> list[bool]:
        """Per channel: True where normalisation applies (every kind but rot6d)."""
        mask = [True] * self.dim
        for g in self.groups:
            if g.kind in UNNORMALISED_KINDS:
                mask[g.start : g.stop] = [False] * g.width
        return mask

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "groups": [
                {"name": g.name, "kind": g.kind, "start": g.start, "stop": g.stop}
                for g in self.groups
            ],
        }


def layout_from_widths(name: str, groups: list[tuple[str, str, int]]) -> Layout:
    """Build a layout from (name, kind, width) triples laid end to end."""
    out: list[ChannelGroup] = []
    start = 0
    for group_name, kind, width in groups:
        out.append(ChannelGroup(group_name, kind, start, start + width))
        start += width
    return Layout(name, tuple(out))


_ROTATIONS = {"quat": ("quaternion", 4), "ypr": ("euler", 3), "rot6d": ("rot6d", 6)}


def _bimanual(name: str, rotation: str, with_gripper: bool) -> Layout:
    kind, width = _ROTATIONS[rotation]
    groups: list[tuple[str, str, int]] = []
    for side in ("left", "right"):
        groups += [(f"{side}_position", "position", 3), (f"{side}_rotation", kind, width)]
        if with_gripper:
            groups.append((f"{side}_gripper", "gripper", 1))
    return layout_from_widths(name, groups)


def _hand_keypoints(name: str) -> Layout:
    """144-D wrist-first: per hand wrist xyz, wrist rot6d, 21 keypoints in the wrist frame."""
    groups: list[tuple[str, str, int]] = []
    for side in ("left", "right"):
        groups += [
            (f"{side}_wrist_position", "position", 3),
            (f"{side}_wrist_rotation", "rot6d", 6),
            (f"{side}_keypoints", "keypoints", 63),
        ]
    return layout_from_widths(name, groups)


_LAYOUTS: dict[str, Layout] = {
    layout.name: layout
    for layout in (
        *(_bimanual(f"eva_cartesian_{r}", r, with_gripper=True) for r in _ROTATIONS),
        *(_bimanual(f"human_cartesian_{r}", r, with_gripper=False) for r in _ROTATIONS),
        _hand_keypoints("human_keypoints_rot6d"),
    )
}


def get_layout(name: str) -> Layout:
    """Look a layout up by name; the error lists the known names."""
    try:
        return _LAYOUTS[name]
    except KeyError:
        raise KeyError(f"unknown layout {name!r}; known layouts: {sorted(_LAYOUTS)}") from None


def register_layout(layout: Layout) -> Layout:
    """Add a layout; the same one again is a no-op, a different one under its name an error."""
    if layout.name in _LAYOUTS and _LAYOUTS[layout.name] != layout:
        raise ValueError(f"a different layout named {layout.name!r} is already registered")
    _LAYOUTS[layout.name] = layout
    return layout
