"""JPEG decoding straight to the model's resolution, as uint8 (3, H, W)."""

from __future__ import annotations

import numpy as np
import simplejpeg
import torch

from polymimic_data.samples.image_resize import resize_uint8


def _off_boundary(nbytes: int) -> np.ndarray:
    """`nbytes` of fresh memory that start 16 bytes past a 32-byte boundary.

    libjpeg-turbo's SIMD colour conversion writes an output row that starts on a 32-byte
    boundary with non-temporal stores, which go around the cache to memory: a 128x160
    frame then takes about 1.8x as long to decode, and collation reads it right back.
    Whether a buffer of numpy's own starts on such a boundary is the allocator's chance.
    """
    raw = np.empty(nbytes + 32, dtype=np.uint8)
    start = (16 - raw.ctypes.data) % 32
    return raw[start : start + nbytes]


def _decode_rgb(data: bytes, height: int = 0, width: int = 0, fastdct: bool = False) -> np.ndarray:
    """An RGB decode by simplejpeg, into a buffer off the 32-byte boundary (see above)."""
    try:
        out_height, out_width, _, _ = simplejpeg.decode_jpeg_header(
            data, min_height=height, min_width=width
        )
        buffer = _off_boundary(int(out_height) * int(out_width) * 3)
        return simplejpeg.decode_jpeg(
            data,
            colorspace="RGB",
            fastdct=fastdct,
            min_height=height,
            min_width=width,
            buffer=buffer,
        )
    except Exception:  # a bad JPEG: decoded again, to raise what simplejpeg raises for it
        return simplejpeg.decode_jpeg(
            data, colorspace="RGB", fastdct=fastdct, min_height=height, min_width=width
        )


def decode_jpeg(data: bytes, size: tuple[int, int] | None = None) -> torch.Tensor:
    """Decode one JPEG to a uint8 (3, H, W) tensor.

    With `size` (H, W) smaller than the image, libjpeg-turbo scales in the DCT domain
    to the smallest power-of-two reduction that is still at least `size`, and only the
    remainder (if any) is resized. The full-size image is never materialised.
    """
    if size is None:
        image = _decode_rgb(data)
    else:
        height, width = size
        image = _decode_rgb(data, height, width, fastdct=True)
    # The CHW view made in numpy: the same tensor as torch's permute, at half the cost.
    tensor = torch.from_numpy(np.ascontiguousarray(image).transpose(2, 0, 1))
    if size is not None and tuple(tensor.shape[1:]) != tuple(size):
        tensor = resize_uint8(tensor, size)
    return tensor  # a (3, H, W) view of HWC memory: collation's stack makes the one copy
