"""Action heads: a transformer decoder over action-step tokens, conditioned on the trunk.

A head serves one embodiment or several (shared). Actions go in and out through one
projection per named channel group (keyed by name and width), so a shared head maps
each embodiment's layout onto its own channels and predicts only the channels that
embodiment has; nothing is padded to a common width or truncated.

- FlowHead: flow matching as in pi0: x_t = t * noise + (1 - t) * actions with t drawn from
  Beta(1.5, 1); the network predicts the velocity noise - actions; sampling integrates
  from t = 1 to t = 0 in `sample_steps` Euler steps.
- RegressionHead: the chunk directly, with an L1 or MSE loss.

Both losses are masked by `action_mask`: a padded step contributes no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from polymimic_policies.real_time_chunking import ActionPrefix, flow_step_velocity

Groups = Sequence[tuple[str, int]]  # (channel group name, width), in layout order


def _key(name: str, width: int) -> str:
    return f"{name}__{width}"


def sinusoidal_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """(B,) times in [0, 1] -> (B, dim) sin/cos features."""
    half = dim // 2
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(half, device=t.device) / half)
    angles = 1000.0 * t[:, None].float() * freqs[None]
    return torch.cat([angles.sin(), angles.cos()], -1)


class GroupedActions:
    """Actions in and out through one projection per named channel group.

    For heads holding `groups`, `horizons` (per embodiment), `action_in` and `action_out`
    (keyed `<name>__<width>`).
    """

    groups: dict[str, list[tuple[str, int]]]
    horizons: dict[str, int]
    action_in: nn.ModuleDict
    action_out: nn.ModuleDict

    def _spec(self, embodiment: str) -> tuple[list[tuple[str, int]], int]:
        if embodiment not in self.groups:
            raise KeyError(f"this head serves {sorted(self.groups)}, not {embodiment!r}")
        return self.groups[embodiment], self.horizons[embodiment]

    def action_dim(self, embodiment: str) -> int:
        return sum(w for _, w in self._spec(embodiment)[0])

    def embed_actions(self, actions: torch.Tensor, embodiment: str) -> torch.Tensor:
        """(B, T, A) actions -> (B, T, width), each channel group through its own projection."""
        out, start = 0, 0
        for name, width in self._spec(embodiment)[0]:
            out = out + self.action_in[_key(name, width)](actions[..., start : start + width])
            start += width
        return out  # type: ignore[return-value]

    def read_actions(self, hidden: torch.Tensor, embodiment: str) -> torch.Tensor:
        groups = self._spec(embodiment)[0]
        return torch.cat([self.action_out[_key(n, w)](hidden) for n, w in groups], dim=-1)


class ActionHead(GroupedActions, nn.Module):
    """The shared machinery; `groups` and `horizons` are per embodiment this head serves."""

    kind = ""

    def __init__(
        self,
        *,
        groups: Mapping[str, Groups],
        horizons: Mapping[str, int],
        d_model: int,
        num_layers: int = 2,
        num_heads: int = 4,
    ) -> None:
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"head_layers: must be a positive integer, got {num_layers}")
        self.groups = {e: [(str(n), int(w)) for n, w in g] for e, g in groups.items()}
        self.horizons = {e: int(h) for e, h in horizons.items()}
        keys = {_key(n, w): w for g in self.groups.values() for n, w in g}
        self.action_in = nn.ModuleDict({k: nn.Linear(w, d_model) for k, w in keys.items()})
        self.action_out = nn.ModuleDict({k: nn.Linear(d_model, w) for k, w in keys.items()})
        self.step_embedding = nn.Parameter(
            torch.randn(1, max(self.horizons.values()), d_model) * 0.02
        )
        layer = nn.TransformerDecoderLayer(
            d_model, num_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, num_layers)
        self.norm = nn.LayerNorm(d_model)

    def decode(
        self, tokens: torch.Tensor, context: torch.Tensor, padded: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Step tokens (B, T, D) attending to each other and to the context.

        `padded` (B, T) hides padded steps from the others: what a padded step holds then
        reaches only its own output, which the loss masks out.
        """
        steps = tokens.shape[1]
        hidden = self.decoder(
            tokens + self.step_embedding[:, :steps], context, tgt_key_padding_mask=padded
        )
        return self.norm(hidden)

    @staticmethod
    def masked_mean(error: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Mean of (B, T, A) errors over valid steps; a padded step adds nothing (nor NaN)."""
        per_step = torch.where(mask, error.mean(-1), 0.0)
        return per_step.sum() / mask.sum().clamp_min(1).to(per_step.dtype)


class FlowHead(ActionHead):
    """Flow matching over the chunk (see the module docstring); `sample_steps` Euler steps."""

    kind = "flow"

    def __init__(self, *, sample_steps: int = 10, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if sample_steps < 1:
            raise ValueError(f"sample_steps: must be a positive integer, got {sample_steps}")
        self.sample_steps = sample_steps
        d_model = self.step_embedding.shape[-1]
        self.time_mlp = nn.Sequential(
            nn.Linear(d_model, d_model), nn.SiLU(), nn.Linear(d_model, d_model)
        )

    def velocity(
        self,
        noisy: torch.Tensor,
        t: torch.Tensor,
        context: torch.Tensor,
        embodiment: str,
        padded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        d_model = self.step_embedding.shape[-1]
        time = self.time_mlp(sinusoidal_embedding(t, d_model).to(noisy.dtype))
        tokens = self.embed_actions(noisy, embodiment) + time[:, None]
        return self.read_actions(self.decode(tokens, context, padded), embodiment)

    def loss(
        self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor, embodiment: str
    ) -> torch.Tensor:
        beta = torch.distributions.Beta(
            torch.tensor(1.5, device=actions.device), torch.tensor(1.0, device=actions.device)
        )
        t = beta.sample((actions.shape[0],)) * 0.999 + 0.001
        noise = torch.randn_like(actions)
        noisy = t[:, None, None] * noise + (1 - t[:, None, None]) * actions
        velocity = self.velocity(noisy, t, context, embodiment, padded=~mask)
        error = (velocity - (noise - actions)).pow(2)
        return self.masked_mean(error, mask)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        embodiment: str,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        """Integrate from noise (given, or drawn from `generator`) to a chunk (B, T, A).

        With `prefix`, each step's velocity is guided to continue it (real-time chunking).
        """
        _, horizon = self._spec(embodiment)
        shape = (context.shape[0], horizon, self.action_dim(embodiment))
        if noise is None:
            noise_device = generator.device if generator is not None else context.device
            noise = torch.randn(shape, generator=generator, device=noise_device)
        elif tuple(noise.shape) != shape:
            raise ValueError(f"noise must be {shape}, got {tuple(noise.shape)}")
        if prefix is not None:
            prefix.check(shape)
        x = noise.to(device=context.device, dtype=context.dtype)
        dt = 1.0 / self.sample_steps
        for i in range(self.sample_steps):
            t = torch.full((shape[0],), 1.0 - i * dt, device=context.device)

            def velocity(x: torch.Tensor, t: torch.Tensor = t) -> torch.Tensor:
                return self.velocity(x, t, context, embodiment)

            x = x - dt * flow_step_velocity(velocity, x, 1.0 - i * dt, prefix)
        return x


class RegressionHead(ActionHead):
    """The chunk predicted directly from step queries; deterministic."""

    kind = "regression"

    def __init__(self, *, regression_loss: str = "l1", **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        if regression_loss not in ("l1", "mse"):
            raise ValueError(f"regression_loss: {regression_loss!r} is not one of ['l1', 'mse']")
        self.regression_loss = regression_loss

    def predict(self, context: torch.Tensor, embodiment: str) -> torch.Tensor:
        _, horizon = self._spec(embodiment)
        queries = self.step_embedding[:, :horizon].expand(context.shape[0], -1, -1)
        return self.read_actions(self.decode(torch.zeros_like(queries), context), embodiment)

    def loss(
        self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor, embodiment: str
    ) -> torch.Tensor:
        difference = self.predict(context, embodiment) - actions
        error = difference.abs() if self.regression_loss == "l1" else difference.pow(2)
        return self.masked_mean(error, mask)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        embodiment: str,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        if prefix is not None:
            raise ValueError(
                "a regression head predicts its chunk directly and cannot inpaint a prefix "
                "(real-time chunking needs head: flow); use the chunk or temporal_ensemble "
                "executor"
            )
        return self.predict(context, embodiment)


HEAD_KINDS: dict[str, type[ActionHead]] = {"flow": FlowHead, "regression": RegressionHead}
