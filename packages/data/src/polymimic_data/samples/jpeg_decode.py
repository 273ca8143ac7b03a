"""JPEG decoding straight to the model's resolution, as uint8 (3, H, W)."""

from __future__ import annotations

import numpy as np
import simplejpeg
import torch
import torch.nn.functional as F


def decode_jpeg(data: bytes, size: tuple[int, int] | None = None) -> torch.Tensor:
    """Decode one JPEG to a uint8 (3, H, W) tensor.

    With `size` (H, W) smaller than the image, libjpeg-turbo scales in the DCT domain
    to the smallest power-of-two reduction that is still at least `size`, and only the
    remainder (if any) is resized. The full-size image is never materialised.
    """
    if size is None:
        image = simplejpeg.decode_jpeg(data, colorspace="RGB")
    else:
        height, width = size
        image = simplejpeg.decode_jpeg(
            data, colorspace="RGB", fastdct=True, min_height=height, min_width=width
        )
    tensor = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
    if size is not None and tuple(tensor.shape[1:]) != tuple(size):
        resized = F.interpolate(
            tensor[None].float(), size=size, mode="bilinear", antialias=True, align_corners=False
        )
        tensor = resized[0].round().clamp_(0, 255).to(torch.uint8)
    return tensor  # a (3, H, W) view of HWC memory: collation's stack makes the one copy
