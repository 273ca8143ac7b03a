"""make_dataloader's promise: a loader restored from `state_dict()` hands out exactly the
batches the uninterrupted loader would have, in the same shuffled order, with or without
workers, mid-epoch and into the next epochs (what a resumed training run relies on).

Only the order is restored, not the workers' random state: a sample is a function of its
index (samples.faults draws its replacements from [index, attempt]; augmentation runs on the
device from the policy's generator), so the same order is the same data."""

from __future__ import annotations

import os

import pytest
from torch.utils.data import Dataset, DistributedSampler

from polymimic_data.samples.dataloaders import ShuffledOrder, default_workers, make_dataloader


class _Frames(Dataset):
    """Samples that say which index they are."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, index: int) -> dict:
        return {"embodiment": "eva_bimanual", "frame": index, "faults": []}


@pytest.mark.parametrize("num_workers", [0, 2])
# 5 batches per epoch: stop mid-epoch, at its end, and in the next
@pytest.mark.parametrize("stop_after", [3, 5, 7])
def test_a_restored_loader_continues_the_same_order(
    num_workers: int, stop_after: int, take_batches
) -> None:
    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, seed=3
        )

    whole, _ = take_batches(loader(), 12)

    first = loader()
    head, iterator = take_batches(first, stop_after)
    state = first.state_dict()
    del iterator
    resumed = loader()
    resumed.load_state_dict(state)
    tail, _ = take_batches(resumed, 12 - stop_after)

    got = [b["frame"].tolist() for b in head + tail]
    assert got == [b["frame"].tolist() for b in whole]
    # And it is a shuffle: the epochs differ from the dataset's order and from each other.
    assert got[0] != [0, 1, 2, 3]
    assert got[:5] != got[5:10]


def test_ranks_share_one_order_without_overlap() -> None:
    whole = list(ShuffledOrder(range(23), seed=5))
    shares = [ShuffledOrder(range(23), seed=5, rank=r, world_size=3) for r in range(3)]
    drawn = [list(s) for s in shares]
    assert [len(d) for d in drawn] == [7, 7, 7] == [len(s) for s in shares]
    # the remainder of the pass (23 = 3 * 7 + 2) is dropped
    assert sorted(i for d in drawn for i in d) == sorted(whole[:21])
    assert [d[0] for d in drawn] == whole[:3]  # rank r takes r, r + 3, ... of that order
    assert drawn[0] != list(shares[0])  # the next pass is another order


def test_epochs_and_cycles_each_draw_their_own_order() -> None:
    """Lightning keeps a DistributedSampler under DDP (it puts its own in otherwise), and
    calls set_epoch as each of its epochs starts; a shorter loader cycled within an epoch
    gets a new order each cycle."""
    sampler = ShuffledOrder(range(10), seed=0)
    assert isinstance(sampler, DistributedSampler)
    epoch0 = list(sampler)
    cycle1 = list(sampler)  # iterated again without a new epoch
    sampler.set_epoch(0)  # the same epoch again: nothing changes
    cycle2 = list(sampler)
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert len({tuple(o) for o in (epoch0, cycle1, cycle2, epoch1)}) == 4
    restored = ShuffledOrder(range(10), seed=0)
    restored.load_state_dict({"epoch": 0, "cycle": 2, "drawn": 3})
    assert list(restored) == cycle2[3:]
    restored.set_epoch(1)
    assert list(restored) == epoch1


@pytest.mark.parametrize("num_workers", [0, 2])
def test_epochs_stopped_at_their_length_are_whole_and_resume_at_their_end(
    num_workers: int,
) -> None:
    """As Lightning iterates: set_epoch, then a fresh iterator, left after `len` batches
    without asking for more. Restored at an epoch's end, the loader's next iteration is
    the rest of that epoch (StatefulDataLoader's contract: nothing, though workers prefetch
    from the sampler meanwhile); the epochs after it are the uninterrupted run's."""

    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, seed=2
        )

    def epochs(dl, numbers) -> list[list[int]]:
        out = []
        for epoch in numbers:
            dl.sampler.set_epoch(epoch)
            iterator = iter(dl)
            out.append([f for _ in range(len(dl)) for f in next(iterator)["frame"].tolist()])
        return out

    whole = epochs(loader(), range(3))
    assert [len(e) for e in whole] == [20, 20, 20]  # 5 whole batches of 23 samples each time
    assert len({tuple(e) for e in whole}) == 3
    first = loader()
    assert epochs(first, [0]) == whole[:1]
    state = first.state_dict()
    resumed = loader()
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(0)
    assert list(resumed) == []
    assert epochs(resumed, [1, 2]) == whole[1:]


class SignalDispositions(Dataset):
    """Each sample: the worker's handlers of SIGTERM, SIGUSR1 and SIGUSR2 (ignored or not)."""

    def __len__(self) -> int:
        return 2

    def __getitem__(self, index: int) -> dict:
        import signal

        names = ("SIGTERM", "SIGUSR1", "SIGUSR2")
        ignored = {n: signal.getsignal(getattr(signal, n)) == signal.SIG_IGN for n in names}
        return {"embodiment": "eva_bimanual", "faults": [], **ignored}


@pytest.mark.parametrize("in_slurm", [True, False])
def test_loader_workers_in_a_slurm_job_ignore_its_stop_and_requeue_signals(
    monkeypatch, in_slurm: bool
) -> None:
    """Slurm sends SIGTERM and the `--signal` (submitit's USR2, Lightning's USR1) to every
    process of a step: the trainer acts on them; a worker that died of one would fail it."""
    if in_slurm:
        monkeypatch.setenv("SLURM_JOB_ID", "4242")
    else:
        monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    loader = make_dataloader(
        SignalDispositions(), batch_size=1, shuffle=False, num_workers=1, prefetch_factor=1
    )
    batch = next(iter(loader))
    ignored = {name: bool(batch[name][0]) for name in ("SIGTERM", "SIGUSR1", "SIGUSR2")}
    assert ignored == {"SIGTERM": in_slurm, "SIGUSR1": in_slurm, "SIGUSR2": in_slurm}


def test_default_workers_share_this_process_cores(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker per core of this process's share, among its loaders, 1 to 8."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)))
    monkeypatch.setattr(os, "cpu_count", lambda: 16)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert default_workers() == 8  # at most 8
    assert default_workers(loaders=4) == 4
    assert default_workers(processes=8) == 2  # the node's training processes share it
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")  # as torchrun says
    assert default_workers() == 4
    assert default_workers(loaders=8, processes=8) == 1  # at least one
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(3)))
    assert default_workers(processes=8) == 3  # bound to its own cores: shared already
    with pytest.raises(ValueError, match="loaders: 1 or more, got 0"):
        default_workers(loaders=0)
