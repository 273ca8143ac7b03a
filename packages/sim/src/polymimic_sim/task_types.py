"""What every simulated task is and gives: the interface, a step, its errors.

Below the task registry (tasks) and the task families (aloha_tasks, metaworld_tasks), so
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
    success: bool
    done: bool  # the episode ended (its time limit, or the simulator gave up)


class SimTask(Protocol):
    """One simulated task (see the module docstring)."""

    name: str
    embodiment: str
    fps: float
    max_steps: int
    prompt: str
    cameras: list[str]

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
