"""A flow-matching action head: a transformer over action-step tokens, conditioned on context.

Convention (as in pi0): x_t = t * noise + (1 - t) * actions, the network predicts the
velocity noise - actions, and sampling integrates from t = 1 (noise) to t = 0 with Euler steps.
"""

from __future__ import annotations

import math

import torch
from torch import nn


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) times in [0, 1] -> (B, dim) sin/cos features."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device) / half)
    angles = 1000.0 * t[:, None].float() * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], -1)


class FlowMatchingActionHead(nn.Module):
    def __init__(
        self,
        *,
        action_dim: int,
        horizon: int,
        d_model: int,
        num_layers: int = 2,
        num_heads: int = 4,
        sample_steps: int = 10,
    ) -> None:
        super().__init__()
        self.action_dim, self.horizon, self.sample_steps = action_dim, horizon, sample_steps
        self.action_in = nn.Linear(action_dim, d_model)
        self.step_embedding = nn.Parameter(torch.zeros(1, horizon, d_model))
        self.time_mlp = nn.Sequential(
            nn.Linear(d_model, d_model), nn.SiLU(), nn.Linear(d_model, d_model)
        )
        layer = nn.TransformerDecoderLayer(
            d_model, num_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, num_layers)
        self.action_out = nn.Linear(d_model, action_dim)
        nn.init.normal_(self.step_embedding, std=0.02)

    def velocity(self, noisy: torch.Tensor, t: torch.Tensor, context: torch.Tensor) -> torch.Tensor:
        """Velocity (B, T, A) for noisy actions at times t (B,) given context (B, N, D)."""
        d_model = self.action_in.out_features
        time = self.time_mlp(sinusoidal_embedding(t, d_model).to(noisy.dtype))
        tokens = self.action_in(noisy) + self.step_embedding + time[:, None]
        return self.action_out(self.decoder(tokens, context))

    def loss(
        self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Masked flow-matching MSE for normalised actions (B, T, A), valid-step mask (B, T)."""
        batch = actions.shape[0]
        # pi0's time distribution: Beta(1.5, 1), weighted toward the noisy end.
        beta = torch.distributions.Beta(
            torch.tensor(1.5, device=actions.device), torch.tensor(1.0, device=actions.device)
        )
        t = beta.sample((batch,)) * 0.999 + 0.001
        noise = torch.randn_like(actions)
        noisy = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        error = (self.velocity(noisy, t, context) - (noise - actions)).pow(2).mean(-1)
        weights = mask.to(error.dtype)
        return (error * weights).sum() / weights.sum().clamp_min(1.0)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        generator: torch.Generator | None = None,
        steps: int | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Integrate from noise (given, or drawn from `generator`) to a chunk (B, T, A)."""
        steps = steps or self.sample_steps
        shape = (context.shape[0], self.horizon, self.action_dim)
        if noise is None:
            noise_device = generator.device if generator is not None else context.device
            noise = torch.randn(shape, generator=generator, device=noise_device)
        elif tuple(noise.shape) != shape:
            raise ValueError(f"noise must be {shape}, got {tuple(noise.shape)}")
        x = noise.to(device=context.device, dtype=context.dtype)
        dt = 1.0 / steps
        for i in range(steps):
            t = torch.full((shape[0],), 1.0 - i * dt, device=context.device)
            x = x - dt * self.velocity(x, t, context)
        return x
