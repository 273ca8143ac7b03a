"""HPT: per-embodiment stems into a shared trunk, with per-embodiment flow-matching heads.

Built on the CPU and never choosing a device. Dimensions come in as plain numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from polymimic_policies.flow_matching import FlowMatchingActionHead
from polymimic_policies.image_stems import ResNetImageStem


@dataclass(frozen=True)
class EmbodimentSpec:
    """What a policy needs to know of one embodiment: plain numbers and names."""

    state_dim: int
    action_dim: int
    history: int
    horizon: int
    cameras: Sequence[str] = field(default_factory=lambda: ("front_1",))

    @classmethod
    def of(cls, value: EmbodimentSpec | Mapping[str, Any]) -> EmbodimentSpec:
        if isinstance(value, EmbodimentSpec):
            return value
        return cls(**{k: (tuple(v) if k == "cameras" else int(v)) for k, v in value.items()})


class StateStem(nn.Module):
    """(B, K, S) proprio history -> K tokens with a learned time embedding."""

    def __init__(self, state_dim: int, history: int, d_model: int) -> None:
        super().__init__()
        self.project = nn.Sequential(
            nn.Linear(state_dim, d_model), nn.GELU(), nn.Linear(d_model, d_model)
        )
        self.time_embedding = nn.Parameter(torch.randn(1, history, d_model) * 0.02)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.project(state) + self.time_embedding


def _check_sizes(
    *, d_model: int, num_heads: int, resnet_blocks: Sequence[int], **counts: int
) -> None:
    """ValueError naming the first parameter that cannot work: `<name>: <why>; <what works>`."""
    for name, value in {"d_model": d_model, "num_heads": num_heads, **counts}.items():
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: must be a positive integer, got {value!r}")
    if d_model % num_heads:
        divisors = [n for n in range(1, d_model + 1) if d_model % n == 0]
        raise ValueError(
            f"num_heads: {num_heads} does not divide d_model={d_model}; choose one of {divisors}"
        )
    blocks = list(resnet_blocks)
    if len(blocks) != 4 or any(not isinstance(b, int) or b < 1 for b in blocks):
        raise ValueError(
            f"resnet_blocks: four positive block counts, e.g. [2, 2, 2, 2]; got {blocks}"
        )


def _stem_key(embodiment: str, modality: str) -> str:
    return f"{embodiment}__{modality}"


class HPTPolicy(nn.Module):
    """Heterogeneous pre-trained transformer policy with a flow-matching action head."""

    def __init__(
        self,
        *,
        embodiments: Mapping[str, EmbodimentSpec | Mapping[str, Any]],
        d_model: int = 128,
        trunk_layers: int = 2,
        num_heads: int = 4,
        image_tokens: int = 8,
        resnet_blocks: Sequence[int] = (2, 2, 2, 2),
        head_layers: int = 2,
        sample_steps: int = 10,
    ) -> None:
        super().__init__()
        if not embodiments:
            raise ValueError("embodiments: HPTPolicy needs at least one")
        _check_sizes(
            d_model=d_model,
            trunk_layers=trunk_layers,
            num_heads=num_heads,
            image_tokens=image_tokens,
            head_layers=head_layers,
            sample_steps=sample_steps,
            resnet_blocks=resnet_blocks,
        )
        self.specs = {name: EmbodimentSpec.of(spec) for name, spec in embodiments.items()}
        stems: dict[str, nn.Module] = {}
        heads: dict[str, nn.Module] = {}
        for name, spec in self.specs.items():
            stems[_stem_key(name, "state")] = StateStem(spec.state_dim, spec.history, d_model)
            for camera in spec.cameras:
                stems[_stem_key(name, camera)] = ResNetImageStem(
                    d_model=d_model,
                    num_tokens=image_tokens,
                    blocks_per_stage=tuple(resnet_blocks),
                    num_heads=num_heads,
                )
            heads[name] = FlowMatchingActionHead(
                action_dim=spec.action_dim,
                horizon=spec.horizon,
                d_model=d_model,
                num_layers=head_layers,
                num_heads=num_heads,
                sample_steps=sample_steps,
            )
        self.stems = nn.ModuleDict(stems)
        self.heads = nn.ModuleDict(heads)
        self.modality_embedding = nn.ParameterDict(
            {key: nn.Parameter(torch.zeros(1, 1, d_model)) for key in stems}
        )
        layer = nn.TransformerEncoderLayer(
            d_model, num_heads, 4 * d_model, dropout=0.0, batch_first=True, norm_first=True
        )
        self.trunk = nn.TransformerEncoder(layer, trunk_layers, enable_nested_tensor=False)

    def _spec(self, embodiment: str) -> EmbodimentSpec:
        try:
            return self.specs[embodiment]
        except KeyError:
            raise KeyError(
                f"this policy was built for embodiments {sorted(self.specs)}, not {embodiment!r}"
            ) from None

    def encode(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """Stem tokens of every modality through the shared trunk: (B, N, d_model)."""
        embodiment = batch["embodiment"]
        spec = self._spec(embodiment)
        tokens = []
        for modality in ("state", *spec.cameras):
            key = _stem_key(embodiment, modality)
            value = batch["state"] if modality == "state" else batch[f"images.{modality}"]
            tokens.append(self.stems[key](value) + self.modality_embedding[key])
        return self.trunk(torch.cat(tokens, dim=1))

    def compute_loss(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The loss for a normalised batch, with its parts for logging."""
        context = self.encode(batch)
        flow = self.heads[batch["embodiment"]].loss(context, batch["actions"], batch["action_mask"])
        return {"loss": flow, "flow_loss": flow.detach()}

    @torch.no_grad()
    def sample_actions(
        self,
        batch: Mapping[str, Any],
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Normalised action chunks (B, T, A) sampled for a batch, from `noise` if given."""
        context = self.encode(batch)
        head = self.heads[batch["embodiment"]]
        return head.sample(context, generator, noise=noise)  # type: ignore[operator]

    def param_groups(self, lr: float, backbone_lr: float) -> list[dict[str, Any]]:
        """Image backbones at `backbone_lr`, everything else at `lr`."""
        backbone = [p for n, p in self.named_parameters() if ".backbone." in n]
        ids = {id(p) for p in backbone}
        rest = [p for p in self.parameters() if id(p) not in ids]
        return [
            {"name": "backbone", "params": backbone, "lr": backbone_lr},
            {"name": "policy", "params": rest, "lr": lr},
        ]
