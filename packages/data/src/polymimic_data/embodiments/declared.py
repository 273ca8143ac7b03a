"""Embodiments declared by data rather than code: what an imported episode says it is.

An episode converted from another format (e.g. LeRobot v3) carries its embodiment's
declaration in the attribute `embodiment_declaration`: the state and action store keys,
a layout of named channel groups, the cameras and the fps. Meeting such an episode
registers its embodiment and layout, so the loader and the policy know it without the
source dataset. The resolver (episodes.resolver) is the one place that registers: once per
distinct declaration among the episodes it returns; the same declaration again is a no-op,
one under the same name differing in more than its cameras an error naming the episode.

Cameras are not part of an embodiment's identity: they are which views a recording kept (a
sim task recorded through `corner2` and again through `corner4_fov40` is one robot, one
action space). Declarations that differ only in their cameras are one embodiment, whose
cameras are all those declared; what one episode holds is its own declaration's
(`declared_cameras`), checked by the loader before it reads.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import fields
from typing import Any

from polymimic_data.embodiments.registry import (
    Embodiment,
    LayoutRecipe,
    VectorRecipe,
    add_cameras,
    get_embodiment,
    register_embodiment,
)
from polymimic_data.geometry.layouts import (
    CHANNEL_KINDS,
    Layout,
    layout_from_widths,
    register_layout,
)
from polymimic_data.geometry.rotations import ROTATION_WIDTHS

DECLARATION = "embodiment_declaration"
_FIELDS = ("name", "fps", "cameras", "state", "actions", "groups")


class DeclarationError(ValueError):
    """A declaration that is malformed, or contradicts one already registered."""


def _check(declaration: Mapping[str, Any]) -> None:
    missing = [f for f in _FIELDS if f not in declaration]
    if missing:
        raise DeclarationError(f"{DECLARATION} lacks {missing}; it needs {list(_FIELDS)}")
    for field in ("state", "actions"):
        entries = declaration[field]
        if not entries or not all(_entry(e) is not None for e in entries):
            raise DeclarationError(
                f"{DECLARATION}.{field}: a list of store keys, each a name or [name, frame "
                f"offset], got {entries!r}"
            )
    frame = declaration.get("frame")
    if frame is not None and not (isinstance(frame, str) and frame):
        raise DeclarationError(
            f"{DECLARATION}.frame: the store key of a pose (or camera:<name>), got {frame!r}"
        )
    rotation = declaration.get("rotation", "quaternion")
    if rotation not in ROTATION_WIDTHS:
        raise DeclarationError(
            f"{DECLARATION}.rotation: one of {sorted(ROTATION_WIDTHS)}, got {rotation!r}"
        )
    for group in declaration["groups"]:
        if group.get("kind") not in CHANNEL_KINDS or int(group.get("width", 0)) < 1:
            raise DeclarationError(
                f"{DECLARATION}.groups: {group!r} needs a name, a kind of {CHANNEL_KINDS} "
                "and a positive width"
            )


def _entry(entry: Any) -> tuple[str, int] | None:
    """A state or action entry as (store key, frame offset); None when malformed."""
    if isinstance(entry, str) and entry:
        return entry, 0
    if (
        isinstance(entry, (list, tuple))
        and len(entry) == 2
        and isinstance(entry[0], str)
        and entry[0]
        and isinstance(entry[1], int)
        and not isinstance(entry[1], bool)
    ):
        return entry[0], entry[1]
    return None


def layout_name(declaration: Mapping[str, Any]) -> str:
    """The name of the one layout a declaration registers: `<name>_joints`."""
    return f"{declaration['name']}_joints"


def embodiment_from_declaration(declaration: Mapping[str, Any]) -> Embodiment:
    """The Embodiment (one layout, `<name>_joints`) a declaration describes; registers nothing.

    State and actions are store keys laid end to end in the layout, each read at the
    sample's own frame (a LeRobot `action` row is the command given at that frame) or, for
    an entry [key, offset], `offset` frames later (human data: the actions are the poses
    observed next). With a `frame` (the store key of a pose, e.g. the head's), `*_pose`
    entries are expressed in that pose at the sample's frame and `*_keypoints` in the pose
    entry before them, in the `rotation` asked for (see LayoutRecipe).
    """
    _check(declaration)
    name = str(declaration["name"]).lower()
    state = tuple(e for e in map(_entry, declaration["state"]) if e is not None)
    actions = tuple(e for e in map(_entry, declaration["actions"]) if e is not None)
    frame = declaration.get("frame")
    frame_keys = (frame,) if frame and not frame.startswith("camera:") else ()
    recipe = LayoutRecipe(
        layout_name(declaration),
        VectorRecipe(state),
        VectorRecipe(actions),
        rotation=str(declaration.get("rotation", "quaternion")),
        frame=frame,
    )
    return Embodiment(
        name=name,
        family=str(declaration.get("family", "robot")),
        numeric_keys=tuple(dict.fromkeys([*(k for k, _ in state + actions), *frame_keys])),
        cameras=tuple(str(c) for c in declaration["cameras"]),
        fps=float(declaration["fps"]),
        recipes=(recipe,),
        default_layout=layout_name(declaration),
    )


def check_declaration(
    declaration: Mapping[str, Any], *, source: str = ""
) -> tuple[Embodiment, Layout, Embodiment | None]:
    """The embodiment and layout a declaration describes, and the one registered under its name.

    The last is None where none is; DeclarationError, naming `source`, where the declaration
    is malformed or differs from the registered one in more than its cameras (its keys,
    fps, family, recipes: frame, rotation, offsets; or its channel groups), each difference
    named. Registers nothing.
    """
    where = f"{source}: " if source else ""
    try:
        embodiment = embodiment_from_declaration(declaration)
    except DeclarationError as exc:
        raise DeclarationError(f"{where}{exc}") from None
    layout = layout_from_widths(
        layout_name(declaration),
        [(str(g["name"]), str(g["kind"]), int(g["width"])) for g in declaration["groups"]],
    )
    try:
        known = get_embodiment(embodiment.name)
    except KeyError:
        known = None
    differs = _differences(known, embodiment, layout) if known is not None else []
    if differs:
        raise DeclarationError(
            f"{where}declares embodiment {embodiment.name!r} differently from the one "
            f"already registered ({'; '.join(differs)}); import it under another name "
            "(`import-lerobot --embodiment NAME`)"
        )
    return embodiment, layout, known


def _differences(known: Embodiment, declared: Embodiment, layout: Layout) -> list[str]:
    """What, besides its cameras, a declared embodiment has otherwise than the registered one.

    Each field as `<field>: registered <value>, declared <value>`.
    """
    pairs = [
        (f.name, getattr(known, f.name), getattr(declared, f.name))
        for f in fields(Embodiment)
        if f.name != "cameras"
    ]
    groups = [
        ", ".join(f"{g.name} ({g.kind}, {g.stop - g.start})" for g in each.groups)
        for each in (known.layout(), layout)
    ]
    pairs.append(("channel groups", f"[{groups[0]}]", f"[{groups[1]}]"))
    return [f"{name}: registered {a}, declared {b}" for name, a, b in pairs if a != b]


def declare(declaration: Mapping[str, Any], *, source: str = "") -> Embodiment:
    """Register the declared embodiment and its layout (idempotent); the registered one.

    One registered already, differing only in cameras, gains the cameras it lacks.
    """
    embodiment, layout, known = check_declaration(declaration, source=source)
    if known is not None:
        return add_cameras(known.name, embodiment.cameras)
    try:
        register_layout(layout)
    except ValueError as exc:
        raise DeclarationError(f"{source + ': ' if source else ''}{exc}") from None
    return register_embodiment(embodiment)


def declaration_key(attrs: Mapping[str, Any]) -> str | None:
    """The episode's declaration as canonical text (equal declarations, equal keys), or None."""
    declaration = attrs.get(DECLARATION)
    return json.dumps(declaration, sort_keys=True) if declaration else None


def declared_names(attrs_of_episodes: Iterable[Mapping[str, Any]]) -> list[str]:
    """The embodiment names the episodes' attributes declare, in order; registers nothing."""
    names: list[str] = []
    for attrs in attrs_of_episodes:
        declaration = attrs.get(DECLARATION)
        name = str(declaration.get("name", "")).lower() if declaration else ""
        if name and name not in names:
            names.append(name)
    return names


def declared_cameras(attrs: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The cameras an episode's declaration says it holds, or None where it has none."""
    declaration = attrs.get(DECLARATION)
    return tuple(str(c) for c in declaration.get("cameras") or ()) if declaration else None


def lacking_cameras(episodes: Iterable[Any], cameras: Sequence[str]) -> str | None:
    """Why some of `episodes` cannot give `cameras`, or None where each can.

    `episodes`: each with `.path` and `.attrs` (EpisodeInfo). An episode that declares its
    embodiment holds the cameras its declaration names; one that does not is judged by its
    files when read. The reason names the first episode lacking a camera, the cameras it
    holds, and how many more lack one.
    """
    lacking = []
    for episode in episodes:
        held = declared_cameras(episode.attrs)
        if held is not None and any(c not in held for c in cameras):
            lacking.append((episode, held))
    if not lacking:
        return None
    episode, held = lacking[0]
    missing = [c for c in cameras if c not in held]
    others = len(lacking) - 1
    more = f"; {others} more episode{' lacks' if others == 1 else 's lack'} some" if others else ""
    return f"episode {episode.path} was recorded without {missing} (it holds {list(held)}){more}"


def declared_channel_names(attrs: Mapping[str, Any], key: str, width: int) -> list[str] | None:
    """The channel names an episode's declaration gives `key`, or None.

    A declaration's `channels` (written by polymimic-sim and the LeRobot importer) name the
    columns of its state or its actions when that side is one store key of `width` columns.
    """
    declaration = attrs.get(DECLARATION) or {}
    channels = declaration.get("channels") or []
    for field in ("state", "actions"):
        entries = [_entry(e) for e in declaration.get(field) or []]
        if [e[0] if e else None for e in entries] == [key] and len(channels) == width:
            return [str(n) for n in channels]
    return None
