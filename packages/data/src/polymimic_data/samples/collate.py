"""Samples of one embodiment stacked into a batch of the contract in DESIGN.md."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import default_collate

from polymimic_data.samples.batch_buffers import hand_out, one_buffer

Sample = dict[str, Any]


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
            # images decoded into one buffer already (a batch read at once) are not copied,
            # and a worker's pooled buffer is named for the training process to return.
            images = [s[key] for s in samples]
            hwc = one_buffer(images)
            if hwc is None:
                hwc = default_collate([image.permute(1, 2, 0) for image in images])
            else:
                hand_out(hwc, key, batch)
            batch[key] = hwc.permute(0, 3, 1, 2)
        elif isinstance(value, torch.Tensor):
            batch[key] = default_collate([s[key] for s in samples])
        elif key == "frame":
            batch[key] = torch.tensor([s[key] for s in samples], dtype=torch.long)
        else:
            batch[key] = [s[key] for s in samples]
    batch["data_faults"] = [s["faults"] for s in samples if s.get("faults")]
    return batch
