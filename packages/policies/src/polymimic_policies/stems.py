"""Stems: one modality of one embodiment (or of several, when shared) to latent tokens.

Every stem ends in a LatentPool, so each yields a fixed number of tokens whatever its
input's size: images through a ResNet or a small ViT, the proprio history as one token
per step with a learned time embedding, the prompt as UTF-8 bytes (tokenizer-free: no
vocabulary to download, any language, and an empty prompt is a valid input).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from polymimic_policies.transformer_blocks import LatentPool, SelfAttentionBlock

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


class StateStem(nn.Module):
    """(B, K, S) proprio history -> (B, num_tokens, D)."""

    def __init__(
        self, state_dim: int, history: int, d_model: int, num_tokens: int, num_heads: int
    ) -> None:
        super().__init__()
        self.project = nn.Sequential(
            nn.Linear(state_dim, d_model), nn.GELU(), nn.Linear(d_model, d_model)
        )
        self.time_embedding = nn.Parameter(torch.randn(1, history, d_model) * 0.02)
        self.pool = LatentPool(d_model, num_tokens, num_heads)

    def forward(self, state: torch.Tensor) -> torch.Tensor:
        return self.pool(self.project(state) + self.time_embedding)


def build_resnet(blocks_per_stage: Sequence[int]) -> tuple[nn.Module, int]:
    """A torchvision ResNet without its pooling and classifier; returns (module, channels).

    (2, 2, 2, 2) is ResNet-18; (1, 1, 1, 1) a lighter ResNet-10 for CPU runs.
    """
    # Imported here: torchvision.models takes seconds to import (it loads every model
    # family), and a policy whose config is wrong should say so before paying for it.
    from torchvision.models.resnet import BasicBlock, ResNet

    net = ResNet(BasicBlock, list(blocks_per_stage))
    body = nn.Sequential(
        net.conv1, net.bn1, net.relu, net.maxpool, net.layer1, net.layer2, net.layer3, net.layer4
    )
    return body, 512


def _sincos_2d(height: int, width: int, dim: int, device: torch.device) -> torch.Tensor:
    """(height * width, dim) fixed 2-D sin/cos positions: any image size, no table to grow."""
    quarter = dim // 4
    freqs = torch.exp(-math.log(10_000.0) * torch.arange(quarter, device=device) / quarter)
    ys = torch.arange(height, device=device, dtype=torch.float32)[:, None] * freqs
    xs = torch.arange(width, device=device, dtype=torch.float32)[:, None] * freqs
    grid = torch.cat(
        [
            ys.sin()[:, None].expand(-1, width, -1),
            ys.cos()[:, None].expand(-1, width, -1),
            xs.sin()[None].expand(height, -1, -1),
            xs.cos()[None].expand(height, -1, -1),
        ],
        dim=-1,
    ).reshape(height * width, 4 * quarter)
    return nn.functional.pad(grid, (0, dim - 4 * quarter))


def placed(tokens: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """(B, height * width, D) tokens of a (height, width) map, row by row, plus their place."""
    return tokens + _sincos_2d(height, width, tokens.shape[-1], tokens.device).to(tokens)


class SmallViT(nn.Module):
    """Patches -> tokens through a few pre-norm blocks; (B, 3, H, W) -> (B, N, width)."""

    def __init__(self, width: int, layers: int, num_heads: int, patch_size: int) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, width, patch_size, stride=patch_size)
        self.blocks = nn.ModuleList(SelfAttentionBlock(width, num_heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        patches = self.patchify(x)
        height, width = patches.shape[-2:]
        tokens = patches.flatten(2).transpose(1, 2)
        tokens = placed(tokens, height, width)
        for block in self.blocks:
            tokens = block(tokens)
        return self.norm(tokens).transpose(1, 2).reshape(x.shape[0], -1, height, width)


class ImageStem(nn.Module):
    """uint8 (B, 3, H, W) -> (B, num_tokens, D): backbone features pooled by attention.

    `freeze_backbone` keeps the backbone's weights and its batch-norm statistics fixed:
    no gradient, and eval mode even while the rest of the policy trains.

    `image_positions` adds fixed 2-D sin/cos positions to a ResNet's feature tokens (the ViT
    adds its own). The pool that follows is attention over a set: without them it tells
    where a feature is only as far as the backbone's padding leaks it, and a task judged
    by centimetres (MetaWorld's reach) is a task of where.
    """

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self,
        *,
        d_model: int,
        num_tokens: int,
        num_heads: int,
        backbone: str = "resnet",
        resnet_blocks: Sequence[int] = (2, 2, 2, 2),
        vit_layers: int = 4,
        vit_patch_size: int = 8,
        freeze_backbone: bool = False,
        image_positions: bool = False,
    ) -> None:
        super().__init__()
        self.image_positions = image_positions and backbone == "resnet"
        if backbone == "resnet":
            self.backbone, channels = build_resnet(resnet_blocks)
            # Channels-last end to end: oneDNN's convolutions are faster so on CPUs and
            # GPUs alike, loaders already hand over HWC memory, and the weights' gradients
            # come out in the weights' own layout (as DDP's buckets expect).
            self.backbone.to(memory_format=torch.channels_last)
        elif backbone == "vit":
            self.backbone, channels = (
                SmallViT(d_model, vit_layers, num_heads, vit_patch_size),
                d_model,
            )
        else:
            raise ValueError(f"image_backbone: {backbone!r} is not one of ['resnet', 'vit']")
        self.freeze_backbone = freeze_backbone
        if freeze_backbone:
            self.backbone.requires_grad_(False)
            self.backbone.eval()
        self.project = nn.Linear(channels, d_model)
        self.pool = LatentPool(d_model, num_tokens, num_heads)
        self.register_buffer(
            "mean", torch.tensor(_IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False
        )
        self.register_buffer("std", torch.tensor(_IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> ImageStem:
        super().train(mode)
        if self.freeze_backbone:
            self.backbone.eval()  # its batch-norm statistics never move
        return self

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8:
            raise TypeError(f"image stems take uint8 images, got {images.dtype}")
        x = images.contiguous(memory_format=torch.channels_last).float()
        x = (x / 255.0 - self.mean) / self.std
        features = self.backbone(x.to(self.project.weight.dtype))
        return self.pool(self.tokens(features))

    def tokens(self, features: torch.Tensor) -> torch.Tensor:
        """(B, C, h, w) backbone features -> (B, h * w, D) tokens for the pool, placed."""
        tokens = self.project(features.flatten(2).transpose(1, 2))
        if self.image_positions:
            height, width = features.shape[-2:]
            tokens = placed(tokens, height, width)
        return tokens


class TextStem(nn.Module):
    """A batch's prompts (list of str) -> (B, num_tokens, D), from their UTF-8 bytes.

    Each prompt is a start token and up to `max_bytes` bytes; padding is masked out of
    every attention, so a prompt's tokens do not depend on the other prompts in its batch.
    """

    START = 256

    def __init__(
        self, d_model: int, num_tokens: int, num_heads: int, layers: int = 2, max_bytes: int = 128
    ) -> None:
        super().__init__()
        self.max_bytes = max_bytes
        self.embedding = nn.Embedding(257, d_model)
        self.position = nn.Parameter(torch.randn(1, max_bytes + 1, d_model) * 0.02)
        self.blocks = nn.ModuleList(SelfAttentionBlock(d_model, num_heads) for _ in range(layers))
        self.pool = LatentPool(d_model, num_tokens, num_heads)

    def encode(self, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
        """Byte ids (B, L) and padding mask (B, L), L the longest prompt in the batch + 1."""
        encoded = [[self.START, *p.encode()[: self.max_bytes]] for p in prompts]
        length = max(len(e) for e in encoded)
        device = self.embedding.weight.device
        ids = torch.zeros(len(encoded), length, dtype=torch.long)
        padding = torch.ones(len(encoded), length, dtype=torch.bool)
        for row, values in enumerate(encoded):
            ids[row, : len(values)] = torch.tensor(values)
            padding[row, : len(values)] = False
        return ids.to(device), padding.to(device)

    def forward(self, prompts: Sequence[str]) -> torch.Tensor:
        ids, padding = self.encode(prompts)
        tokens = self.embedding(ids) + self.position[:, : ids.shape[1]]
        for block in self.blocks:
            tokens = block(tokens, padding)
        return self.pool(tokens, padding)
