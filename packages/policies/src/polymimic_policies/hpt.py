"""HPT: stems per embodiment and modality (or shared) into a shared trunk, then heads.

Stems are per (embodiment, modality) or shared by name; heads per embodiment or shared.
With `residual_actions`, heads model the chunk relative to the latest state (state and
actions of one layout), so holding still is the easiest thing to learn, not the hardest;
the state comes in the actions' units, as the batch's `action_anchor`.
Built on the CPU and never choosing a device; every dimension and channel group comes in
as plain numbers and names. A batch's tokens: each stem's latent tokens plus its slot's
modality embedding, then the embodiment's learned readout tokens; the trunk attends over
all of them, and the head reads the readout tokens (all tokens when there are none).
Pretrained parts load by hash at the end of construction and are never re-initialised.
Every option is a field of one HPTConfig; `HPTPolicy(config, embodiments)` builds it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import torch
from torch import nn

from polymimic_policies.action_heads import HEAD_KINDS, ActionHead, ActionHeadConfig
from polymimic_policies.embodiment_spec import EmbodimentSpec
from polymimic_policies.policy import (
    Embodiments,
    LocalWeights,
    check_config_type,
    register_policy,
)
from polymimic_policies.policy_config import PolicyConfig, one_of, positive_integers
from polymimic_policies.pretrained import load_part, save_part
from polymimic_policies.real_time_chunking import ActionPrefix
from polymimic_policies.stems import ImageStem, StateStem, TextStem
from polymimic_policies.transformer_blocks import Trunk

SHARED_HEAD = "shared"
PROMPT = "prompt"


@dataclass(frozen=True)
class StemsTrunkConfig(PolicyConfig):
    """HPT's stems and trunk, and how heads sit on them: what HPT and RDT share.

    Stems: `image_tokens`, `state_tokens` and `text_tokens` latent tokens each; images
    through a ResNet (`resnet_blocks` per stage; `image_positions`: its feature tokens
    placed, see ImageStem) or a small ViT (`image_backbone="vit"`);
    `shared_stems` maps a modality to one stem name shared by every embodiment. Heads:
    one per embodiment, or one `shared_head`. `pretrained` maps parts ("trunk",
    "stems.<name>", "heads.<name>") to {path, sha256}; `compile` runs torch.compile on
    trunk and heads.
    """

    initial_weights: ClassVar[Mapping[str, Any]] = {"pretrained": {}}

    d_model: int = 128
    trunk_layers: int = 2
    num_heads: int = 4
    mlp_ratio: float = 4.0
    drop_path: float = 0.0
    image_tokens: int = 8
    state_tokens: int = 2
    text_tokens: int = 4
    readout_tokens: int = 4
    image_backbone: str = "resnet"
    resnet_blocks: Sequence[int] = (2, 2, 2, 2)
    vit_layers: int = 4
    vit_patch_size: int = 8
    freeze_backbone: bool = False
    image_positions: bool = False
    use_prompt: bool = False
    text_layers: int = 2
    max_prompt_bytes: int = 128
    shared_stems: Mapping[str, str] = field(default_factory=dict)
    shared_head: bool = False
    residual_actions: bool = False
    pretrained: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    compile: bool = False

    def __post_init__(self) -> None:
        """ValueError naming the first field that cannot work: `<name>: <why>; <what works>`."""
        super().__post_init__()
        positive_integers(
            d_model=self.d_model,
            num_heads=self.num_heads,
            trunk_layers=self.trunk_layers,
            image_tokens=self.image_tokens,
            state_tokens=self.state_tokens,
            text_tokens=self.text_tokens,
        )
        if self.d_model % self.num_heads:
            divisors = [n for n in range(1, self.d_model + 1) if self.d_model % n == 0]
            raise ValueError(
                f"num_heads: {self.num_heads} does not divide d_model={self.d_model}; "
                f"choose one of {divisors}"
            )
        blocks = list(self.resnet_blocks)
        if len(blocks) != 4 or any(b < 1 for b in blocks):
            raise ValueError(
                f"resnet_blocks: four positive counts, e.g. [2, 2, 2, 2]; got {blocks}"
            )
        if self.readout_tokens < 0:
            raise ValueError(f"readout_tokens: must be an integer >= 0, got {self.readout_tokens}")
        if not 0.0 <= self.drop_path < 1.0:
            raise ValueError(f"drop_path: must be in [0, 1), got {self.drop_path}")
        one_of("image_backbone", self.image_backbone, ["resnet", "vit"])
        for part, source in self.pretrained.items():
            if set(source) != {"path", "sha256"}:
                raise ValueError(
                    f"pretrained.{part}: needs exactly path and sha256, got {sorted(source)}"
                )


@dataclass(frozen=True)
class HPTConfig(ActionHeadConfig, StemsTrunkConfig):
    """HPTPolicy's config: the stems and trunk under heads of the kind `head` names.

    StemsTrunkConfig's fields, then ActionHeadConfig's; `head` is one of `head_kinds`,
    HPT's "flow" or "regression".

    The settings of a kind not chosen are carried and ignored (`regression_loss` under a
    flow head), so a config of another kind composes from this one (RDTConfig).
    """

    head_kinds: ClassVar[Sequence[str]] = tuple(HEAD_KINDS)

    head: str = "flow"

    def __post_init__(self) -> None:
        """ValueError naming the first field that cannot work: `<name>: <why>; <what works>`."""
        super().__post_init__()
        one_of("head", self.head, list(self.head_kinds))


def _slot(embodiment: str, modality: str) -> str:
    return f"{embodiment}__{modality}"


@register_policy
class HPTPolicy(nn.Module):
    """Heterogeneous pre-trained transformer policy (see the module docstring).

    Built from an HPTConfig and the embodiments' specs (EmbodimentSpec or plain mappings).
    """

    name: ClassVar[str] = "hpt"
    config_type: ClassVar[type[PolicyConfig]] = HPTConfig
    rotation_kinds: ClassVar[tuple[str, ...] | None] = None  # any representation
    local_weights: ClassVar[Mapping[str, LocalWeights]] = {}
    specs: dict[str, EmbodimentSpec]
    _config: HPTConfig

    def __init__(self, config: HPTConfig, embodiments: Embodiments) -> None:
        check_config_type(type(self), config)
        super().__init__()
        self._config = config
        if not embodiments:
            raise ValueError(f"embodiments: {type(self).__name__} needs at least one")
        self.specs = {name: EmbodimentSpec.of(spec) for name, spec in embodiments.items()}
        self.use_prompt = config.use_prompt
        self.residual_actions = config.residual_actions
        self._check_residual_actions()
        self.stem_of: dict[str, str] = {}  # slot (embodiment__modality) -> stem name
        stems = self._stems()
        self._check_shared_state_stems()
        self.stems = nn.ModuleDict(stems)
        d_model = config.d_model
        self.modality_embedding = nn.ParameterDict(
            {slot: nn.Parameter(torch.randn(1, 1, d_model) * 0.02) for slot in self.stem_of}
        )
        self.readout = nn.ParameterDict(
            {
                name: nn.Parameter(torch.randn(1, config.readout_tokens, d_model) * 0.02)
                for name in self.specs
            }
        )
        self.trunk = Trunk(
            d_model, config.trunk_layers, config.num_heads, config.mlp_ratio, config.drop_path
        )
        self.heads = nn.ModuleDict(self._heads())
        self.head_of = {name: SHARED_HEAD if config.shared_head else name for name in self.specs}
        for part, source in config.pretrained.items():
            load_part(self.part(part), source["path"], source["sha256"], part)
        if config.compile:
            self.trunk.compile()
            for module in self.heads.values():
                module.compile()

    @property
    def config(self) -> HPTConfig:
        """The config this policy was built from."""
        return self._config

    def _check_residual_actions(self) -> None:
        if not self.residual_actions:
            return
        unequal = [n for n, s in self.specs.items() if s.state_dim != s.action_dim]
        if unequal:
            raise ValueError(
                f"residual_actions: needs state and actions of one layout; {unequal} have "
                "state_dim != action_dim"
            )

    def _stems(self) -> dict[str, nn.Module]:
        """Each stem by name, a shared one built once; fills `stem_of` for every slot."""
        stems: dict[str, nn.Module] = {}
        for name, spec in self.specs.items():
            for modality in self.modalities(name):
                stem = self.config.shared_stems.get(modality, _slot(name, modality))
                self.stem_of[_slot(name, modality)] = stem
                if stem not in stems:
                    stems[stem] = self._stem(modality, spec)
        return stems

    def _stem(self, modality: str, spec: EmbodimentSpec) -> nn.Module:
        c = self.config
        if modality == "state":
            return StateStem(spec.state_dim, spec.history, c.d_model, c.state_tokens, c.num_heads)
        if modality == PROMPT:
            return TextStem(
                c.d_model, c.text_tokens, c.num_heads, c.text_layers, c.max_prompt_bytes
            )
        return ImageStem(
            d_model=c.d_model,
            num_tokens=c.image_tokens,
            num_heads=c.num_heads,
            backbone=c.image_backbone,
            resnet_blocks=tuple(c.resnet_blocks),
            vit_layers=c.vit_layers,
            vit_patch_size=c.vit_patch_size,
            freeze_backbone=c.freeze_backbone,
            image_positions=c.image_positions,
        )

    def modalities(self, embodiment: str) -> list[str]:
        """The embodiment's modalities in token order: state, its cameras, the prompt."""
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

    def _served(self) -> dict[str, list[str]]:
        """Each head's embodiments: one shared head for all, or one head per embodiment."""
        if self.config.shared_head:
            return {SHARED_HEAD: list(self.specs)}
        return {name: [name] for name in self.specs}

    def _heads(self) -> dict[str, nn.Module]:
        """The heads by name, of the kind `config.head` says (RDTPolicy builds its own)."""
        c = self.config
        return {
            head: HEAD_KINDS[c.head](
                c,
                groups={e: self.specs[e].groups for e in names},
                horizons={e: self.specs[e].horizon for e in names},
                d_model=c.d_model,
                num_heads=c.num_heads,
            )
            for head, names in self._served().items()
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

        `pretrained.json` also holds the policy's record (its name and config, without
        pretrained parts). `pretrained_parts(<that json>, ...)` gives the mapping a new
        config's `pretrained` field takes, so one lab's trunk can start another lab's run.
        """
        directory = Path(directory)
        names = ["trunk", *(f"stems.{s}" for s in self.stems), *(f"heads.{h}" for h in self.heads)]
        parts = {}
        for name in names:
            file = f"{name}.safetensors"
            parts[name] = {"path": file, "sha256": save_part(self.part(name), directory / file)}
        policy = {"name": self.name, "config": self.config.without_initial_weights().to_dict()}
        saved = {"policy": policy, "parts": parts}
        (directory / "pretrained.json").write_text(json.dumps(saved, indent=2))
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
        """The head that serves `embodiment` (its own, or the shared one)."""
        return self.heads[self.head_of[embodiment]]  # type: ignore[return-value]

    def _anchor(self, batch: Mapping[str, Any]) -> torch.Tensor | float:
        """What actions are predicted relative to: the latest state, or nothing.

        The state in the actions' units: `batch["action_anchor"]` (B, 1, A), which the
        Normalizer writes. `batch["state"]` is normalised with the state's own statistics,
        which differ, and a head would have to learn to undo the difference.
        """
        if not self.residual_actions:
            return 0.0
        anchor = batch.get("action_anchor")
        want = (batch["state"].shape[0], 1, self._spec(batch["embodiment"]).action_dim)
        if anchor is None or tuple(anchor.shape) != want:
            got = "missing" if anchor is None else f"got {tuple(anchor.shape)}"
            raise ValueError(
                f"batch['action_anchor']: residual_actions needs the latest state normalised "
                f"as an action, {want} (Normalizer.normalize_batch writes it); {got}"
            )
        return anchor

    def head_inputs(self, batch: Mapping[str, Any]) -> tuple[Any, ...]:
        """What a head reads of a batch, before the actions: the trunk's tokens (RDT: more)."""
        return (self.encode(batch),)

    def compute_loss(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The loss for a normalised batch, with its parts for logging."""
        embodiment = batch["embodiment"]
        self._spec(embodiment).check_batch(batch, embodiment, actions=True)
        inputs = self.head_inputs(batch)
        head = self.head_for(embodiment)
        target = batch["actions"] - self._anchor(batch)
        loss = head.loss(*inputs, target, batch["action_mask"], embodiment)  # type: ignore[operator]
        return {"loss": loss, f"{head.kind}_loss": loss.detach()}

    @torch.no_grad()
    def sample_actions(
        self,
        batch: Mapping[str, Any],
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        """Normalised action chunks (B, T, A) sampled for a batch, from `noise` if given.

        With `prefix` (a flow head only), each chunk continues it (real-time chunking).
        """
        embodiment = batch["embodiment"]
        inputs = self.head_inputs(batch)
        head = self.head_for(embodiment)
        anchor = self._anchor(batch)
        if prefix is not None:
            prefix = prefix.shifted(anchor)
        chunk = head.sample(*inputs, embodiment, generator, noise, prefix)  # type: ignore[operator]
        return chunk + anchor

    def can_inpaint(self, embodiment: str) -> bool:
        """Whether `sample_actions` takes a prefix for this embodiment (its head flows)."""
        return self.head_for(embodiment).kind == "flow"

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
    """The `pretrained` config field for the named parts of a `save_pretrained` directory."""
    config = Path(config)
    saved = json.loads(config.read_text())["parts"]
    unknown = [n for n in names if n not in saved]
    if unknown:
        raise KeyError(f"{config}: no part(s) {unknown}; it has {sorted(saved)}")
    return {
        n: {"path": str(config.parent / saved[n]["path"]), "sha256": saved[n]["sha256"]}
        for n in names
    }
