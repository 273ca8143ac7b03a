"""What every action head shares: a chunk's channels by name, its noise, its masked loss.

- GroupedActions: the base of HPT's heads and RDT's. Actions go in and out through one
  projection per named channel group (keyed by name and width), so a head shared by
  several embodiments maps each one's layout onto its own channels and predicts only the
  channels that embodiment has; nothing is padded to a common width or truncated.
- `chunk_noise`: the noise a sampled chunk starts from, given (and checked) or drawn.
- `masked_mean`: a loss over valid steps only (`action_mask`): a padded step adds nothing.
- `sinusoidal_embedding`: sin/cos features of a diffusion or flow time.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

Groups = Sequence[tuple[str, int]]  # (channel group name, width), in layout order


def _key(name: str, width: int) -> str:
    return f"{name}__{width}"


class GroupedActions(nn.Module):
    """Actions in and out at `width` through one projection per named channel group.

    `groups` and `horizons` are per embodiment served. The projections are `action_in`
    and `action_out` (keyed `<name>__<width>`), shared by every embodiment with that group.
    """

    def __init__(
        self, groups: Mapping[str, Groups], horizons: Mapping[str, int], width: int
    ) -> None:
        super().__init__()
        self.groups = {e: [(str(n), int(w)) for n, w in g] for e, g in groups.items()}
        self.horizons = {e: int(h) for e, h in horizons.items()}
        keys = {_key(n, w): w for g in self.groups.values() for n, w in g}
        self.action_in = nn.ModuleDict({k: nn.Linear(w, width) for k, w in keys.items()})
        self.action_out = nn.ModuleDict({k: nn.Linear(width, w) for k, w in keys.items()})

    def _groups(self, embodiment: str) -> list[tuple[str, int]]:
        if embodiment not in self.groups:
            raise KeyError(f"this head serves {sorted(self.groups)}, not {embodiment!r}")
        return self.groups[embodiment]

    def action_dim(self, embodiment: str) -> int:
        """How many action channels `embodiment` has."""
        return sum(w for _, w in self._groups(embodiment))

    def horizon(self, embodiment: str) -> int:
        """How many steps a chunk of `embodiment` has."""
        self._groups(embodiment)
        return self.horizons[embodiment]

    def chunk_shape(self, size: int, embodiment: str) -> tuple[int, int, int]:
        """(B, T, A) of `size` chunks of `embodiment`."""
        return (size, self.horizon(embodiment), self.action_dim(embodiment))

    def embed_actions(self, actions: torch.Tensor, embodiment: str) -> torch.Tensor:
        """(B, T, A) actions -> (B, T, width), each channel group through its own projection."""
        out, start = 0, 0
        for name, width in self._groups(embodiment):
            out = out + self.action_in[_key(name, width)](actions[..., start : start + width])
            start += width
        return out  # type: ignore[return-value]

    def read_actions(self, hidden: torch.Tensor, embodiment: str) -> torch.Tensor:
        """(B, T, width) -> (B, T, A), each channel group read by its own projection."""
        groups = self._groups(embodiment)
        return torch.cat([self.action_out[_key(n, w)](hidden) for n, w in groups], dim=-1)


def chunk_noise(
    shape: tuple[int, ...],
    generator: torch.Generator | None,
    noise: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor:
    """The noise a sampled chunk of `shape` starts from: `noise` if given, else drawn.

    Drawn from `generator` on its device (on `device` without one); a given `noise` of
    another shape is a ValueError. Callers move it to their device and dtype.
    """
    if noise is None:
        noise_device = generator.device if generator is not None else device
        return torch.randn(shape, generator=generator, device=noise_device)
    if tuple(noise.shape) != shape:
        raise ValueError(f"noise must be {shape}, got {tuple(noise.shape)}")
    return noise


def masked_mean(error: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of (B, T, A) errors over valid steps; a padded step adds nothing (nor NaN)."""
    per_step = torch.where(mask, error.mean(-1), 0.0)
    return per_step.sum() / mask.sum().clamp_min(1).to(per_step.dtype)


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) times in [0, 1] -> (B, dim) sin/cos features."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device) / half)
    angles = 1000.0 * t[:, None].float() * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], -1)
