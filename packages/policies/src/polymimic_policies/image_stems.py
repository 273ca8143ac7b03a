"""Image stems: uint8 images to a fixed number of tokens through a torchvision ResNet."""

from __future__ import annotations

import torch
from torch import nn

_IMAGENET_MEAN = (0.485, 0.456, 0.406)
_IMAGENET_STD = (0.229, 0.224, 0.225)


def build_resnet_trunk(blocks_per_stage: tuple[int, ...]) -> tuple[nn.Module, int]:
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


class ResNetImageStem(nn.Module):
    """uint8 (B, 3, H, W) -> (B, num_tokens, d_model): ResNet features pooled by attention."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(
        self, *, d_model: int, num_tokens: int, blocks_per_stage: tuple[int, ...], num_heads: int
    ) -> None:
        super().__init__()
        self.backbone, channels = build_resnet_trunk(blocks_per_stage)
        # Channels-last end to end: oneDNN's convolutions are faster so on CPUs and GPUs
        # alike, loaders already hand over HWC memory, and the weights' gradients come out
        # in the weights' own layout (as DDP's buckets expect).
        self.backbone.to(memory_format=torch.channels_last)
        self.project = nn.Linear(channels, d_model)
        self.queries = nn.Parameter(torch.randn(1, num_tokens, d_model) * 0.02)
        self.pool = nn.MultiheadAttention(d_model, num_heads, batch_first=True)
        self.register_buffer(
            "mean", torch.tensor(_IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False
        )
        self.register_buffer("std", torch.tensor(_IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        if images.dtype != torch.uint8:
            raise TypeError(f"image stems take uint8 images, got {images.dtype}")
        x = images.contiguous(memory_format=torch.channels_last).float()
        x = (x / 255.0 - self.mean) / self.std
        features = self.backbone(x.to(self.project.weight.dtype))
        tokens = self.project(features.flatten(2).transpose(1, 2))
        queries = self.queries.expand(images.shape[0], -1, -1)
        pooled, _ = self.pool(queries, tokens, tokens, need_weights=False)
        return pooled
