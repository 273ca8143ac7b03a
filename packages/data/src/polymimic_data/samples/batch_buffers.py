"""The memory a batch's images are decoded into, and its reuse across a loader's batches.

A batch read at once (EpisodeDataset.__getitems__) decodes each camera's frames straight
into one (B, H, W, 3) buffer, and collation hands that buffer on as the batch's images
(one_buffer, below). Inside a loader worker the buffer is shared memory, so the batch
crosses to the training process without a copy, as default_collate's stack would.

Fresh shared memory for every batch is what a DataLoader pays by default: each buffer is
a new file mapped into both processes, and every page of it is zeroed and faulted in by the
first write (a 32-frame 480x640 camera buffer is 29.5 MB). Buffers are recycled instead:

- in each worker of a loader made by make_dataloader, a `BufferPool` keeps the shared
  buffers it has made, and takes one for a batch only while its flag (a byte in memory
  shared with the training process) says no batch handed out holds it;
- each set of workers a loader starts has flags of its own (RecyclingDataLoader);
- in the training process, `BufferReturns` follows each batch it hands out: a buffer's flag
  is cleared once no tensor anywhere in that process holds its memory any more (a
  reference count, not a guess: the storage's use count falls to the one reference
  BufferReturns keeps, so that the buffer's next batch arrives already mapped), or at once
  where pinning copied the batch out of it;
- a pool with no buffer free makes a fresh one, so holding on to batches costs memory, as
  it always did, never correctness. A pool keeps its buffers while its workers live (about
  what they have in flight, at most SLOTS), so a loader whose persistent workers mostly
  wait (validation's) does not recycle by default.

A buffer starts 16 bytes past a 32-byte boundary: libjpeg-turbo writes a row that starts
on one with non-temporal stores (jpeg_decode.off_boundary), and a fresh buffer starts on a
page, so every slot and row of a frame whose rows are a multiple of 32 bytes (128x160,
480x640) would (bench-data: a 128x160 frame took 1.31x as long to decode there).
"""

from __future__ import annotations

import math
import sys
import weakref
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import get_worker_info

from polymimic_data.samples.jpeg_decode import ALIGNMENT, OFFSET

SLOTS = 32  # shared buffers one worker keeps; past them it makes fresh ones
SLOTS_KEY = "buffer_slots"  # a worker's batch names its pooled buffers under it (popped)
HANDED_OUT, FREE = 1, 0

# what batch_buffer made, by id (a tensor's == is elementwise, so no WeakSet)
_BUFFERS: weakref.WeakValueDictionary[int, torch.Tensor] = weakref.WeakValueDictionary()
_POOL: BufferPool | None = None  # this worker's, where make_dataloader installed one


def new_flags(workers: int) -> torch.Tensor:
    """The (workers, SLOTS) flags a loader's pools and its BufferReturns share: all free."""
    return torch.zeros((workers, SLOTS), dtype=torch.uint8).share_memory_()


class BufferPool:
    """The shared buffers of one loader worker (see the module docstring).

    A slot is taken when its flag is FREE and no tensor of this worker holds it (a buffer
    decoded into but never handed out, e.g. a batch whose read failed, comes back when it
    is dropped); `hand_out` marks it HANDED_OUT as its batch leaves the worker.
    """

    def __init__(self, flags: torch.Tensor, worker: int) -> None:
        self.worker = worker
        self.flags = flags[worker].numpy()  # the shared bytes themselves
        self.storages: list[torch.UntypedStorage] = []
        self.in_use: set[int] = set()  # slots a tensor of this worker holds
        self.slot_of: dict[int, int] = {}  # id of a buffer tensor -> its slot

    def take(self, nbytes: int) -> tuple[torch.UntypedStorage, int] | None:
        """A shared storage of `nbytes` and its slot; None when every slot is taken."""
        for slot, storage in enumerate(self.storages):
            free = self.flags[slot] == FREE and slot not in self.in_use
            if free and storage.nbytes() == nbytes:
                return storage, slot
        if len(self.storages) < SLOTS and self.flags[len(self.storages)] == FREE:
            self.storages.append(torch.UntypedStorage._new_shared(nbytes))
            return self.storages[-1], len(self.storages) - 1
        for slot in range(len(self.storages)):  # one of another size, remade
            if self.flags[slot] == FREE and slot not in self.in_use:
                self.storages[slot] = torch.UntypedStorage._new_shared(nbytes)
                return self.storages[slot], slot
        return None

    def lend(self, buffer: torch.Tensor, slot: int) -> None:
        """`buffer` (a tensor over slot's storage) holds the slot until it is dropped."""
        self.in_use.add(slot)
        self.slot_of[id(buffer)] = slot
        weakref.finalize(buffer, self._dropped, id(buffer), slot)

    def _dropped(self, buffer_id: int, slot: int) -> None:
        self.in_use.discard(slot)
        self.slot_of.pop(buffer_id, None)

    def hand_out(self, buffer: torch.Tensor) -> int | None:
        """Mark `buffer`'s slot as leaving in a batch; the slot, None if not pooled."""
        slot = self.slot_of.get(id(buffer))
        if slot is not None:
            self.flags[slot] = HANDED_OUT
        return slot


def install_pool(flags: torch.Tensor, worker: int) -> None:
    """Make this (worker) process's batch buffers come from a pool (make_dataloader's)."""
    global _POOL
    _POOL = BufferPool(flags, worker)


