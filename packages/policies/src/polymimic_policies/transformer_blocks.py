"""Pre-norm transformer blocks: self-attention with drop-path, and latent cross-attention.

The trunk, the small ViT and the text stem are stacks of SelfAttentionBlock; every stem
ends in a LatentPool, which maps any number of input tokens (with a padding mask) to a
fixed number of latent tokens by cross-attention.
"""

from __future__ import annotations

import torch
from torch import nn


class DropPath(nn.Module):
    """Stochastic depth: drop a residual branch for whole samples, in training only."""

    def __init__(self, p: float) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"drop_path: must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training or self.p == 0.0:
            return x
        keep = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), device=x.device) >= self.p
        return x * keep.to(x.dtype) / (1.0 - self.p)


def _mlp(d_model: int, mlp_ratio: float) -> nn.Sequential:
    hidden = int(d_model * mlp_ratio)
    return nn.Sequential(nn.Linear(d_model, hidden), nn.GELU(), nn.Linear(hidden, d_model))


class SelfAttentionBlock(nn.Module):
    """x + attn(norm(x)), then x + mlp(norm(x)); keys flagged in `padding` are ignored."""

    def __init__(
        self, d_model: int, num_heads: int, mlp_ratio: float = 4.0, drop_path: float = 0.0
    ) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(d_model)
        self.mlp = _mlp(d_model, mlp_ratio)
        self.drop_path = DropPath(drop_path)

    def forward(self, x: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        h = self.norm1(x)
        attended, _ = self.attn(h, h, h, key_padding_mask=padding, need_weights=False)
        x = x + self.drop_path(attended)
        return x + self.drop_path(self.mlp(self.norm2(x)))


class LatentPool(nn.Module):
    """(B, N, D) tokens, with an optional (B, N) padding mask -> (B, num_tokens, D).

    Learned queries cross-attend to the tokens; padded tokens get no attention, so the
    result does not depend on how much padding a batch carries.
    """

    def __init__(self, d_model: int, num_tokens: int, num_heads: int, mlp_ratio: float = 4.0):
        super().__init__()
        if num_tokens < 1:
            raise ValueError(f"tokens: a stem needs at least one latent token, got {num_tokens}")
        self.queries = nn.Parameter(torch.randn(1, num_tokens, d_model) * 0.02)
        self.norm_inputs = nn.LayerNorm(d_model)
        self.attn = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.norm_out = nn.LayerNorm(d_model)
        self.mlp = _mlp(d_model, mlp_ratio)

    def forward(self, tokens: torch.Tensor, padding: torch.Tensor | None = None) -> torch.Tensor:
        queries = self.queries.expand(tokens.shape[0], -1, -1)
        inputs = self.norm_inputs(tokens)
        pooled, _ = self.attn(queries, inputs, inputs, key_padding_mask=padding, need_weights=False)
        pooled = queries + pooled
        return pooled + self.mlp(self.norm_out(pooled))


class Trunk(nn.Module):
    """The shared transformer: `layers` pre-norm blocks with linearly rising drop-path."""

    def __init__(
        self,
        d_model: int,
        layers: int,
        num_heads: int,
        mlp_ratio: float = 4.0,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        rates = [drop_path * i / max(layers - 1, 1) for i in range(layers)]
        self.blocks = nn.ModuleList(
            SelfAttentionBlock(d_model, num_heads, mlp_ratio, rate) for rate in rates
        )
        self.norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.norm(x)
