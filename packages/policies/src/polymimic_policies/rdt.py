"""RDT: a diffusion transformer head (Robotics Diffusion Transformer) on HPT's stems and trunk.

RDTPolicy is HPTPolicy with every head replaced by an RDT head: a DiT over one sequence of
tokens, [diffusion timestep, latest state, action step 1..T], each a learned position.
Every block is pre-norm and residual: self-attention over that sequence, cross-attention to
the condition tokens, then an MLP (GELU, tanh). Norms are RMSNorm, and every attention
normalises its queries and keys per head with RMSNorm too (QK-norm), which is what keeps a
wide, deep DiT trainable on unnormalised robot data. Cross-attention alternates by block:
even blocks attend to the trunk's tokens (`encode`), odd blocks to the language tokens (the
prompt stem's tokens, when `use_prompt`; without a prompt the odd blocks read the trunk
too). Both kinds of condition come in through a Linear from `d_model` to `rdt_width`, so the
trunk and the head need not be one width. A final RMSNorm, then one output projection per
named channel group (`action_chunks.GroupedActions`), so a shared head maps each
embodiment's layout onto its own channels; the state token comes in through one
projection per embodiment, as state layouts are not named.

Training is DDPM (diffusers' DDPMScheduler, squaredcos_cap_v2 betas) with the network
predicting the clean chunk: a timestep drawn uniformly, the chunk noised to it, and the
loss the MSE of the prediction over valid steps only (`action_mask`; padded steps are also
hidden from self-attention, so what they hold reaches nothing that is scored). Sampling is
a few DPM-Solver++ steps (`sample_steps`) from Gaussian noise of the chunk's shape, given
or drawn from a torch.Generator, on a fresh scheduler per call: deterministic for a given
noise or seed. With `residual_actions` the head models the chunk relative to the latest
state, exactly as in HPTPolicy.

RDT-1B is rdt_width=2048, rdt_layers=28, rdt_heads=32, rdt_mlp_ratio=1.0 (RDT's MLP is as
wide as the model): 10 w^2 weights a block (self-attention 4, cross-attention 4, MLP 2),
1.17e9 parameters in the blocks. Built on the CPU and never choosing a device; build it
under `torch.device("meta")` to size it without memory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, cast

import torch
import torch.nn.functional as F
from torch import nn

from polymimic_policies.action_chunks import (
    GroupedActions,
    Groups,
    chunk_noise,
    masked_mean,
    sinusoidal_embedding,
)
from polymimic_policies.hpt import PROMPT, HPTConfig, HPTPolicy
from polymimic_policies.policy import Embodiments, register_policy
from polymimic_policies.policy_config import PolicyConfig, positive_integers
from polymimic_policies.real_time_chunking import ActionPrefix

TIME_FREQUENCIES = 256  # sinusoidal features of the diffusion timestep, as in DiT and RDT
BETA_SCHEDULE = "squaredcos_cap_v2"


@dataclass(frozen=True)
class RDTHeadConfig(PolicyConfig):
    """The RDT head's settings (RDTHead is built from them).

    `rdt_width`, `rdt_layers`, `rdt_heads` and `rdt_mlp_ratio` size the DiT;
    `train_timesteps` is the DDPM schedule's length and `sample_steps` (5, as RDT) the
    number of DPM-Solver++ steps.
    """

    sample_steps: int = 5
    rdt_width: int = 128
    rdt_layers: int = 4
    rdt_heads: int = 4
    rdt_mlp_ratio: float = 1.0
    train_timesteps: int = 1000

    def __post_init__(self) -> None:
        """ValueError naming the first field that cannot work: `<name>: <why>; <what works>`."""
        super().__post_init__()
        positive_integers(
            rdt_width=self.rdt_width,
            rdt_layers=self.rdt_layers,
            rdt_heads=self.rdt_heads,
            train_timesteps=self.train_timesteps,
            sample_steps=self.sample_steps,
        )
        width, heads = self.rdt_width, self.rdt_heads
        if width % heads:
            divisors = [n for n in range(1, width + 1) if width % n == 0]
            raise ValueError(
                f"rdt_heads: {heads} does not divide rdt_width={width}; choose one of {divisors}"
            )
        if int(width * self.rdt_mlp_ratio) < 1:
            raise ValueError(
                f"rdt_mlp_ratio: must make an MLP of at least one unit (rdt_width * rdt_mlp_ratio "
                f">= 1), got {self.rdt_mlp_ratio!r}; RDT uses 1.0"
            )
        if self.sample_steps > self.train_timesteps:
            raise ValueError(
                f"sample_steps: {self.sample_steps} is more than train_timesteps="
                f"{self.train_timesteps}; choose at most that (RDT samples in 5)"
            )


@dataclass(frozen=True)
class RDTConfig(RDTHeadConfig, HPTConfig):
    """RDTPolicy's config: HPTConfig's stems and trunk under the RDT head (RDTHeadConfig).

    `head` is "rdt", the one kind this policy has. HPT's own heads' settings
    (`head_layers`, `regression_loss`) are carried and ignored, as any kind's are when
    another is chosen, so a model config can start from an HPT one and say what differs.
    """

    head_kinds: ClassVar[Sequence[str]] = ("rdt",)

    head: str = "rdt"


def _schedule(train_timesteps: int) -> dict[str, Any]:
    return {
        "num_train_timesteps": train_timesteps,
        "beta_schedule": BETA_SCHEDULE,
        "prediction_type": "sample",
    }


class QKNormAttention(nn.Module):
    """Multi-head attention with RMSNorm on each head's queries and keys.

    Self-attention when called with `x` alone; cross-attention from `x` to `context`
    otherwise. Keys flagged in `padding` (B, N) get no attention.
    """

    def __init__(self, width: int, heads: int, cross: bool = False) -> None:
        super().__init__()
        self.heads = heads
        self.cross = cross
        if cross:
            self.q = nn.Linear(width, width)
            self.kv = nn.Linear(width, 2 * width)
        else:
            self.qkv = nn.Linear(width, 3 * width)
        self.q_norm = nn.RMSNorm(width // heads, eps=1e-6)
        self.k_norm = nn.RMSNorm(width // heads, eps=1e-6)
        self.proj = nn.Linear(width, width)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        padding: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.cross:
            if context is None:
                raise ValueError("cross-attention needs context tokens")
            q = self.q(x)
            k, v = self.kv(context).chunk(2, dim=-1)
        else:
            q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = (t.unflatten(-1, (self.heads, -1)).transpose(1, 2) for t in (q, k, v))
        q, k = self.q_norm(q), self.k_norm(k)
        mask = None if padding is None else ~padding[:, None, None, :]
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.proj(out.transpose(1, 2).flatten(2))


class RDTBlock(nn.Module):
    """x + self_attn(norm(x)), x + cross_attn(norm(x), context), x + mlp(norm(x))."""

    def __init__(self, width: int, heads: int, mlp_ratio: float) -> None:
        super().__init__()
        hidden = int(width * mlp_ratio)
        self.norm1 = nn.RMSNorm(width, eps=1e-6)
        self.attn = QKNormAttention(width, heads)
        self.norm2 = nn.RMSNorm(width, eps=1e-6)
        self.cross_attn = QKNormAttention(width, heads, cross=True)
        self.norm3 = nn.RMSNorm(width, eps=1e-6)
        self.mlp = nn.Sequential(
            nn.Linear(width, hidden), nn.GELU(approximate="tanh"), nn.Linear(hidden, width)
        )

    def forward(
        self, x: torch.Tensor, context: torch.Tensor, padding: torch.Tensor | None = None
    ) -> torch.Tensor:
        x = x + self.attn(self.norm1(x), padding=padding)
        x = x + self.cross_attn(self.norm2(x), context)
        return x + self.mlp(self.norm3(x))


class RDTHead(GroupedActions):
    """The RDT denoiser for the embodiments it serves (see the module docstring).

    Built from its config and, per embodiment, `groups`, `horizons` and `state_dims`;
    `context_dim` is the width of the trunk's (and the prompt stem's) tokens; `language`
    whether odd blocks get their own language tokens. Calling it maps a noisy chunk and its
    timesteps to the clean chunk.
    """

    kind = "rdt"

    def __init__(
        self,
        config: RDTHeadConfig,
        *,
        groups: Mapping[str, Groups],
        horizons: Mapping[str, int],
        state_dims: Mapping[str, int],
        context_dim: int,
        language: bool,
    ) -> None:
        width = config.rdt_width
        super().__init__(groups, horizons, width)
        self.train_timesteps = config.train_timesteps
        self.sample_steps = config.sample_steps
        self.state_in = nn.ModuleDict({e: nn.Linear(int(s), width) for e, s in state_dims.items()})
        self.time_mlp = nn.Sequential(
            nn.Linear(TIME_FREQUENCIES, width), nn.SiLU(), nn.Linear(width, width)
        )
        # Timestep token, state token, then the action steps.
        self.position = nn.Parameter(torch.randn(1, 2 + max(self.horizons.values()), width) * 0.02)
        self.context_in = nn.Linear(context_dim, width)
        self.language_in = nn.Linear(context_dim, width) if language else None
        self.blocks = nn.ModuleList(
            RDTBlock(width, config.rdt_heads, config.rdt_mlp_ratio)
            for _ in range(config.rdt_layers)
        )
        self.norm = nn.RMSNorm(width, eps=1e-6)
        for block in self.blocks:
            for module in block.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

    def conditions(
        self, context: torch.Tensor, language: torch.Tensor | None
    ) -> list[torch.Tensor]:
        """What each block cross-attends to: trunk tokens in even blocks, language in odd."""
        trunk = self.context_in(context)
        if (language is None) != (self.language_in is None):
            raise ValueError(
                "language: this head was built "
                f"{'with' if self.language_in is not None else 'without'} language tokens "
                f"(use_prompt), but was called {'without' if language is None else 'with'} them"
            )
        words = trunk if self.language_in is None else self.language_in(language)
        return [trunk if i % 2 == 0 else words for i in range(len(self.blocks))]

    def forward(
        self,
        noisy: torch.Tensor,
        timesteps: torch.Tensor,
        state: torch.Tensor,
        context: torch.Tensor,
        language: torch.Tensor | None,
        embodiment: str,
        padded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The clean chunk (B, T, A) predicted from `noisy` at integer `timesteps` (B,).

        `state` (B, S) is the latest state; `padded` (B, T) hides padded steps from the
        others' self-attention (the timestep and state tokens are never hidden).
        """
        steps = noisy.shape[1]
        t = sinusoidal_embedding(timesteps.float() / self.train_timesteps, TIME_FREQUENCIES)
        tokens = torch.cat(
            [
                self.time_mlp(t.to(noisy.dtype))[:, None],
                self.state_in[embodiment](state.to(noisy.dtype))[:, None],
                self.embed_actions(noisy, embodiment),
            ],
            dim=1,
        )
        x = tokens + self.position[:, : steps + 2]
        if padded is not None:
            padded = torch.cat([padded.new_zeros(padded.shape[0], 2), padded], dim=1)
        for block, condition in zip(self.blocks, self.conditions(context, language), strict=True):
            x = block(x, condition, padded)
        return self.read_actions(self.norm(x[:, 2:]), embodiment)

    def loss(
        self,
        context: torch.Tensor,
        language: torch.Tensor | None,
        state: torch.Tensor,
        actions: torch.Tensor,
        mask: torch.Tensor,
        embodiment: str,
    ) -> torch.Tensor:
        """DDPM with the clean chunk as target: MSE over the valid steps of `mask`."""
        from diffusers.schedulers.scheduling_ddpm import DDPMScheduler

        scheduler = DDPMScheduler(**_schedule(self.train_timesteps), clip_sample=False)
        noise = torch.randn_like(actions)
        timesteps = torch.randint(
            0, self.train_timesteps, (actions.shape[0],), device=actions.device
        )
        noisy = scheduler.add_noise(actions, noise, cast(torch.IntTensor, timesteps))
        predicted = self(noisy, timesteps, state, context, language, embodiment, ~mask)
        return masked_mean((predicted - actions).pow(2), mask)

    @torch.no_grad()
    def sample(
        self,
        context: torch.Tensor,
        language: torch.Tensor | None,
        state: torch.Tensor,
        embodiment: str,
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        """`sample_steps` of DPM-Solver++ from noise (given, or drawn from `generator`).

        A prefix is refused: DPM-Solver++ cannot inpaint one.
        """
        if prefix is not None:
            raise ValueError(
                "RDT samples with DPM-Solver++, which cannot inpaint a prefix (real-time "
                "chunking needs a flow-matching policy: HPT with head: flow, or Pi); use the "
                "chunk or temporal_ensemble executor"
            )
        from diffusers.schedulers.scheduling_dpmsolver_multistep import (
            DPMSolverMultistepScheduler,
        )

        shape = self.chunk_shape(context.shape[0], embodiment)
        noise = chunk_noise(shape, generator, noise, context.device)
        x = noise.to(device=context.device, dtype=context.dtype)
        scheduler = DPMSolverMultistepScheduler(
            **_schedule(self.train_timesteps), algorithm_type="dpmsolver++"
        )
        scheduler.set_timesteps(self.sample_steps, device=context.device)
        for t in scheduler.timesteps:
            timesteps = t.expand(shape[0])
            predicted = self(x, timesteps, state, context, language, embodiment)
            x = scheduler.step(predicted, t, x, return_dict=False)[0]
        return x


@register_policy
class RDTPolicy(HPTPolicy):
    """HPT's stems and trunk with RDT diffusion heads (see the module docstring).

    Built from an RDTConfig (HPTConfig's fields and the RDT head's) and the embodiments.
    """

    name: ClassVar[str] = "rdt"
    config_type: ClassVar[type[PolicyConfig]] = RDTConfig

    def __init__(self, config: RDTConfig, embodiments: Embodiments) -> None:
        super().__init__(config, embodiments)

    @property
    def config(self) -> RDTConfig:
        """The config this policy was built from."""
        config = self._config
        assert isinstance(config, RDTConfig)
        return config

    def _heads(self) -> dict[str, nn.Module]:
        """RDT heads in place of HPT's, one per embodiment or one shared."""
        c = self.config
        return {
            head: RDTHead(
                c,
                groups={e: self.specs[e].groups for e in names},
                horizons={e: self.specs[e].horizon for e in names},
                state_dims={e: self.specs[e].state_dim for e in names},
                context_dim=c.d_model,
                language=self.use_prompt,
            )
            for head, names in self._served().items()
        }

    def can_inpaint(self, embodiment: str) -> bool:
        """False: DPM-Solver++ sampling takes no prefix (see RDTHead.sample)."""
        return False

    def head_for(self, embodiment: str) -> RDTHead:  # type: ignore[override]
        """The RDT head that serves `embodiment` (its own, or the shared one)."""
        return self.heads[self.head_of[embodiment]]  # type: ignore[return-value]

    def conditions(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The trunk's tokens, and the prompt stem's tokens when `use_prompt` (else None)."""
        trunk, stem_tokens = self.encode_with_stems(batch)
        return trunk, stem_tokens.get(PROMPT)

    def head_inputs(self, batch: Mapping[str, Any]) -> tuple[Any, ...]:
        """What an RDT head reads: the `conditions` and the latest state (B, S)."""
        context, language = self.conditions(batch)
        return context, language, batch["state"][:, -1]
