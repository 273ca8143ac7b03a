"""HPT: stems per embodiment and modality (or shared) into a shared trunk, then heads.

Stems are per (embodiment, modality) or shared by name; heads per embodiment or shared.
With `residual_actions`, heads model the chunk relative to the latest state (state and
actions of one layout), so holding still is the easiest thing to learn, not the hardest.
Built on the CPU and never choosing a device; every dimension and channel group comes in
as plain numbers and names. A batch's tokens: each stem's latent tokens plus its slot's
modality embedding, then the embodiment's learned readout tokens; the trunk attends over
all of them, and the head reads the readout tokens (all tokens when there are none).
Pretrained parts load by hash at the end of construction and are never re-initialised.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from polymimic_policies.action_heads import HEAD_KINDS, ActionHead
from polymimic_policies.pretrained import load_part, save_part
from polymimic_policies.stems import ImageStem, StateStem, TextStem
from polymimic_policies.transformer_blocks import Trunk

SHARED_HEAD = "shared"
PROMPT = "prompt"


@dataclass(frozen=True)
class EmbodimentSpec:
    """What a policy needs to know of one embodiment: plain numbers and names.

    `action_groups` names the action channels, (name, width) in layout order; without it
    the actions are one group, "actions".
    """

    state_dim: int
    action_dim: int
    history: int
    horizon: int
    cameras: Sequence[str] = field(default_factory=lambda: ("front_1",))
    action_groups: Sequence[tuple[str, int]] = ()

    def __post_init__(self) -> None:
        for name in ("state_dim", "action_dim", "history", "horizon"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}: must be a positive integer, got {getattr(self, name)}")
        widths = sum(w for _, w in self.action_groups)
        if self.action_groups and widths != self.action_dim:
            raise ValueError(
                f"action_groups: widths sum to {widths}, action_dim is {self.action_dim}"
            )

    def check_batch(
        self, batch: Mapping[str, Any], embodiment: str, *, actions: bool, cameras: Any = None
    ) -> None:
        """ValueError naming the key, the shape this embodiment declares and the one given.

        State (B, history, state_dim), each camera's images (B, 3, H, W), and with `actions`
        the chunk (B, horizon, action_dim) and its mask (B, horizon), all of one batch size.
        `cameras` defaults to the declared cameras.
        """
        expected: dict[str, tuple[Any, ...]] = {"state": ("B", self.history, self.state_dim)}
        for camera in self.cameras if cameras is None else cameras:
            expected[f"images.{camera}"] = ("B", 3, "H", "W")
        if actions:
            expected["actions"] = ("B", self.horizon, self.action_dim)
            expected["action_mask"] = ("B", self.horizon)
        size = None
        for key, want in expected.items():
            if key not in batch:
                raise ValueError(
                    f"batch[{key!r}]: missing; {embodiment} expects {_shape_text(want)} "
                    f"(the batch has {sorted(k for k in batch if not k.startswith('_'))})"
                )
            got = tuple(batch[key].shape)
            fits = len(got) == len(want) and all(
                isinstance(w, str) or g == w for g, w in zip(got, want, strict=False)
            )
            if not fits or (size is not None and got[0] != size):
                raise ValueError(
                    f"batch[{key!r}]: {embodiment} expects {_shape_text(want, size)}, got {got}"
                )
            size = got[0]

    @property
    def groups(self) -> list[tuple[str, int]]:
        return [(str(n), int(w)) for n, w in self.action_groups] or [("actions", self.action_dim)]

    @classmethod
    def of(cls, value: EmbodimentSpec | Mapping[str, Any]) -> EmbodimentSpec:
        if isinstance(value, EmbodimentSpec):
            return value
        kwargs: dict[str, Any] = {}
        for key, item in value.items():
            if key == "cameras":
                kwargs[key] = tuple(str(c) for c in item)
            elif key == "action_groups":
                kwargs[key] = tuple((str(n), int(w)) for n, w in item)
            else:
                kwargs[key] = int(item)
        return cls(**kwargs)


def _shape_text(shape: tuple[Any, ...], size: int | None = None) -> str:
    return "(" + ", ".join(str(size if d == "B" and size is not None else d) for d in shape) + ")"


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
        raise ValueError(f"resnet_blocks: four positive counts, e.g. [2, 2, 2, 2]; got {blocks}")


def _slot(embodiment: str, modality: str) -> str:
    return f"{embodiment}__{modality}"


class HPTPolicy(nn.Module):
    """Heterogeneous pre-trained transformer policy (see the module docstring)."""

    def __init__(
        self,
        *,
        embodiments: Mapping[str, EmbodimentSpec | Mapping[str, Any]],
        d_model: int = 128,
        trunk_layers: int = 2,
        num_heads: int = 4,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
        image_tokens: int = 8,
        state_tokens: int = 2,
        text_tokens: int = 4,
        readout_tokens: int = 4,
        image_backbone: str = "resnet",
        resnet_blocks: Sequence[int] = (2, 2, 2, 2),
        vit_layers: int = 4,
        vit_patch_size: int = 8,
        freeze_backbone: bool = False,
        use_prompt: bool = False,
        text_layers: int = 2,
        max_prompt_bytes: int = 128,
        shared_stems: Mapping[str, str] | None = None,
        head: str = "flow",
        shared_head: bool = False,
        head_layers: int = 2,
        sample_steps: int = 10,
        regression_loss: str = "l1",
        residual_actions: bool = False,
        pretrained: Mapping[str, Mapping[str, str]] | None = None,
        compile: bool = False,
    ) -> None:
        # Every argument but the embodiments, for save_pretrained (taken before any local).
        hyperparameters = {
            k: v for k, v in locals().items() if k not in ("self", "embodiments", "__class__")
        }
        super().__init__()
        self.hyperparameters = hyperparameters
        if not embodiments:
            raise ValueError("embodiments: HPTPolicy needs at least one")
        _check_sizes(
            d_model=d_model,
            num_heads=num_heads,
            resnet_blocks=resnet_blocks,
            trunk_layers=trunk_layers,
            image_tokens=image_tokens,
            state_tokens=state_tokens,
            text_tokens=text_tokens,
            head_layers=head_layers,
            sample_steps=sample_steps,
        )
        if readout_tokens < 0:
            raise ValueError(f"readout_tokens: must be an integer >= 0, got {readout_tokens}")
        if head not in HEAD_KINDS:
            raise ValueError(f"head: {head!r} is not one of {sorted(HEAD_KINDS)}")
        self.specs = {name: EmbodimentSpec.of(spec) for name, spec in embodiments.items()}
        self.use_prompt = use_prompt
        self.residual_actions = residual_actions
        if residual_actions:
            unequal = [n for n, s in self.specs.items() if s.state_dim != s.action_dim]
            if unequal:
                raise ValueError(
                    f"residual_actions: needs state and actions of one layout; {unequal} have "
                    "state_dim != action_dim"
                )
        image_kwargs = {
            "d_model": d_model,
            "num_tokens": image_tokens,
            "num_heads": num_heads,
            "backbone": image_backbone,
            "resnet_blocks": tuple(resnet_blocks),
            "vit_layers": vit_layers,
            "vit_patch_size": vit_patch_size,
            "freeze_backbone": freeze_backbone,
        }
        shared = dict(shared_stems or {})
        stems: dict[str, nn.Module] = {}
        self.stem_of: dict[str, str] = {}  # slot (embodiment__modality) -> stem name
        for name, spec in self.specs.items():
            for modality in self.modalities(name):
                stem = shared.get(modality, _slot(name, modality))
                self.stem_of[_slot(name, modality)] = stem
                if stem in stems:
                    continue
                if modality == "state":
                    stems[stem] = StateStem(
                        spec.state_dim, spec.history, d_model, state_tokens, num_heads
                    )
                elif modality == PROMPT:
                    stems[stem] = TextStem(
                        d_model, text_tokens, num_heads, text_layers, max_prompt_bytes
                    )
                else:
                    stems[stem] = ImageStem(**image_kwargs)  # type: ignore[arg-type]
        self._check_shared_state_stems()
        self.stems = nn.ModuleDict(stems)
        self.modality_embedding = nn.ParameterDict(
            {slot: nn.Parameter(torch.randn(1, 1, d_model) * 0.02) for slot in self.stem_of}
        )
        self.readout = nn.ParameterDict(
            {
                name: nn.Parameter(torch.randn(1, readout_tokens, d_model) * 0.02)
                for name in self.specs
            }
        )
        self.trunk = Trunk(d_model, trunk_layers, num_heads, mlp_ratio, drop_path)
        self.heads = nn.ModuleDict(
            self._heads(
                head, shared_head, d_model, num_heads, head_layers, sample_steps, regression_loss
            )
        )
        self.head_of = {name: SHARED_HEAD if shared_head else name for name in self.specs}
        for part, source in (pretrained or {}).items():
            load_part(self.part(part), source["path"], source["sha256"], part)
        if compile:
            self.trunk.compile()
            for module in self.heads.values():
                module.compile()

    def modalities(self, embodiment: str) -> list[str]:
        spec = self.specs[embodiment]
        return ["state", *spec.cameras, *([PROMPT] if self.use_prompt else [])]

    def _check_shared_state_stems(self) -> None:
        sizes: dict[str, set[tuple[int, int]]] = {}
        for name, spec in self.specs.items():
            stem = self.stem_of[_slot(name, "state")]
            sizes.setdefault(stem, set()).add((spec.state_dim, spec.history))
        for stem, found in sizes.items():
            if len(found) > 1:
                raise ValueError(
                    f"shared_stems: state stem {stem!r} is shared by embodiments whose (state_dim,"
                    f" history) differ: {sorted(found)}; share only stems of equal inputs"
                )

    def _heads(
        self,
        kind: str,
        shared: bool,
        d_model: int,
        num_heads: int,
        layers: int,
        sample_steps: int,
        regression_loss: str,
    ) -> dict[str, ActionHead]:
        options: dict[str, Any] = {"d_model": d_model, "num_heads": num_heads, "num_layers": layers}
        options |= (
            {"sample_steps": sample_steps}
            if kind == "flow"
            else {"regression_loss": regression_loss}
        )
        served = {SHARED_HEAD: list(self.specs)} if shared else {n: [n] for n in self.specs}
        return {
            head: HEAD_KINDS[kind](
                groups={e: self.specs[e].groups for e in names},
                horizons={e: self.specs[e].horizon for e in names},
                **options,
            )
            for head, names in served.items()
        }

    def part(self, name: str) -> nn.Module:
        """A pretrained part by name: "trunk", "stems.<stem>" or "heads.<head>"."""
        if name == "trunk":
            return self.trunk
        group, _, key = name.partition(".")
        modules = {"stems": self.stems, "heads": self.heads}.get(group)
        if modules is None or key not in modules:
            parts = [
                "trunk",
                *(f"stems.{s}" for s in self.stems),
                *(f"heads.{h}" for h in self.heads),
            ]
            raise KeyError(f"pretrained: no part {name!r}; this policy has {parts}")
        return modules[key]

    def save_pretrained(self, directory: str | Path) -> Path:
        """Each part as safetensors, and `pretrained.json` with their paths and hashes.

        `pretrained_parts(<that json>, ...)` gives the mapping a new policy's `pretrained`
        argument takes, so one lab's trunk can start another lab's run.
        """
        directory = Path(directory)
        names = ["trunk", *(f"stems.{s}" for s in self.stems), *(f"heads.{h}" for h in self.heads)]
        parts = {}
        for name in names:
            file = f"{name}.safetensors"
            parts[name] = {"path": file, "sha256": save_part(self.part(name), directory / file)}
        config = {
            "hyperparameters": self.hyperparameters | {"pretrained": None},
            "parts": parts,
        }
        (directory / "pretrained.json").write_text(json.dumps(config, indent=2, default=str))
        return directory / "pretrained.json"

    def _spec(self, embodiment: str) -> EmbodimentSpec:
        try:
            return self.specs[embodiment]
        except KeyError:
            raise KeyError(
                f"this policy was built for embodiments {sorted(self.specs)}, not {embodiment!r}"
            ) from None

    def _input(self, batch: Mapping[str, Any], modality: str) -> Any:
        if modality == "state":
            return batch["state"]
        if modality == PROMPT:
            return batch.get(PROMPT) or [""] * len(batch["state"])
        return batch[f"images.{modality}"]

    def encode(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """The trunk's output tokens the head reads: (B, readout or all tokens, d_model)."""
        return self.encode_with_stems(batch)[0]

    def encode_with_stems(
        self, batch: Mapping[str, Any]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """`encode`'s tokens, and each modality's stem tokens (B, n, d_model) before the trunk.

        For heads that also read a stem directly (RDT cross-attends to the prompt's tokens).
        """
        embodiment = batch["embodiment"]
        self._spec(embodiment).check_batch(batch, embodiment, actions=False)
        stem_tokens, tokens = {}, []
        for modality in self.modalities(embodiment):
            slot = _slot(embodiment, modality)
            stem_tokens[modality] = self.stems[self.stem_of[slot]](self._input(batch, modality))
            tokens.append(stem_tokens[modality] + self.modality_embedding[slot])
        readout = self.readout[embodiment]
        size = tokens[0].shape[0]
        out = self.trunk(torch.cat([*tokens, readout.expand(size, -1, -1)], dim=1))
        out = out[:, -readout.shape[1] :].contiguous() if readout.shape[1] else out
        return out, stem_tokens

    def head_for(self, embodiment: str) -> ActionHead:
        return self.heads[self.head_of[embodiment]]  # type: ignore[return-value]

    def _anchor(self, batch: Mapping[str, Any]) -> torch.Tensor | float:
        """What actions are predicted relative to: the latest state, or nothing."""
        return batch["state"][:, -1:] if self.residual_actions else 0.0

    def compute_loss(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The loss for a normalised batch, with its parts for logging."""
        embodiment = batch["embodiment"]
        self._spec(embodiment).check_batch(batch, embodiment, actions=True)
        context = self.encode(batch)
        head = self.head_for(embodiment)
        target = batch["actions"] - self._anchor(batch)
        loss = head.loss(context, target, batch["action_mask"], embodiment)  # type: ignore[operator]
        return {"loss": loss, f"{head.kind}_loss": loss.detach()}

    @torch.no_grad()
    def sample_actions(
        self,
        batch: Mapping[str, Any],
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Normalised action chunks (B, T, A) sampled for a batch, from `noise` if given."""
        embodiment = batch["embodiment"]
        context = self.encode(batch)
        head = self.head_for(embodiment)
        chunk = head.sample(context, embodiment, generator, noise)  # type: ignore[operator]
        return chunk + self._anchor(batch)

    def param_groups(self, lr: float, backbone_lr: float) -> list[dict[str, Any]]:
        """Image backbones at `backbone_lr`, everything else at `lr`; frozen ones left out."""
        trainable = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        backbone = [p for n, p in trainable if ".backbone." in n]
        rest = [p for n, p in trainable if ".backbone." not in n]
        return [
            {"name": "backbone", "params": backbone, "lr": backbone_lr},
            {"name": "policy", "params": rest, "lr": lr},
        ]


def pretrained_parts(config: str | Path, names: Sequence[str]) -> dict[str, dict[str, str]]:
    """The `pretrained` argument for the named parts of a `save_pretrained` directory."""
    config = Path(config)
    saved = json.loads(config.read_text())["parts"]
    unknown = [n for n in names if n not in saved]
    if unknown:
        raise KeyError(f"{config}: no part(s) {unknown}; it has {sorted(saved)}")
    return {
        n: {"path": str(config.parent / saved[n]["path"]), "sha256": saved[n]["sha256"]}
        for n in names
    }
