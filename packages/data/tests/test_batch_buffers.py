"""The workers' batch buffers are recycled, and never while a batch over one is held."""

from __future__ import annotations

import gc
import os
from pathlib import Path

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
                             prefetch_factor=2, recycle_buffers=recycle)  # fmt: skip
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


def test_a_held_batch_is_never_written_over(eva_root: Path) -> None:
    """Batches held across passes (some cut short) keep their images as they came."""
    loader = make_dataloader(_dataset(eva_root), batch_size=4, shuffle=True, num_workers=2,
                             prefetch_factor=2)  # fmt: skip
    held: list[tuple[dict, dict]] = []
    for cut in (3, None, 2, None):  # a pass cut short drops what it had prefetched
        for step, batch in enumerate(loader):
            if step % 3 == 0:
                copies = {c: batch[f"images.{c}"].clone() for c in CAMERAS}
                held.append((batch, copies))
            if cut is not None and step == cut:
                break
    assert len(held) > 10
    for batch, copies in held:
        for camera in CAMERAS:
            assert torch.equal(batch[f"images.{camera}"], copies[camera])
    # what the loader holds is freed once the batches go (reclaimed at the next pass)
    del held, batch
    gc.collect()
    loader.buffer_returns.reclaim()  # type: ignore[attr-defined]
    assert int(loader.buffer_flags.sum()) == 0  # type: ignore[attr-defined]


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
