"""Samples of one embodiment stacked into a batch of the contract in DESIGN.md."""

from __future__ import annotations

import math
import weakref
from typing import Any

import torch
from torch.utils.data import default_collate, get_worker_info

Sample = dict[str, Any]


# what batch_buffer made, by id (a tensor's == is elementwise, so no WeakSet)
_BUFFERS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()


def batch_buffer(shape: tuple[int, ...]) -> torch.Tensor:
    """A uint8 buffer for a batch's images of one camera, (B, H, W, 3).

    In shared memory inside a loader worker (the batch crosses to the training process in
    it, as default_collate's stack would), private memory otherwise. It starts 16 bytes past
    a 32-byte boundary: libjpeg-turbo writes a row that starts on one with non-temporal
    stores (jpeg_decode._off_boundary), and a fresh buffer starts on a page, so every slot
    and row of a frame whose rows are a multiple of 32 bytes (128x160, 480x640) would
    (bench-data: a 128x160 frame took 1.31x as long to decode there).
    """
    nbytes = math.prod(shape) + 32
    if get_worker_info() is None:
        storage = torch.empty(nbytes, dtype=torch.uint8).untyped_storage()
    else:  # shared, as default_collate makes its own
        storage = torch.UntypedStorage._new_shared(nbytes)
    offset = (16 - storage.data_ptr()) % 32
    strides = torch.empty(shape, dtype=torch.uint8, device="meta").stride()
    # a tensor of the storage itself (not a view), so that collation can recognise it
    buffer = torch.empty(0, dtype=torch.uint8).set_(storage, offset, shape, strides)
    _BUFFERS[id(buffer)] = buffer
    return buffer


def _one_buffer(images: list[torch.Tensor]) -> torch.Tensor | None:
    """The (B, H, W, 3) buffer whose slots, in order, the (3, H, W) `images` are views of.

    EpisodeDataset.__getitems__ decodes a batch into one (batch_buffer's, and only those:
    no other tensor is handed out as a batch); None where they are not.
    """
    base = images[0]._base
    if base is None or _BUFFERS.get(id(base)) is not base or base.shape[0] != len(images):
        return None
    slot = base[0].permute(2, 0, 1)
    for i, image in enumerate(images):
        if (
            image._base is not base
            or image.data_ptr() != base.data_ptr() + i * base.stride(0)
            or image.shape != slot.shape
            or image.stride() != slot.stride()
        ):
            return None
    return base


def collate_samples(samples: list[Sample]) -> dict[str, Any]:
    """Stack samples of one embodiment into a batch of the contract in DESIGN.md.

    `data_faults` has one entry per sample that was replaced: the faults met replacing it.
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    embodiments = {s["embodiment"] for s in samples}
    if len(embodiments) != 1:
        raise ValueError(f"a batch holds one embodiment, got {sorted(embodiments)}")
    batch: dict[str, Any] = {"embodiment": samples[0]["embodiment"]}
    for key, value in samples[0].items():
        if key in ("embodiment", "faults"):
            continue
        if key.startswith("images."):
            # Decoded images are (3, H, W) views of HWC memory: stack them as HWC (a plain
            # copy, into shared memory inside a worker) and hand out the channels-last view;
            # images decoded into one buffer already (a batch read at once) are not copied.
            images = [s[key] for s in samples]
            hwc = _one_buffer(images)
            if hwc is None:
                hwc = default_collate([image.permute(1, 2, 0) for image in images])
            batch[key] = hwc.permute(0, 3, 1, 2)
        elif isinstance(value, torch.Tensor):
            batch[key] = default_collate([s[key] for s in samples])
        elif key == "frame":
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.long)
        else:
            batch[key] = [s[key] for s in samples]
    batch["data_faults"] = [s["faults"] for s in samples if s.get("faults")]
    return batch
