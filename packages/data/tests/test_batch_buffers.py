"""The workers' batch buffers are recycled, and never while a batch over one is held."""

from __future__ import annotations

import gc
import os
import resource
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.samples import make_dataloader
from polymimic_data.samples.batch_buffers import (
    FREE,
    HANDED_OUT,
    SLOTS_KEY,
    BufferPool,
    BufferReturns,
    new_flags,
)

CAMERAS = ("front_1", "left_wrist")


def _dataset(root: Path) -> EpisodeDataset:
    return EpisodeDataset(resolve_episodes(root), embodiment="eva_bimanual", cameras=CAMERAS,
                          image_size=(24, 32), horizon=4)  # fmt: skip


def _shm_file(image: torch.Tensor) -> int:
    """The inode of the shared-memory file under `image` (which file, not which mapping)."""
    fd, _ = image.untyped_storage()._share_fd_cpu_()
    return os.fstat(fd).st_ino


@pytest.mark.parametrize("recycle", [True, False])
def test_dropped_batches_buffers_are_used_again(eva_root: Path, recycle: bool) -> None:
    """Also across passes cut short: what each had prefetched, and dropped, comes back."""
    loader = make_dataloader(_dataset(eva_root), batch_size=4, shuffle=True, num_workers=2,
                             prefetch_factor=2, recycle_buffers=recycle,
                             pin_memory=False)  # fmt: skip
    files, batches = set(), 0
    for _ in range(8):
        for _, batch in zip(range(3), loader, strict=False):
            assert SLOTS_KEY not in batch  # the training process's iterator takes the names
            files.add(_shm_file(batch["images.front_1"]))
            batches += 1
            del batch
    # recycled: each worker's prefetched and held batches, a few buffers; else one a batch
    assert len(files) <= 12 if recycle else len(files) == batches == 24
    if recycle:  # handed out now: the batches prefetched (2 workers x 2), the last one (freed
        # as the next is asked for), and at most as many the last pass was still collating
        # when this one began (dropped with it; freed as the next pass begins). Not 8 passes'.
        handed_out = int(loader.buffer_flags.sum())  # type: ignore[attr-defined]
        assert handed_out <= (2 * 2 * 2 + 1) * len(CAMERAS)


def test_a_recycled_buffer_arrives_mapped_so_its_pages_do_not_fault_again(eva_root: Path) -> None:
    """The training process keeps each slot's mapping: reading a recycled batch's images
    faults no page in (a new mapping of the same memory would fault them all again)."""
    dataset = EpisodeDataset(resolve_episodes(eva_root), embodiment="eva_bimanual",
                             cameras=CAMERAS, image_size=(96, 128), horizon=4)  # fmt: skip
    loader = make_dataloader(dataset, batch_size=8, shuffle=True, num_workers=2,
                             prefetch_factor=2, recycle_buffers=True, pin_memory=False)  # fmt: skip
    pages = faults = 0
    for epoch in range(4):  # the first maps each slot once
        for batch in loader:
            images = [batch[f"images.{camera}"] for camera in CAMERAS]
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            for image in images:
                image.amax()  # reads every page
            if epoch:
                faults += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
                pages += sum(image.numel() for image in images) // 4096
            del batch, images
    # a new mapping's first read faults each 16 pages at least (the kernel's fault-around)
    assert pages >= 1000 and faults < pages / 64, (faults, pages)


def test_a_held_batch_is_never_written_over(eva_root: Path) -> None:
    """Through the ways a run uses a loader (its state saved before the first pass, passes
    cut short, resumed mid-pass, batches held and let go), every batch held is, at every
    step, down to the last pixel, the same as a loader's that never recycles."""

    def loader(recycle: bool) -> Any:
        return make_dataloader(_dataset(eva_root), batch_size=4, shuffle=True, num_workers=2,
                               prefetch_factor=2, pin_memory=False, seed=5,
                               recycle_buffers=recycle)  # fmt: skip

    recycled, fresh = loader(True), loader(False)
    held: list[tuple[dict, dict]] = []
    seen = 0

    def take(a: dict, b: dict) -> None:
        nonlocal seen
        assert (a["episode"], a["frame"].tolist()) == (b["episode"], b["frame"].tolist())
        if seen % 2 == 0:
            held.append((a, b))
        seen += 1
        for ours, theirs in held:
            for camera in CAMERAS:
                assert torch.equal(ours[f"images.{camera}"], theirs[f"images.{camera}"])

    recycled.state_dict(), fresh.state_dict()  # this makes the first pass's iterator
    deadline = time.monotonic() + 60  # whose workers prefetch 2 batches each: let them
    while int(recycled.buffer_flags.sum()) < 2 * 2 * len(CAMERAS):  # type: ignore[attr-defined]
        assert time.monotonic() < deadline, "the workers never prefetched"
        time.sleep(0.01)
    for cut in (3, None, 2):  # a pass cut short drops what it had prefetched
        for step, (a, b) in enumerate(zip(recycled, fresh, strict=True)):
            take(a, b)
            if step == cut:
                break
    ours, theirs = iter(recycled), iter(fresh)
    take(next(ours), next(theirs))
    saved = recycled.state_dict(), fresh.state_dict()
    take(next(ours), next(theirs))
    recycled.load_state_dict(saved[0]), fresh.load_state_dict(saved[1])  # new workers
    for step, (a, b) in enumerate(zip(recycled, fresh, strict=True)):
        take(a, b)
        if step == 2:  # the batches of the last workers go while the new ones' are held
            held.clear()
            gc.collect()
        if step == 9:
            break
    assert seen > 40
    held.clear()
    del a, b
    gc.collect()
    recycled.buffer_returns.reclaim()  # type: ignore[attr-defined]
    assert int(recycled.buffer_flags.sum()) == 0  # type: ignore[attr-defined]


