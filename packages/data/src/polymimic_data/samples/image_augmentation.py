"""Image augmentation on the device, batched: one operation, different parameters per sample.

Training mode only; in eval mode images pass through untouched.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

_GREY = torch.tensor([0.299, 0.587, 0.114])


class ImageAugmentation(nn.Module):
    """Random resized crop (same output size) and colour jitter, per sample, vectorised.

    Takes and returns uint8 (B, 3, H, W), so the policy's stems see what they always see.
    """

    def __init__(
        self,
        *,
        crop_scale: tuple[float, float] = (0.8, 1.0),
        brightness: float = 0.2,
        contrast: float = 0.2,
        saturation: float = 0.2,
    ) -> None:
        super().__init__()
        if not 0 < crop_scale[0] <= crop_scale[1] <= 1:
            raise ValueError(f"crop_scale must satisfy 0 < min <= max <= 1, got {crop_scale}")
        self.crop_scale = (float(crop_scale[0]), float(crop_scale[1]))
        self.brightness, self.contrast, self.saturation = brightness, contrast, saturation

    def _uniform(
        self, n: int, low: float, high: float, like: torch.Tensor, g: torch.Generator | None
    ) -> torch.Tensor:
        return (
            torch.rand(n, generator=g, device=g.device if g is not None else like.device).to(
                like.device
            )
            * (high - low)
            + low
        )

    def forward(
        self, images: torch.Tensor, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        if not self.training:
            return images
        if images.dtype != torch.uint8 or images.ndim != 4:
            raise TypeError(
                f"augmentation takes uint8 (B, 3, H, W), got {images.dtype} {tuple(images.shape)}"
            )
        b = images.shape[0]
        x = images.float() / 255.0
        # Random resized crop: a per-sample affine grid (side = sqrt(area scale)).
        side = self._uniform(b, *self.crop_scale, x, generator).sqrt()
        shift = (1 - side) * (self._uniform(2 * b, -1.0, 1.0, x, generator).view(2, b))
        theta = torch.zeros(b, 2, 3, device=x.device)
        theta[:, 0, 0], theta[:, 1, 1] = side, side
        theta[:, 0, 2], theta[:, 1, 2] = shift[0], shift[1]
        grid = F.affine_grid(theta, list(x.shape), align_corners=False)
        x = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)

        # Colour jitter, fused: brightness b, then contrast c about the mean grey m, then
        # saturation s about each pixel's grey g is   b*c*s*x + b*c*(1-s)*g + b*(1-c)*m.
        def factor(strength: float) -> torch.Tensor:
            return self._uniform(b, 1 - strength, 1 + strength, x, generator).view(b, 1, 1, 1)

        bright, contrast, sat = (
            factor(self.brightness),
            factor(self.contrast),
            factor(self.saturation),
        )
        grey = torch.einsum("bchw,c->bhw", x, _GREY.to(x.device)).unsqueeze(1)
        mean = grey.mean((2, 3), keepdim=True)
        x = x.mul_(bright * contrast * sat)
        x = x.addcmul_(grey, bright * contrast * (1 - sat)).add_(bright * (1 - contrast) * mean)
        return x.clamp_(0, 1).mul_(255).round_().to(torch.uint8)
