"""What every simulated task is and gives: the interface, a step, its errors.

Below the task registry (registry) and the task families (aloha_tasks, metaworld_tasks), so
that each family names the interface without importing the registry that builds it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class UnknownTaskError(ValueError):
    """A task name no simulator here provides."""


class MissingExtraError(ModuleNotFoundError):
    """A task whose simulator is not installed; the message names the extra."""


@dataclass
class Step:
    """What one action led to."""

    observation: dict[str, Any]
    reward: float
    success: bool  # the task's standard success (what ACT, LeRobot and gym-aloha count)
    done: bool  # the episode ended (its time limit, or the simulator gave up)
    strict_success: bool  # the task's strict success (see the family), else as `success`


STOCK_EXPERT = "stock"  # a task's scripted expert as its source wrote it (registry.expert_variant)


def stock_expert_only(name: str, asked: str | None) -> str:
    """STOCK_EXPERT, the one expert of task `name`'s family; ValueError for another `asked`."""
    if asked not in (None, STOCK_EXPERT):
        raise ValueError(f"expert {asked!r} for {name}: its one expert is {STOCK_EXPERT!r}")
    return STOCK_EXPERT


class SimTask(Protocol):
    """One simulated task (see the module docstring)."""

    name: str
    embodiment: str
    fps: float
    max_steps: int  # ticks an episode may run here
    registered_steps: int  # the step limit its reference registers (gym-aloha's: 300)
    prompt: str
    cameras: list[str]
    expert_variant: str  # which scripted expert expert_action runs (registry.expert_variant)

    def declaration(self) -> dict[str, Any]:
        """The embodiment its episodes declare (polymimic-data's declared embodiments)."""
        ...

    def reset(self, seed: int) -> dict[str, Any]:
        """A new episode, its initial state drawn from `seed`; the first observation."""
        ...

    def step(self, action: np.ndarray) -> Step:
        """Apply one absolute action."""
        ...

    def render(self) -> dict[str, np.ndarray]:
        """Each camera's frame of the current state, uint8 (H, W, 3)."""
        ...

    def expert_action(self) -> np.ndarray:
        """The scripted expert's action for the current state, in the same units."""
        ...

    def close(self) -> None:
        """Release the simulator."""
        ...


def observation_of(state: np.ndarray, images: Mapping[str, np.ndarray], prompt: str) -> dict:
    """An observation in polymimic-serve's form."""
    return {"state": np.asarray(state, np.float32), "images": dict(images), "prompt": prompt}


class HeldFor:
    """Whether a condition has held for `ticks` ticks in a row (a strict success's test)."""

    def __init__(self, ticks: int) -> None:
        if ticks < 1:
            raise ValueError(f"ticks: a positive number, got {ticks}")
        self.ticks, self.count = ticks, 0

    def reset(self) -> None:
        """A new episode: nothing held yet."""
        self.count = 0

    def update(self, condition: bool) -> bool:
        """One tick of `condition`: True once it has held `ticks` ticks in a row."""
        self.count = self.count + 1 if condition else 0
        return self.count >= self.ticks