def batch_buffer(shape: tuple[int, ...]) -> torch.Tensor:
    """A uint8 buffer for a batch's images of one camera, (B, H, W, 3), off the boundary.

    In shared memory inside a loader worker (pooled where the loader installed a pool),
    private memory otherwise (see the module docstring).
    """
    nbytes = math.prod(shape) + ALIGNMENT
    taken = None
    if get_worker_info() is None:
        storage = torch.empty(nbytes, dtype=torch.uint8).untyped_storage()
    elif _POOL is not None and (taken := _POOL.take(nbytes)) is not None:
        storage = taken[0]
    else:  # shared, as default_collate makes its own
        storage = torch.UntypedStorage._new_shared(nbytes)
    offset = (OFFSET - storage.data_ptr()) % ALIGNMENT
    strides = torch.empty(shape, dtype=torch.uint8, device="meta").stride()
    # a tensor of the storage itself (not a view), so that collation can recognise it
    buffer = torch.empty(0, dtype=torch.uint8).set_(storage, offset, shape, strides)
    _BUFFERS[id(buffer)] = buffer
    if taken is not None and _POOL is not None:
        _POOL.lend(buffer, taken[1])
    return buffer


def one_buffer(images: list[torch.Tensor]) -> torch.Tensor | None:
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


def hand_out(buffer: torch.Tensor, key: str, batch: dict[str, Any]) -> None:
    """Name pooled `buffer`, leaving as `batch[key]`, under SLOTS_KEY for BufferReturns."""
    slot = _POOL.hand_out(buffer) if _POOL is not None else None
    if slot is not None and _POOL is not None:
        batch.setdefault(SLOTS_KEY, []).append((key, _POOL.worker, slot))


def _python_references(mapping: dict[Any, Any], key: Any) -> int:
    """The references to `mapping[key]`, counted the same way for every object."""
    value = mapping[key]
    return sys.getrefcount(value)


# what _python_references counts for a value only its mapping holds (this interpreter's)
_UNHELD_REFERENCES = _python_references({0: object()}, 0)


class BufferReturns:
    """The training process's side of the pools: frees a slot once its batch is gone.

    `receive(batch)` as each batch is handed out (it pops SLOTS_KEY); `collect()` clears the
    flag of every buffer no tensor of this process holds any more; `reclaim()` also frees
    what the loader received but never handed out (a pass cut short discards the batches
    prefetched for it), to be called before a new pass's indices are sent, so that no
    batch of the new pass is collated yet. (A batch of the old pass a worker was still
    collating then is discarded too, its buffers freed at the pass after: a few, never
    more passes' worth.)

    It keeps each slot's storage (its mapping of the worker's shared memory) between the
    batches that use it, while its workers live: torch's receiving side finds a storage
    still alive in its cache and reuses it, so a recycled buffer arrives without a new
    mapping whose every page would fault again at first touch (10-12 ms a batch of 32 at
    480x640 on bench-data's machine). A slot is then free when nothing but this object
    holds its storage: its use count is 1 (every tensor over it, and so every array or
    view of one, holds one of its own) and no one else holds the storage object itself
    (torch keeps one Python object per storage: a user's is this one).
    """

    def __init__(self, flags: torch.Tensor) -> None:
        self.flags = flags.numpy()
        self.held: list[tuple[StorageWeakRef, int, int]] = []
        self.mapped: dict[tuple[int, int], torch.UntypedStorage] = {}

    def receive(self, batch: Any) -> None:
        """Follow the pooled buffers of `batch` (a batch's dict; other things pass)."""
        if not isinstance(batch, dict) or SLOTS_KEY not in batch:
            return
        for key, worker, slot in batch.pop(SLOTS_KEY):
            storage = batch[key].untyped_storage()
            if batch[key].is_pinned() or storage.nbytes() <= batch[key].nbytes:
                self.flags[worker, slot] = FREE  # copied out (pinned): nothing holds it
            else:
                self.mapped[worker, slot] = storage  # a slot remade: the old one unmapped
                self.held.append((StorageWeakRef(storage), worker, slot))

    def collect(self) -> None:
        """Free the slots whose memory nothing in this process holds any more."""
        kept = []
        for ref, worker, slot in self.held:
            if ref.expired() or self._only_mapped(ref, (worker, slot)):
                self.flags[worker, slot] = FREE
            else:
                kept.append((ref, worker, slot))
        self.held = kept

    def _only_mapped(self, ref: StorageWeakRef, key: tuple[int, int]) -> bool:
        """Whether `mapped[key]`, `ref`'s storage, is all that holds it."""
        storage = self.mapped.get(key)
        if storage is None or storage._cdata != ref.cdata:  # the slot remade since
            return False
        del storage  # not counted as a holder below
        return (
            torch._C._storage_Use_Count(ref.cdata) <= 1
            and _python_references(self.mapped, key) <= _UNHELD_REFERENCES
        )

    def release_mappings(self) -> None:
        """Let go of the storages kept (their workers are gone): each unmapped once free."""
        self.mapped.clear()

    def reclaim(self) -> None:
        """Every slot free but those of batches handed out and still held."""
        self.collect()
        held = torch.zeros(self.flags.shape, dtype=torch.uint8).numpy()
        for _, worker, slot in self.held:
            held[worker, slot] = HANDED_OUT
        self.flags[...] = held  # a held slot is written the value it has: never seen free
