"""make_dataloader's promise: a loader restored from `state_dict()` hands out exactly the
batches the uninterrupted loader would have, in the same shuffled order, with or without
workers, mid-epoch and into the next epochs (what a resumed training run relies on).

Only the order is restored, not the workers' random state: a sample is a function of its
index (data_faults draws its replacements from [index, attempt]; augmentation runs on the
device from the policy's generator), so the same order is the same data."""

from __future__ import annotations

import pytest
from torch.utils.data import Dataset, DistributedSampler

from polymimic_data.dataloaders import ShuffledOrder, make_dataloader


class _Frames(Dataset):
    """Samples that say which index they are."""

    def __len__(self) -> int:
        return 23

    def __getitem__(self, index: int) -> dict:
        return {"embodiment": "eva_bimanual", "frame": index, "faults": []}


def _take(loader, n: int, iterator=None):
    iterator = iter(loader) if iterator is None else iterator
    batches = []
    for _ in range(n):
        try:
            batches.append(next(iterator))
        except StopIteration:
            iterator = iter(loader)
            batches.append(next(iterator))
    return batches, iterator


@pytest.mark.parametrize("num_workers", [0, 2])
# 5 batches per epoch: stop mid-epoch, at its end, and in the next
@pytest.mark.parametrize("stop_after", [3, 5, 7])
def test_a_restored_loader_continues_the_same_order(num_workers: int, stop_after: int) -> None:
    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, seed=3
        )

    whole, _ = _take(loader(), 12)

    first = loader()
    head, iterator = _take(first, stop_after)
    state = first.state_dict()
    del iterator
    resumed = loader()
    resumed.load_state_dict(state)
    tail, _ = _take(resumed, 12 - stop_after)

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


def test_lightning_keeps_the_order_and_its_epochs_do_not_reset_it() -> None:
    """Lightning puts its own DistributedSampler in under DDP unless the loader has one,
    and calls set_epoch with its epoch (the longest loader's)."""
    sampler = ShuffledOrder(range(10), seed=0)
    assert isinstance(sampler, DistributedSampler)
    first = list(sampler)
    sampler.set_epoch(0)
    second = list(sampler)
    assert second != first
    restored = ShuffledOrder(range(10), seed=0)
    restored.load_state_dict({"passes": 1, "drawn": 0})
    assert list(restored) == second
