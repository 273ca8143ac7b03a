"""DataLoaders with settings that serve throughput by default, and that resume exactly.

Persistent workers, a deep prefetch, pinned memory where a GPU exists, and a worker
allocator that reuses memory: decoded frames are large (a 480x640 RGB frame is 0.9 MB),
and glibc serves each from fresh mmap'd pages by default, so every frame pays page faults
and zeroing. Raising the mmap threshold in workers keeps those pages in the heap.

The loader is torchdata's StatefulDataLoader: its `state_dict()` says which samples were
handed out (not merely prefetched), and Lightning saves it in every checkpoint, so a
resumed run continues with the very next sample of the same shuffled order. That order is
ours (`ShuffledOrder`): each pass over the data is a permutation drawn from (seed, pass)
alone, and the sampler's state is those two numbers and a count. torchdata's own
RandomSampler restores a shared generator instead, and that has broken across its versions
(0.10: the first batch after a mid-epoch resume; 0.11 without workers: every epoch after
the one resumed in).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys
import warnings
from collections.abc import Iterator, Sized
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import Dataset, DistributedSampler
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


class ShuffledOrder(DistributedSampler):
    """Every index once per pass, in an order drawn from (seed, pass number) alone.

    Under torch.distributed each rank takes its share (rank::world_size) of the same order,
    the remainder of a pass dropped so every rank gets as many.

    Its state (`state_dict`: pass, and how many of this rank's indices were drawn) is all a
    restored sampler needs to go on where it stopped. StatefulDataLoader snapshots it at
    every batch it hands out, so prefetched batches are not counted.

    A DistributedSampler, so Lightning keeps it rather than putting its own in under DDP.
    Passes advance by themselves, once per full iteration: `set_epoch` is a no-op, because
    Lightning's epoch is the longest loader's, and a shorter loader cycled within it would
    otherwise repeat one order.
    """

    def __init__(
        self,
        data_source: Sized,
        seed: int,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        distributed = dist.is_available() and dist.is_initialized()
        world_size = world_size or (dist.get_world_size() if distributed else 1)
        rank = rank if rank is not None else (dist.get_rank() if distributed else 0)
        super().__init__(  # type: ignore[arg-type]
            data_source, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=True
        )
        self.passes = 0
        self.drawn = 0

    def __len__(self) -> int:
        return len(self.dataset) // self.num_replicas  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[int]:
        order = np.random.default_rng([self.seed, self.passes]).permutation(len(self.dataset))  # type: ignore[arg-type]
        mine = order[: len(self) * self.num_replicas][self.rank :: self.num_replicas].tolist()
        for index in mine[self.drawn :]:
            self.drawn += 1
            yield index
        self.passes += 1
        self.drawn = 0

    def set_epoch(self, epoch: int) -> None:
        """Ignored: see the class docstring."""

    def state_dict(self) -> dict[str, int]:
        return {"passes": self.passes, "drawn": self.drawn}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        self.passes, self.drawn = int(state_dict["passes"]), int(state_dict["drawn"])


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

    Shuffled, the order is `ShuffledOrder(dataset, seed)`; the workers' base seed comes from
    a generator of its own, seeded by `seed`, so iterating never consumes the global random
    state.
    """
    generator = torch.Generator().manual_seed(seed)
    return StatefulDataLoader(
        dataset,
        batch_size=batch_size,
        sampler=ShuffledOrder(dataset, seed) if shuffle else None,
        drop_last=shuffle if drop_last is None else drop_last,
        num_workers=num_workers,
        collate_fn=collate_samples,
        persistent_workers=num_workers > 0,
        prefetch_factor=prefetch_factor if num_workers > 0 else None,
        pin_memory=torch.cuda.is_available() if pin_memory is None else pin_memory,
        worker_init_fn=tune_worker_allocator if num_workers > 0 else None,
        generator=generator,
    )