def test_a_pool_takes_back_a_buffer_dropped_in_its_worker() -> None:
    """A buffer decoded into but never handed out (its batch failed) is free once dropped."""
    flags = new_flags(1)
    pool = BufferPool(flags, 0)
    storage, slot = pool.take(64) or (None, None)
    assert storage is not None and slot == 0
    buffer = torch.empty(0, dtype=torch.uint8).set_(storage)
    pool.lend(buffer, slot)
    assert pool.take(64) == (pool.storages[1], 1)  # slot 0 is held in the worker
    del buffer
    assert pool.take(64) == (storage, 0)
    handed = torch.empty(0, dtype=torch.uint8).set_(storage)
    pool.lend(handed, 0)
    assert pool.hand_out(handed) == 0 and flags[0, 0] == HANDED_OUT
    del handed  # gone from the worker, still in a batch the training process holds
    assert pool.take(64) != (storage, 0)


def test_a_batch_copied_out_of_its_buffer_frees_it_at_once() -> None:
    """Pinned memory is a copy: the shared buffer is not held by the batch handed out."""
    flags = new_flags(1)
    returns = BufferReturns(flags)
    shared = torch.zeros(2 * 3 + 32, dtype=torch.uint8)[16 : 16 + 6].view(2, 3)
    copied = shared.clone()
    for image, freed in ((copied, True), (shared, False)):
        flags[0, 0] = HANDED_OUT
        returns.receive({"images.x": image, SLOTS_KEY: [("images.x", 0, 0)]})
        assert (flags[0, 0] == FREE) == freed
    del shared, image
    gc.collect()
    returns.collect()
    assert flags[0, 0] == FREE


def test_a_storage_object_alone_keeps_its_slot_held() -> None:
    """Whoever keeps a batch image's storage object (not a tensor) keeps its memory too."""
    flags = new_flags(1)
    returns = BufferReturns(flags)
    image = torch.zeros(64 + 32, dtype=torch.uint8).share_memory_()[16 : 16 + 64]
    flags[0, 0] = HANDED_OUT  # by the worker's pool
    returns.receive({"images.x": image, SLOTS_KEY: [("images.x", 0, 0)]})
    kept = image.untyped_storage()
    del image
    gc.collect()
    returns.collect()
    assert flags[0, 0] == HANDED_OUT
    del kept
    returns.collect()
    assert flags[0, 0] == FREE


def _shared_mappings() -> int:
    """This process's mappings of torch's shared memory files larger than a page (batch
    buffers; not the loader's flags)."""
    count = 0
    for line in Path("/proc/self/maps").read_text().splitlines():
        start, end = (int(a, 16) for a in line.split()[0].split("-"))
        count += "torch_" in line and end - start > 4096
    return count


def test_the_mappings_kept_go_with_their_workers(eva_root: Path) -> None:
    """Once a loader's workers are shut down (as Lightning's
    _shutdown_workers_and_reset_iterator does at the end of a fit), the training process
    maps none of their buffers, though the loader itself lives on."""
    before = _shared_mappings()
    loader = make_dataloader(_dataset(eva_root), batch_size=4, shuffle=True, num_workers=2,
                             prefetch_factor=2, recycle_buffers=True,
                             pin_memory=False)  # fmt: skip
    for batch in loader:  # a whole pass: the persistent workers wait for the next
        del batch
    gc.collect()
    assert _shared_mappings() > before  # kept for the next pass
    loader._iterator._shutdown_workers()  # type: ignore[attr-defined]
    loader._iterator = None
    gc.collect()
    assert _shared_mappings() == before
