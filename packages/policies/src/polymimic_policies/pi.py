"""Pi (pi0 / pi0.5): PaliGemma over images and prompt, a flow-matching action expert beside it.

openpi's design in PyTorch over an unpatched transformers `PaliGemmaForConditionalGeneration`
whose Gemma decoder layers' submodules are driven here directly.

- Prefix: each image slot's camera through SigLIP and the projector (resized on the fly to
  the vision tower's size, scaled to [-1, 1]), then the prompt's tokens. A slot whose
  camera the embodiment lacks is masked out: zeros that no token attends to, taking no
  position (positions count valid tokens only), so it changes nothing. pi0.5 writes the
  latest state into the prompt as 256-bin integers: "Task: <prompt>, State: 12 200;", a
  newline, "Action: ".
- Action expert: a Gemma-style decoder from scratch, with the language model's layer count,
  heads, key/value heads and head_dim (so attention joins layer by layer) but its own width
  and MLP. pi0.5: flow time enters through adaptive RMSNorm (scale, shift, gate per norm);
  pi0: the state is one continuous expert token, time is mixed into each action token.
- Attention: the prefix attends bidirectionally among its valid tokens and never to the
  expert's tokens, so it is computed once (per training step, per sampled chunk) as a
  key/value cache, and each expert layer attends over [that layer's cached prefix K, V ;
  its own K, V]: the same as joint attention, computed once.
- Flow matching (`flow_matching`, as HPT's flow head): x_t = t * noise + (1 - t) * actions,
  t ~ Beta(1.5, 1) in (0.001, 1), the expert predicts noise - actions; loss = mean squared
  error over valid steps; sampling integrates t from 1 to 0 in `sample_steps` Euler steps.
"""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import nn

from polymimic_policies import flow_matching
from polymimic_policies.action_chunks import chunk_noise
from polymimic_policies.embodiment_spec import EmbodimentSpec
from polymimic_policies.paligemma_loading import (
    build_paligemma,
    check_paligemma_path,
    load_paligemma,
    load_tokenizer,
)
from polymimic_policies.policy import (
    Embodiments,
    LocalWeights,
    check_config_type,
    register_policy,
)
from polymimic_policies.policy_config import PolicyConfig, one_of, positive_integers
from polymimic_policies.real_time_chunking import ActionPrefix

VARIANTS = ("pi0", "pi05")
DEFAULT_IMAGE_SLOTS = {
    "base_0_rgb": "front_1",
    "left_wrist_0_rgb": "left_wrist",
    "right_wrist_0_rgb": "right_wrist",
}
DEFAULT_MAX_TOKEN_LEN = {"pi0": 48, "pi05": 200}  # openpi's
KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: keys, values (B, KV, P, D)


