"""Real-time chunking: a flow-matching chunk sampled as a continuation of the last one.

Black, Galliker and Levine (2025), "Real-Time Execution of Action Chunking Flow Policies".
While the robot executes the previous chunk, the next is computed; by the time it arrives,
`delay` more of the previous chunk's steps have run. So the new chunk's first `delay` steps
are frozen to what will have been executed, and the rest of the overlap with the previous
chunk (its steps not yet executed when the request was made) is followed with a weight
that decays to zero. Sampling is guided, not retrained: at each Euler step the velocity
gains the gradient that pulls the predicted clean chunk towards the previous one under
those weights (training-free inpainting, pseudo-inverse guidance), clipped at
`max_guidance`.

Our flows run from noise at t = 1 to the chunk at t = 0 (x_t = t * noise + (1 - t) *
actions, velocity v = noise - actions), so the clean chunk predicted at x_t is
x_t - t * v, and the guidance weight is the paper's with its time tau = 1 - t:
min(max_guidance, (1 - tau) / tau / r2), r2 = (1 - tau)^2 / (tau^2 + (1 - tau)^2).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

MAX_GUIDANCE = 5.0  # the paper's beta


def prefix_weights(delay: int, overlap: int, horizon: int) -> torch.Tensor:
    """(horizon,) weights: 1 for the first `delay` steps, decaying over the rest of the overlap.

    Steps delay..overlap-1 get c * (e^c - 1) / (e - 1) with c = (overlap - i) /
    (overlap - delay + 1), the paper's exponential soft mask; steps from `overlap` on, 0.
    """
    if not 0 <= delay <= horizon or not 0 <= overlap <= horizon:
        raise ValueError(
            f"real-time chunking: delay {delay} and overlap {overlap} must lie in 0..{horizon} "
            "(the chunk's horizon)"
        )
    weights = torch.zeros(horizon)
    frozen = min(delay, overlap)
    weights[:frozen] = 1.0
    if overlap > frozen:
        steps = torch.arange(frozen, overlap, dtype=torch.float32)
        c = (overlap - steps) / (overlap - frozen + 1)
        weights[frozen:overlap] = c * torch.expm1(c) / (math.e - 1)
    return weights


@dataclass(frozen=True)
class ActionPrefix:
    """What a new chunk continues: the previous chunk's steps and how much each binds.

    `actions` (B, T, A) in the units `sample_actions` returns (normalised), aligned with
    the new chunk (step 0 = the step the new chunk starts at), padded to the horizon;
    `weights` (B, T), 1 where the step is frozen and 0 where it does not bind (a row of
    zeros samples as without a prefix).
    """

    actions: torch.Tensor
    weights: torch.Tensor
    max_guidance: float = MAX_GUIDANCE

    @classmethod
    def of(
        cls,
        previous: torch.Tensor,
        delay: int,
        horizon: int,
        max_guidance: float = MAX_GUIDANCE,
    ) -> ActionPrefix:
        """From the previous chunk's remaining steps (B, P, A), P <= horizon, and the delay."""
        if previous.ndim != 3:
            raise ValueError(f"previous actions: (B, P, A), got {tuple(previous.shape)}")
        size, overlap, width = previous.shape
        if overlap > horizon:
            raise ValueError(
                f"previous actions: {overlap} steps, more than the chunk's horizon {horizon}"
            )
        padded = torch.zeros(size, horizon, width, dtype=previous.dtype, device=previous.device)
        padded[:, :overlap] = previous
        weights = prefix_weights(delay, overlap, horizon).to(previous.device)
        return cls(padded, weights.expand(size, -1).clone(), max_guidance)

    def shifted(self, anchor: torch.Tensor | float) -> ActionPrefix:
        """The same prefix relative to `anchor` (a policy that predicts residual actions)."""
        return ActionPrefix(self.actions - anchor, self.weights, self.max_guidance)

    def check(self, shape: tuple[int, ...]) -> None:
        """ValueError unless the prefix fits chunks of `shape` (B, T, A)."""
        if tuple(self.actions.shape) != tuple(shape) or tuple(self.weights.shape) != shape[:2]:
            raise ValueError(
                f"action prefix: actions {tuple(self.actions.shape)} and weights "
                f"{tuple(self.weights.shape)}, the chunk is {tuple(shape)}"
            )

    @property
    def binds(self) -> bool:
        """Whether any step is bound at all (if not, sampling is exactly unguided)."""
        return bool((self.weights > 0).any())


def guidance_weight(t: float, max_guidance: float) -> float:
    """The paper's guidance weight at our flow time t (1 = noise, 0 = the chunk)."""
    tau = 1.0 - t  # the paper's time: 0 = noise, 1 = the chunk
    if tau <= 0.0:
        return max_guidance
    if tau >= 1.0:
        return 0.0
    inverse_r2 = (tau**2 + (1 - tau) ** 2) / (1 - tau) ** 2
    return min(max_guidance, (1 - tau) / tau * inverse_r2)


def guided_velocity(
    velocity: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    t: float,
    prefix: ActionPrefix,
) -> torch.Tensor:
    """The velocity at x (flow time t), guided so the predicted chunk continues `prefix`."""
    with torch.enable_grad():
        x = x.detach().requires_grad_(True)
        v = velocity(x)
        predicted = x - t * v  # the clean chunk this velocity leads to
        weights = prefix.weights[..., None].to(predicted.dtype)
        error = (prefix.actions.to(predicted.dtype) - predicted) * weights
        (correction,) = torch.autograd.grad(predicted, x, error)
    # the correction moves x_t so that the predicted chunk nears the prefix; our Euler step
    # subtracts the velocity, hence the sign
    return (v - guidance_weight(t, prefix.max_guidance) * correction).detach()


def flow_step_velocity(
    velocity: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    t: float,
    prefix: ActionPrefix | None,
) -> torch.Tensor:
    """The velocity one Euler step uses: guided by `prefix` where it binds, else plain."""
    if prefix is None or not prefix.binds:
        return velocity(x)
    return guided_velocity(velocity, x, t, prefix)
