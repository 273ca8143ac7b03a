"""DataLoaders with settings that serve throughput by default, and that resume exactly.

Persistent workers, a deep prefetch, pinned memory where a GPU exists, and a worker
allocator that reuses memory: decoded frames are large (a 480x640 RGB frame is 0.9 MB),
and glibc serves each from fresh mmap'd pages by default, so every frame pays page faults
and zeroing. Raising the mmap threshold in workers keeps those pages in the heap.

The loader is torchdata's StatefulDataLoader: its `state_dict()` says which samples were
handed out (not merely prefetched), and Lightning saves it in every checkpoint, so a
resumed run continues with the very next sample of the same shuffled order.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import warnings
from typing import Any

import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from polymimic_data.dataset import collate_samples

# torchdata 0.11 calls an API torch has deprecated, once per iterator: noise, not news.
warnings.filterwarnings("ignore", message="'set_vital' is deprecated", category=UserWarning)

_M_TRIM_THRESHOLD = -1
_M_MMAP_THRESHOLD = -3
_HEAP_BYTES = 1 << 30


def tune_worker_allocator(worker_id: int = 0) -> bool:
    """Keep large, short-lived buffers in the heap (glibc only); True when applied."""
    if not sys.platform.startswith("linux"):
        return False
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name)
    if not hasattr(libc, "mallopt"):
        return False
    return bool(libc.mallopt(_M_MMAP_THRESHOLD, _HEAP_BYTES)) and bool(
        libc.mallopt(_M_TRIM_THRESHOLD, 2 * _HEAP_BYTES)
    )


def make_dataloader(
    dataset: Dataset[Any],
    *,
    batch_size: int,
    shuffle: bool,
    num_workers: int = 2,
    prefetch_factor: int = 4,
    pin_memory: bool | None = None,
    drop_last: bool | None = None,
    seed: int = 0,
) -> StatefulDataLoader:
    """A DataLoader of batches in the contract of DESIGN.md (see collate_samples).

    Its own generator, seeded by `seed`, draws the shuffled order (and the workers' base
    seed), so iterating never consumes the global random state.
    """
    generator = torch.Generator().manual_seed(seed)
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=shuffle,
        drop_last=shuffle if drop_last is None else drop_last,
        num_workers=num_workers,
        collate_fn=collate_samples,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        worker_init_fn=tune_worker_allocator if num_workers > 0 else None,
        generator=generator,
    )