def time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """Sine-cosine embedding of (B,) times, periods 4e-3 to 4 (openpi's): (B, dim) float32."""
    fraction = torch.linspace(0.0, 1.0, dim // 2, dtype=torch.float64, device=t.device)
    period = 4e-3 * (4.0 / 4e-3) ** fraction
    angles = (2 * math.pi / period)[None] * t[:, None].double()
    return torch.cat([angles.sin(), angles.cos()], -1).float()


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of (B, H, N, D) by (B, N, D) cos/sin (Gemma's rotate-half form)."""
    cos, sin = cos[:, None].float(), sin[:, None].float()
    half = x.shape[-1] // 2
    y = x.float()
    rotated = torch.cat([-y[..., half:], y[..., :half]], -1)
    return (y * cos + rotated * sin).to(x.dtype)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    allowed: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Grouped-query attention (B, H, N, D) over (B, KV, M, D); `allowed` (B, 1, N, M) bool.

    Keys and values are repeated per query head (not `enable_gqa`) so that the
    memory-efficient kernel, which takes a mask, stays available.
    """
    groups = q.shape[1] // k.shape[1]
    k, v = k.to(q.dtype), v.to(q.dtype)
    if groups > 1:
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed, scale=scale)
    return out.transpose(1, 2).flatten(2)


class ExpertRMSNorm(nn.Module):
    """Gemma's RMSNorm (x * (1 + w)); adaptive when `cond_dim`: scale, shift, gate from cond.

    The adaptive one's projection starts with zero weights (openpi), so it starts as a
    plain norm whose residual branch is gated by its (small, random) bias.
    """

    def __init__(self, dim: int, cond_dim: int | None = None, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        if cond_dim is None:
            self.weight = nn.Parameter(torch.zeros(dim))
            self.dense = None
        else:
            self.dense = nn.Linear(cond_dim, 3 * dim)
            nn.init.zeros_(self.dense.weight)

    def forward(
        self, x: torch.Tensor, cond: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        normed = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        if self.dense is None:
            return (normed * (1.0 + self.weight.float())).type_as(x), None
        if cond is None:
            raise ValueError("an adaptive RMSNorm needs its condition (the time embedding)")
        scale, shift, gate = self.dense(cond)[:, None].chunk(3, dim=-1)
        out = normed * (1.0 + scale.float()) + shift.float()
        return out.type_as(x), gate


def _gated(residual: torch.Tensor, out: torch.Tensor, gate: torch.Tensor | None) -> torch.Tensor:
    return residual + (out if gate is None else out * gate)


class ExpertLayer(nn.Module):
    """One Gemma-style expert layer: attention over [prefix K, V; own K, V], then a GeGLU MLP."""

    def __init__(
        self, width: int, mlp_dim: int, heads: int, kv_heads: int, head_dim: int, adaptive: bool
    ) -> None:
        super().__init__()
        cond = width if adaptive else None
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        self.input_layernorm = ExpertRMSNorm(width, cond)
        self.q_proj = nn.Linear(width, heads * head_dim, bias=False)
        self.k_proj = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(width, kv_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(heads * head_dim, width, bias=False)
        self.post_attention_layernorm = ExpertRMSNorm(width, cond)
        self.gate_proj = nn.Linear(width, mlp_dim, bias=False)
        self.up_proj = nn.Linear(width, mlp_dim, bias=False)
        self.down_proj = nn.Linear(mlp_dim, width, bias=False)

    def forward(
        self,
        h: torch.Tensor,
        cond: torch.Tensor | None,
        prefix_kv: tuple[torch.Tensor, torch.Tensor],
        allowed: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        batch, n, _ = h.shape
        x, gate = self.input_layernorm(h, cond)
        q = rope(self.q_proj(x).view(batch, n, self.heads, -1).transpose(1, 2), cos, sin)
        k = rope(self.k_proj(x).view(batch, n, self.kv_heads, -1).transpose(1, 2), cos, sin)
        v = self.v_proj(x).view(batch, n, self.kv_heads, -1).transpose(1, 2)
        k = torch.cat([prefix_kv[0].to(k.dtype), k], dim=2)
        v = torch.cat([prefix_kv[1].to(v.dtype), v], dim=2)
        h = _gated(h, self.o_proj(attend(q, k, v, allowed, self.head_dim**-0.5)), gate)
        x, gate = self.post_attention_layernorm(h, cond)
        mlp = self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))
        return _gated(h, mlp, gate)


class ActionExpert(nn.Module):
    """Gemma-style decoder layers whose attention also reads the prefix's per-layer K, V."""

    def __init__(
        self,
        *,
        layers: int,
        width: int,
        mlp_dim: int,
        heads: int,
        kv_heads: int,
        head_dim: int,
        adaptive: bool,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleList(
            ExpertLayer(width, mlp_dim, heads, kv_heads, head_dim, adaptive) for _ in range(layers)
        )
        self.norm = ExpertRMSNorm(width, width if adaptive else None)
        for layer in self.layers:
            for name in ("q", "k", "v", "o", "gate", "up", "down"):
                nn.init.normal_(getattr(layer, f"{name}_proj").weight, std=0.02)  # as Gemma

    def forward(
        self,
        h: torch.Tensor,
        cond: torch.Tensor | None,
        prefix: KVCache,
        allowed: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
    ) -> torch.Tensor:
        for layer, kv in zip(self.layers, prefix, strict=True):
            h = layer(h, cond, kv, allowed, cos, sin)
        return self.norm(h, cond)[0]


@dataclass(frozen=True)
class PiConfig(PolicyConfig):
    """PiPolicy's config (see PiPolicy's docstring).

    `paligemma_path`: a local PaliGemma directory in the transformers format (a path is
    kept as its string). `load_base_weights=False` (a resume) builds PaliGemma from its
    config.json alone. `image_slots` maps Pi's image slots to the data's cameras (a camera,
    or a list: the first one an embodiment has). `max_token_len` None means openpi's: 200
    for pi0.5 (the state is in the prompt), 48 for pi0.
    """

    initial_weights: ClassVar[Mapping[str, Any]] = {"load_base_weights": False}

    paligemma_path: str | os.PathLike[str]
    variant: str = "pi05"
    load_base_weights: bool = True
    image_slots: Mapping[str, str | Sequence[str]] = field(
        default_factory=lambda: dict(DEFAULT_IMAGE_SLOTS)
    )
    max_token_len: int | None = None
    expert_width: int = 1024
    expert_mlp_dim: int = 4096
    sample_steps: int = 10
    state_bins: int = 256
    compile: bool = False

    def __post_init__(self) -> None:
        """ValueError naming the first field that cannot work."""
        super().__post_init__()
        one_of("variant", self.variant, VARIANTS)
        positive_integers(
            max_token_len=self.token_len,
            expert_width=self.expert_width,
            expert_mlp_dim=self.expert_mlp_dim,
            sample_steps=self.sample_steps,
            state_bins=self.state_bins,
        )
        if self.expert_width % 2:
            raise ValueError(
                f"expert_width: must be even (time embedding), got {self.expert_width}"
            )

    @property
    def token_len(self) -> int:
        """`max_token_len`, or openpi's for the variant when it is None."""
        if self.max_token_len is None:
            return DEFAULT_MAX_TOKEN_LEN.get(self.variant, 0)
        return self.max_token_len


@register_policy
class PiPolicy(nn.Module):
    """pi0 / pi0.5 over a local PaliGemma directory (see the module docstring).

    Built from a PiConfig and the embodiments. Parameters without gradient: the prompt's
    last language-model layer only matters through its keys and values (the prefix's
    output is never read), so that layer's q_proj, o_proj, post_attention_layernorm and
    mlp, and the language model's final norm, are FROZEN (requires_grad False;
    `self.unused_frozen` names them), as are PaliGemma's lm_head when it is not tied to the
    embeddings and SigLIP's pooling head when present. Gemma ties lm_head to embed_tokens,
    which the prompt uses, so with one embodiment every trainable parameter gets a gradient
    and DDP needs no find_unused_parameters. With several embodiments, a batch's embodiment
    alone uses its action (and pi0 state) projections. On CUDA with bf16, losses and
    sampling run under bf16 autocast; on CPU in float32. `compile` compiles the vision
    tower and the expert.
    """

    name: ClassVar[str] = "pi"
    config_type: ClassVar[type[PolicyConfig]] = PiConfig
    rotation_kinds: ClassVar[tuple[str, ...] | None] = ("rot6d",)  # openpi flows over rot6d
    local_weights: ClassVar[Mapping[str, LocalWeights]] = {
        "paligemma_path": LocalWeights(
            marker="config.json",
            name="PaliGemma",
            what="PaliGemma in the transformers format (config.json, weights, tokenizer)",
            example="/models/paligemma-3b-pt-224",
            source="a transformers-format PaliGemma, e.g. google/paligemma-3b-pt-224 "
            "downloaded once",
        )
    }
    specs: dict[str, EmbodimentSpec]
    _config: PiConfig

    def __init__(self, config: PiConfig, embodiments: Embodiments) -> None:
        check_config_type(type(self), config)
        super().__init__()
        self._config = config
        if not embodiments:
            raise ValueError("embodiments: PiPolicy needs at least one")
        path = config.paligemma_path
        check_paligemma_path(path, weights=config.load_base_weights)
        self.variant = config.variant
        self.pi05 = config.variant == "pi05"
        self.max_token_len = config.token_len
        self._warned_full = False
        self.sample_steps = config.sample_steps
        self.state_bins = config.state_bins
        self.specs = {name: EmbodimentSpec.of(spec) for name, spec in embodiments.items()}
        self._assign_image_slots(config.image_slots)
        self.tokenizer = load_tokenizer(path)
        self.paligemma = load_paligemma(path, load_base_weights=config.load_base_weights)
        self._build_rest(self.paligemma.config, config.expert_width, config.expert_mlp_dim)
        self.unused_frozen = freeze_unused(self.paligemma)
        vocabulary = self.paligemma.config.text_config.vocab_size
        if len(self.tokenizer) > vocabulary:
            raise ValueError(
                f"paligemma_path: tokenizer has {len(self.tokenizer)} tokens, more than the "
                f"model's vocabulary {vocabulary}"
            )
        if config.compile:
            self.paligemma.model.vision_tower.compile()
            self.expert.compile()

    @property
    def config(self) -> PiConfig:
        """The config this policy was built from."""
        return self._config

    def _assign_image_slots(self, slots: Mapping[str, str | Sequence[str]]) -> None:
        """Per embodiment, each slot's camera: the first it lists that the embodiment has."""
        self.image_slots = {
            slot: (cameras,) if isinstance(cameras, str) else tuple(cameras)
            for slot, cameras in slots.items()
        }
        self.slot_cameras = {
            name: {
                slot: next((c for c in cameras if c in spec.cameras), None)
                for slot, cameras in self.image_slots.items()
            }
            for name, spec in self.specs.items()
        }
        for name, spec in self.specs.items():
            missing = [c for c in spec.cameras if c not in self.slot_cameras[name].values()]
            if missing:
                raise ValueError(
                    f"image_slots: embodiment {name!r} has camera(s) {missing} that no slot "
                    f"takes; slots are {self.image_slots} (a slot takes the first camera it "
                    "lists that an embodiment has)"
                )

    def _build_rest(self, config: Any, width: int, mlp_dim: int) -> None:
        """The expert and the per-embodiment projections, sized from a PaliGemmaConfig."""
        text = config.text_config
        self.expert = ActionExpert(
            layers=text.num_hidden_layers,
            width=width,
            mlp_dim=mlp_dim,
            heads=text.num_attention_heads,
            kv_heads=text.num_key_value_heads,
            head_dim=text.head_dim,
            adaptive=self.pi05,
        )
        self.action_in = nn.ModuleDict(
            {n: nn.Linear(s.action_dim, width) for n, s in self.specs.items()}
        )
        self.action_out = nn.ModuleDict(
            {n: nn.Linear(width, s.action_dim) for n, s in self.specs.items()}
        )
        if self.pi05:
            self.time_mlp = nn.Sequential(
                nn.Linear(width, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU()
            )
        else:
            self.state_in = nn.ModuleDict(
                {n: nn.Linear(s.state_dim, width) for n, s in self.specs.items()}
            )
            self.action_time_mlp = nn.Sequential(
                nn.Linear(2 * width, width), nn.SiLU(), nn.Linear(width, width)
            )

    # ----- inputs -------------------------------------------------------------------------

    def _spec(self, embodiment: str) -> EmbodimentSpec:
        try:
            return self.specs[embodiment]
        except KeyError:
            raise KeyError(
                f"this policy was built for embodiments {sorted(self.specs)}, not {embodiment!r}"
            ) from None

    @property
    def _device(self) -> torch.device:
        norm = self.expert.norm
        return norm.weight.device if norm.dense is None else norm.dense.bias.device

    def _autocast(self) -> Any:
        device = self._device
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.autocast("cuda", dtype=torch.bfloat16)
        return nullcontext()

    def prompts(self, batch: Mapping[str, Any]) -> list[str]:
        """The text the prefix reads: openpi's format (pi0.5 writes the state into it)."""
        size = len(batch["state"])
        prompts = list(batch.get("prompt") or [""] * size)
        cleaned = [p.strip().replace("_", " ").replace("\n", " ") for p in prompts]
        if not self.pi05:
            return [f"{p}\n" for p in cleaned]
        state = batch["state"][:, -1].float().clamp(-1.0, 1.0)
        edges = torch.linspace(-1.0, 1.0, self.state_bins + 1, device=state.device)[:-1]
        bins = (torch.bucketize(state, edges, right=True) - 1).tolist()
        return [
            f"Task: {p}, State: {' '.join(map(str, b))};\nAction: "
            for p, b in zip(cleaned, bins, strict=True)
        ]

    def tokenize(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and their validity, (B, max_token_len) each, on the policy's device."""
        out = self.tokenizer(
            self.prompts(batch),
            padding="max_length",
            max_length=self.max_token_len,
            truncation=True,
            return_tensors="pt",
        )
        valid = out["attention_mask"].bool()
        if valid[:, -1].any() and not self._warned_full:
            self._warned_full = True
            warnings.warn(
                f"max_token_len: a prompt filled all {self.max_token_len} tokens and may have been"
                " cut (pi0.5 writes the state after the prompt); consider a larger max_token_len",
                stacklevel=2,
            )
        device = self._device
        return out["input_ids"].to(device), valid.to(device)

    def _pixels(self, images: torch.Tensor) -> torch.Tensor:
        size = self.paligemma.config.vision_config.image_size
        x = images.to(self._device).float()
        if tuple(x.shape[-2:]) != (size, size):
            x = F.interpolate(x, size=(size, size), mode="bilinear", antialias=True)
        return (x / 127.5 - 1.0).clamp(-1.0, 1.0)

    def embed_prefix(self, batch: Mapping[str, Any]) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix embeddings (B, P, D) and validity (B, P): image slots, then the prompt."""
        self._spec(batch["embodiment"])  # a clear error for an unknown embodiment
        language = self.paligemma.model.language_model
        ids, text_valid = self.tokenize(batch)
        text = language.embed_tokens(ids)
        size = ids.shape[0]
        vision = self.paligemma.config.vision_config
        per_image = (vision.image_size // vision.patch_size) ** 2
        slots = self.slot_cameras[batch["embodiment"]]
        present = [c for c in slots.values() if c is not None]
        features: dict[str, torch.Tensor] = {}
        if present:
            pixels = torch.cat([self._pixels(batch[f"images.{c}"]) for c in present])
            out = self.paligemma.model.get_image_features(pixel_values=pixels).pooler_output
            features = dict(zip(present, out.to(text.dtype).split(size), strict=True))
        embs, valid = [], []
        for camera in slots.values():
            if camera in features:
                embs.append(features[camera])
                valid.append(text_valid.new_ones(size, per_image))
            else:  # a masked slot: no token attends to it and it takes no position
                embs.append(text.new_zeros(size, per_image, text.shape[-1]))
                valid.append(text_valid.new_zeros(size, per_image))
        return torch.cat([*embs, text], 1), torch.cat([*valid, text_valid], 1)

    # ----- the two passes -----------------------------------------------------------------

    def encode_prefix(self, batch: Mapping[str, Any]) -> tuple[KVCache, torch.Tensor]:
        """Each language-model layer's prefix keys and values, and the prefix validity.

        The last layer's queries, output and MLP are not computed: nothing reads them.
        """
        embs, valid = self.embed_prefix(batch)
        language = self.paligemma.model.language_model
        size, length, _ = embs.shape
        positions = (valid.long().cumsum(1) - 1).clamp_min(0)
        cos, sin = language.rotary_emb(embs.float(), positions)
        eye = torch.eye(length, dtype=torch.bool, device=embs.device)
        allowed = ((valid[:, None, :] & valid[:, :, None]) | eye)[:, None]
        cache: KVCache = []
        h = embs
        last = len(language.layers) - 1
        for i, layer in enumerate(language.layers):
            attn = layer.self_attn
            x = layer.input_layernorm(h)
            k = attn.k_proj(x).view(size, length, -1, attn.head_dim).transpose(1, 2)
            v = attn.v_proj(x).view(size, length, -1, attn.head_dim).transpose(1, 2)
            k = rope(k, cos, sin)
            cache.append((k, v))
            if i == last:
                break
            q = rope(attn.q_proj(x).view(size, length, -1, attn.head_dim).transpose(1, 2), cos, sin)
            h = h + attn.o_proj(attend(q, k, v, allowed, attn.scaling))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return cache, valid

    def velocity(
        self,
        batch: Mapping[str, Any],
        noisy: torch.Tensor,
        t: torch.Tensor,
        prefix: KVCache,
        prefix_valid: torch.Tensor,
        padded: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The expert's velocity (B, T, A) for noisy actions at times t (B,), given the prefix.

        `padded` (B, T) hides padded steps from the other tokens (a padded step's input then
        reaches only its own output, which the loss masks out).
        """
        embodiment = batch["embodiment"]
        self._spec(embodiment)
        size, steps, _ = noisy.shape
        width = self.config.expert_width  # that of action_in's outputs
        time = time_embedding(t, width)
        tokens = self.action_in[embodiment](noisy)
        if self.pi05:
            cond = self.time_mlp(time)
        else:
            cond = None
            mixed = torch.cat([tokens, time[:, None].expand(-1, steps, -1).to(tokens.dtype)], -1)
            tokens = self.action_time_mlp(mixed)
            state = self.state_in[embodiment](batch["state"][:, -1].to(noisy.dtype))
            tokens = torch.cat([state[:, None].to(tokens.dtype), tokens], 1)
        length = tokens.shape[1]
        offset = length - steps  # 1 with pi0's state token
        device = tokens.device
        own = torch.ones(length, length, dtype=torch.bool, device=device)
        if offset:
            own[:offset, offset:] = False  # the state token does not see the actions
        own = own.expand(size, -1, -1)
        if padded is not None:
            hidden = F.pad(padded.to(device), (offset, 0), value=False)
            eye = torch.eye(length, dtype=torch.bool, device=device)
            own = own & (~hidden[:, None, :] | eye)
        seen = prefix_valid[:, None, :].expand(-1, length, -1)
        allowed = torch.cat([seen, own], 2)[:, None]
        positions = prefix_valid.sum(1, keepdim=True) + torch.arange(length, device=device)
        cos, sin = self.paligemma.model.language_model.rotary_emb(tokens.float(), positions)
        hidden_out = self.expert(tokens, cond, prefix, allowed, cos, sin)
        return self.action_out[embodiment](hidden_out[:, offset:])

    # ----- the policy API -----------------------------------------------------------------

    def compute_loss(self, batch: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """Flow-matching loss of a normalised batch (mean over valid steps)."""
        spec = self._spec(batch["embodiment"])
        spec.check_batch(batch, batch["embodiment"], actions=True)
        actions = batch["actions"].to(self._device).float()
        mask = batch["action_mask"].to(actions.device).bool()
        t = flow_matching.sample_time(actions.shape[0], actions.device)
        noisy, target = flow_matching.noised(actions, t)
        with self._autocast():
            prefix, valid = self.encode_prefix(batch)
            velocity = self.velocity(batch, noisy, t, prefix, valid, padded=~mask)
        loss = flow_matching.flow_loss(velocity.float(), target, mask)
        return {"loss": loss, "flow_loss": loss.detach()}

    def _noise(
        self, batch: Mapping[str, Any], generator: torch.Generator | None, noise: Any
    ) -> torch.Tensor:
        spec = self._spec(batch["embodiment"])
        shape = (len(batch["state"]), spec.horizon, spec.action_dim)
        noise = chunk_noise(shape, generator, noise, self._device)
        return noise.to(self._device).float()

    @torch.no_grad()
    def sample_actions(
        self,
        batch: Mapping[str, Any],
        generator: torch.Generator | None = None,
        noise: torch.Tensor | None = None,
        prefix: ActionPrefix | None = None,
    ) -> torch.Tensor:
        """Normalised action chunks (B, T, A): the prompt once, then `sample_steps` Euler steps.

        With `prefix`, each chunk continues it (real-time chunking).
        """
        self._spec(batch["embodiment"]).check_batch(batch, batch["embodiment"], actions=False)
        x = self._noise(batch, generator, noise)
        if prefix is not None:
            prefix.check(tuple(x.shape))
        with self._autocast():
            cache, valid = self.encode_prefix(batch)

            def velocity(x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
                return self.velocity(batch, x, t, cache, valid).float()

            return flow_matching.euler_sample(velocity, x, self.sample_steps, prefix)

    def can_inpaint(self, embodiment: str) -> bool:
        """True: the action expert flows, so `sample_actions` takes a prefix."""
        self._spec(embodiment)
        return True

    def param_groups(self, lr: float, backbone_lr: float) -> list[dict[str, Any]]:
        """PaliGemma at `backbone_lr`, the expert and projections at `lr`; frozen ones left out."""
        trainable = [(n, p) for n, p in self.named_parameters() if p.requires_grad]
        backbone = [p for n, p in trainable if n.startswith("paligemma.")]
        rest = [p for n, p in trainable if not n.startswith("paligemma.")]
        return [
            {"name": "backbone", "params": backbone, "lr": backbone_lr},
            {"name": "policy", "params": rest, "lr": lr},
        ]


def freeze_unused(paligemma: Any) -> list[str]:
    """Freeze what Pi never reads (see PiPolicy's docstring); their parameter names."""
    language = paligemma.model.language_model
    last = language.layers[-1]
    modules = {
        "model.language_model.norm": language.norm,
        "model.language_model.layers.-1.self_attn.q_proj": last.self_attn.q_proj,
        "model.language_model.layers.-1.self_attn.o_proj": last.self_attn.o_proj,
        "model.language_model.layers.-1.post_attention_layernorm": last.post_attention_layernorm,
        "model.language_model.layers.-1.mlp": last.mlp,
    }
    tower = paligemma.model.vision_tower
    head = getattr(getattr(tower, "vision_model", tower), "head", None)
    if head is not None:
        modules["vision head"] = head
    if paligemma.lm_head.weight is not language.embed_tokens.weight:
        modules["lm_head"] = paligemma.lm_head
    frozen_ids = set()
    for module in modules.values():
        for p in module.parameters():
            p.requires_grad_(False)
            frozen_ids.add(id(p))
    return [f"paligemma.{n}" for n, p in paligemma.named_parameters() if id(p) in frozen_ids]


def pi_parameter_count(
    paligemma_config: Any,
    *,
    expert_width: int = 1024,
    expert_mlp_dim: int = 4096,
    variant: str = "pi05",
    embodiments: Mapping[str, EmbodimentSpec | Mapping[str, Any]] | None = None,
) -> dict[str, int]:
    """Parameter counts of a Pi built on the meta device (no memory, no weights).

    `paligemma_config`: a PaliGemmaConfig or its dict (e.g. `paligemma_3b_config()`).
    Returns {"paligemma", "expert" (with projections and time MLPs), "total", "trainable"}.
    """
    from transformers import PaliGemmaConfig

    if isinstance(paligemma_config, Mapping):
        paligemma_config = PaliGemmaConfig(**paligemma_config)
    if variant not in VARIANTS:
        raise ValueError(f"variant: {variant!r} is not one of {list(VARIANTS)}")
    specs = embodiments or {
        "robot": EmbodimentSpec(state_dim=32, action_dim=32, history=1, horizon=50)
    }
    with torch.device("meta"):
        shell = nn.Module()
        shell.pi05 = variant == "pi05"  # type: ignore[assignment]
        shell.specs = {n: EmbodimentSpec.of(s) for n, s in specs.items()}  # type: ignore[assignment]
        shell.paligemma = build_paligemma(paligemma_config)
        PiPolicy._build_rest(shell, paligemma_config, expert_width, expert_mlp_dim)  # type: ignore[arg-type]
        freeze_unused(shell.paligemma)
    paligemma = sum(p.numel() for p in shell.paligemma.parameters())
    total = sum(p.numel() for p in shell.parameters())
    trainable = sum(p.numel() for p in shell.parameters() if p.requires_grad)
    return {
        "paligemma": paligemma,
        "expert": total - paligemma,
        "total": total,
        "trainable": trainable,
    }
