"""HPT's action heads: a transformer decoder over action-step tokens, conditioned on the trunk.

A head serves one embodiment or several (shared); actions go in and out through one
projection per named channel group (`action_chunks.GroupedActions`). Each head is built
from its config (`ActionHeadConfig`: `head_layers`, and `sample_steps` or
`regression_loss`) and the trunk's width and attention heads.

- FlowHead: flow matching as in pi0 (`flow_matching`): the network predicts the velocity
  noise - actions at a time t ~ Beta(1.5, 1); sampling integrates from t = 1 to t = 0 in
  `sample_steps` Euler steps.
- RegressionHead: the chunk directly, with an L1 or MSE loss.

Both losses are masked by `action_mask`: a padded step contributes no gradient.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from polymimic_policies import flow_matching
from polymimic_policies.action_chunks import (
    GroupedActions,
    Groups,
    chunk_noise,
    masked_mean,
    sinusoidal_embedding,
)
from polymimic_policies.policy_config import PolicyConfig, one_of, positive_integers
from polymimic_policies.real_time_chunking import ActionPrefix


@dataclass(frozen=True)
class ActionHeadConfig(PolicyConfig):
    """The settings of HPT's heads (ActionHead, FlowHead, RegressionHead).

    `head_layers` decoder layers; a flow head samples in `sample_steps` Euler steps, a
    regression head is trained with `regression_loss`.
    """

    head_layers: int = 2
    sample_steps: int = 10
    regression_loss: str = "l1"

    def __post_init__(self) -> None:
        """ValueError naming the first field that cannot work: `<name>: <why>; <what works>`."""
        super().__post_init__()
        positive_integers(head_layers=self.head_layers, sample_steps=self.sample_steps)
        one_of("regression_loss", self.regression_loss, ["l1", "mse"])


class ActionHead(GroupedActions):
    """The shared machinery; `groups` and `horizons` are per embodiment this head serves."""

    kind = ""

    def __init__(
        self,
        config: ActionHeadConfig,
        *,
        groups: Mapping[str, Groups],
        horizons: Mapping[str, int],
        d_model: int,
        num_heads: int,
    ) -> None:
        super().__init__(groups, horizons, d_model)
        self.step_embedding = nn.Parameter(
            torch.randn(1, max(self.horizons.values()), d_model) * 0.02
        )
        layer = nn.TransformerDecoderLayer(
            d_model, num_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.decoder = nn.TransformerDecoder(layer, config.head_layers)
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


class FlowHead(ActionHead):
    """Flow matching over the chunk (see the module docstring); `sample_steps` Euler steps."""

    kind = "flow"

    def __init__(self, config: ActionHeadConfig, **kwargs: object) -> None:
        super().__init__(config, **kwargs)  # type: ignore[arg-type]
        self.sample_steps = config.sample_steps
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
        """The velocity (B, T, A) predicted at `noisy` and flow times `t` (B,)."""
        d_model = self.step_embedding.shape[-1]
        time = self.time_mlp(sinusoidal_embedding(t, d_model).to(noisy.dtype))
        tokens = self.embed_actions(noisy, embodiment) + time[:, None]
        return self.read_actions(self.decode(tokens, context, padded), embodiment)

    def loss(
        self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor, embodiment: str
    ) -> torch.Tensor:
        """The flow-matching loss over the valid steps of `mask`."""
        t = flow_matching.sample_time(actions.shape[0], actions.device)
        noisy, target = flow_matching.noised(actions, t)
        velocity = self.velocity(noisy, t, context, embodiment, padded=~mask)
        return flow_matching.flow_loss(velocity, target, mask)

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
        shape = self.chunk_shape(context.shape[0], embodiment)
        noise = chunk_noise(shape, generator, noise, context.device)
        x = noise.to(device=context.device, dtype=context.dtype)

        def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
            return self.velocity(x, t, context, embodiment)

        return flow_matching.euler_sample(velocity, x, self.sample_steps, prefix)


class RegressionHead(ActionHead):
    """The chunk predicted directly from step queries; deterministic."""

    kind = "regression"

    def __init__(self, config: ActionHeadConfig, **kwargs: object) -> None:
        super().__init__(config, **kwargs)  # type: ignore[arg-type]
        self.regression_loss = config.regression_loss

    def predict(self, context: torch.Tensor, embodiment: str) -> torch.Tensor:
        """The chunk (B, T, A) read from the trunk's tokens."""
        horizon = self.horizon(embodiment)
        queries = self.step_embedding[:, :horizon].expand(context.shape[0], -1, -1)
        return self.read_actions(self.decode(torch.zeros_like(queries), context), embodiment)

    def loss(
        self, context: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor, embodiment: str
    ) -> torch.Tensor:
        """L1 or MSE (`regression_loss`) over the valid steps of `mask`."""
        difference = self.predict(context, embodiment) - actions
        error = difference.abs() if self.regression_loss == "l1" else difference.pow(2)
        return masked_mean(error, mask)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        embodiment: str,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        """The predicted chunk; generator and noise are unused, a prefix is refused."""
        if prefix is not None:
            raise ValueError(
                "a regression head predicts its chunk directly and cannot inpaint a prefix "
                "(real-time chunking needs head: flow); use the chunk or temporal_ensemble "
                "executor"
            )
        return self.predict(context, embodiment)


HEAD_KINDS: dict[str, type[ActionHead]] = {"flow": FlowHead, "regression": RegressionHead}
