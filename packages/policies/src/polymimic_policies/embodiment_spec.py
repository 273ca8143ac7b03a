"""EmbodimentSpec: what a policy needs to know of one embodiment, the contract with the data.

Plain numbers and names only (no object of polymimic-data): the state and action widths,
the history and horizon, the cameras, and the named action channel groups. Every policy
takes one per embodiment, as an EmbodimentSpec or the plain mapping `EmbodimentSpec.of`
reads, and checks each batch against it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class EmbodimentSpec:
    """What a policy needs to know of one embodiment: plain numbers and names.

    `action_groups` names the action channels, (name, width) in layout order; without it
    the actions are one group, "actions".
    """

    state_dim: int
    action_dim: int
    history: int
    horizon: int
    cameras: Sequence[str] = field(default_factory=lambda: ("front_1",))
    action_groups: Sequence[tuple[str, int]] = ()

    def __post_init__(self) -> None:
        for name in ("state_dim", "action_dim", "history", "horizon"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)}")
        widths = sum(w for _, w in self.action_groups)
        if self.action_groups and widths != self.action_dim:
            raise ValueError(
                f"action_groups: widths sum to {widths}, action_dim is {self.action_dim}"
            )

    def check_batch(
        self, batch: Mapping[str, Any], embodiment: str, *, actions: bool, cameras: Any = None
    ) -> None:
        """ValueError naming the key, the shape this embodiment declares and the one given.

        State (B, history, state_dim), each camera's images (B, 3, H, W), and with `actions`
        the chunk (B, horizon, action_dim) and its mask (B, horizon), all of one batch size.
        `cameras` defaults to the declared cameras.
        """
        expected: dict[str, tuple[Any, ...]] = {"state": ("B", self.history, self.state_dim)}
        for camera in self.cameras if cameras is None else cameras:
            expected[f"images.{camera}"] = ("B", 3, "H", "W")
        if actions:
            expected["actions"] = ("B", self.horizon, self.action_dim)
            expected["action_mask"] = ("B", self.horizon)
        size = None
        for key, want in expected.items():
            if key not in batch:
                raise ValueError(
                    f"batch[{key!r}]: missing; {embodiment} expects {_shape_text(want)} "
                    f"(the batch has {sorted(k for k in batch if not k.startswith('_'))})"
                )
            got = tuple(batch[key].shape)
            fits = len(got) == len(want) and all(
                isinstance(w, str) or g == w for g, w in zip(got, want, strict=False)
            )
            if not fits or (size is not None and got[0] != size):
                raise ValueError(
                    f"batch[{key!r}]: {embodiment} expects {_shape_text(want, size)}, got {got}"
                )
            size = got[0]

    @property
    def groups(self) -> list[tuple[str, int]]:
        """The action channel groups, (name, width); one group "actions" when none named."""
        return [(str(n), int(w)) for n, w in self.action_groups] or [("actions", self.action_dim)]

    @classmethod
    def of(cls, value: EmbodimentSpec | Mapping[str, Any]) -> EmbodimentSpec:
        """A spec as it is, or one read from a plain mapping (lists, ints, strings)."""
        if isinstance(value, EmbodimentSpec):
            return value
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            if key == "cameras":
                kwargs[key] = tuple(str(c) for c in item)
            elif key == "action_groups":
                kwargs[key] = tuple((str(n), int(w)) for n, w in item)
            else:
                kwargs[key] = int(item)
        return cls(**kwargs)


def _shape_text(shape: tuple[Any, ...], size: int | None = None) -> str:
    return "(" + ", ".join(str(size if d == "B" and size is not None else d) for d in shape) + ")"
