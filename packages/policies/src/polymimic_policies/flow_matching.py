"""Flow matching over an action chunk, as pi0: HPT's flow head and Pi both train and sample so.

x_t = t * noise + (1 - t) * actions, with t drawn from Beta(1.5, 1) and scaled into
(0.001, 1); the network predicts the velocity noise - actions, and the loss is its mean
squared error over valid steps. Sampling integrates from noise at t = 1 to the chunk at
t = 0 in Euler steps, each step's velocity guided to continue an ActionPrefix when one
binds (real-time chunking: `real_time_chunking.flow_step_velocity`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from polymimic_policies.action_chunks import masked_mean
from polymimic_policies.real_time_chunking import ActionPrefix, flow_step_velocity

Velocity = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x_t, t (B,)) -> velocity


def sample_time(size: int, device: torch.device) -> torch.Tensor:
    """(size,) flow times from Beta(1.5, 1), scaled into (0.001, 1): pi0's."""
    beta = torch.distributions.Beta(
        torch.tensor(1.5, device=device), torch.tensor(1.0, device=device)
    )
    return beta.sample((size,)) * 0.999 + 0.001


def noised(actions: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The chunk noised to times `t` (B,), x_t, and the velocity to learn there, noise - actions.

    The noise is drawn from the global generator, like `actions`.
    """
    noise = torch.randn_like(actions)
    noisy = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
    return noisy, noise - actions


def flow_loss(velocity: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean squared error of the predicted velocity over the valid steps of `mask` (B, T)."""
    return masked_mean((velocity - target).pow(2), mask)


def euler_sample(
    velocity: Velocity, noise: torch.Tensor, steps: int, prefix: ActionPrefix | None = None
) -> torch.Tensor:
    """Integrate from `noise` at t = 1 to a chunk at t = 0 in `steps` Euler steps.

    With `prefix`, each step's velocity is guided to continue it (real-time chunking); a
    prefix that does not fit the chunk is a ValueError.
    """
    if prefix is not None:
        prefix.check(tuple(noise.shape))
    x = noise
    dt = 1.0 / steps
    for i in range(steps):
        t = torch.full((x.shape[0],), 1.0 - i * dt, device=x.device)

        def at_t(x: torch.Tensor, t: torch.Tensor = t) -> torch.Tensor:
            return velocity(x, t)

        x = x - dt * flow_step_velocity(at_t, x, 1.0 - i * dt, prefix)
    return x
