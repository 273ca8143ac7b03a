"""The balanced shuffle (make_dataloader's `groups`, data.balance_by): equal shares, honestly drawn.

Each group gets an equal share of a pass of unchanged length, a short group all of its
samples (repeated), a long one a fresh subset each pass without repeats; the order is the
same for the same seed, differs between epochs, and a restored loader continues it exactly.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.samples.dataloaders import ShuffledOrder, make_dataloader
from polymimic_data.samples.group_balance import balanced_order, group_codes, group_members


def _order(seed, groups: np.ndarray) -> np.ndarray:
    return balanced_order(np.random.default_rng(seed), group_members(groups))


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_group_an_equal_share_of_a_pass_of_unchanged_length(
    sizes: list[int], seed: int
) -> None:
    groups = np.repeat(np.arange(len(sizes)), sizes)
    order = _order(seed, groups)
    assert len(order) == len(groups)
    shares = np.bincount(groups[order], minlength=len(sizes))
    assert shares.max() - shares.min() <= 1  # equal, the remainder one each
    for g, size in enumerate(sizes):
        drawn = order[groups[order] == g]
        assert set(drawn) <= set(np.flatnonzero(groups == g))
        counts = np.bincount(drawn, minlength=len(groups))[groups == g]
        if size >= shares[g]:
            assert counts.max() <= 1  # a long group: a subset, none twice
        else:
            assert counts.min() >= 1 and counts.max() - counts.min() <= 1  # all, evenly


def test_a_short_group_is_trained_as_often_as_a_long_one_and_batches_mix_them() -> None:
    """reach's 47 frames beside drawer-open's 98: a balanced pass gives reach half the
    samples, not a third; the long task's subset and the odd sample's group vary between
    passes, and the groups are mixed through the pass, not one after another."""
    groups = np.repeat([0, 1], [47, 98])
    passes = [_order([0, epoch], groups) for epoch in range(12)]
    for order in passes:
        assert sorted(np.bincount(groups[order]).tolist()) == [72, 73]
        for quarter in np.array_split(groups[order], 4):  # each quarter: about 18 of each
            assert np.bincount(quarter, minlength=2).min() >= 9
    long_sets = {frozenset(o[groups[o] == 1].tolist()) for o in passes}
    assert len(long_sets) == len(passes)
    odd = {int(np.argmax(np.bincount(groups[o]))) for o in passes}
    assert odd == {0, 1}  # the remainder goes to a group drawn at random


def test_group_codes_number_labels_in_order_of_first_appearance() -> None:
    codes, labels = group_codes(["push", "reach", "push", "pick"])
    assert codes.tolist() == [0, 1, 0, 2] and labels == ["push", "reach", "pick"]
    with pytest.raises(ValueError, match="0 or more, got -1"):
        group_members(np.array([0, -1, 1]))


def test_groups_are_checked() -> None:
    with pytest.raises(ValueError, match="groups names 9 samples"):
        ShuffledOrder(range(10), 0, groups=[0] * 9)
    with pytest.raises(ValueError, match="one or the other"):
        ShuffledOrder(range(4), 0, groups=[0, 0, 1, 1], episodes=[0, 0, 1, 1], episodes_per_block=1)
    with pytest.raises(ValueError, match="shuffle=True"):
        make_dataloader(range(4), batch_size=2, shuffle=False, groups=[0, 0, 1, 1])  # type: ignore[arg-type]


@pytest.mark.parametrize("total", [36, 39])
def test_ranks_share_one_balanced_order(total: int) -> None:
    """Each rank takes every second index of one pass, cut to whole batches alike."""
    groups = np.repeat([0, 1, 2], [5, 20, total - 25])
    ranks = [
        list(ShuffledOrder(range(total), 3, rank=r, world_size=2, batch_size=4, groups=groups))
        for r in (0, 1)
    ]
    assert len(ranks[0]) == len(ranks[1]) == total // 2 // 4 * 4
    whole = _order([3, 0, 0], groups)
    assert [i for pair in zip(*ranks, strict=True) for i in pair] == whole[
        : 2 * len(ranks[0])
    ].tolist()


def test_a_restored_sampler_finishes_its_pass_as_it_began() -> None:
    """A uniform pass's state restored into a balanced sampler finishes that pass
    uniformly and balances the next; a balanced pass cannot be finished without groups."""
    groups = np.repeat([0, 1], [4, 16])
    uniform, balanced = ShuffledOrder(range(20), 5), ShuffledOrder(range(20), 5, groups=groups)
    it = iter(uniform)
    head = [next(it) for _ in range(6)]
    restored = ShuffledOrder(range(20), 5, groups=groups)
    restored.load_state_dict(uniform.state_dict())
    assert head + list(restored) == list(ShuffledOrder(range(20), 5))
    assert np.bincount(groups[list(restored)]).tolist() == [10, 10]  # the next pass: balanced
    it = iter(balanced)
    [next(it) for _ in range(3)]
    assert balanced.state_dict()["balanced"] == 1
    plain = ShuffledOrder(range(20), 5)
    plain.load_state_dict(balanced.state_dict())
    with pytest.raises(ValueError, match="continues a balanced pass: the sampler needs groups="):
        list(plain)


class _Frames(Dataset):
    """Samples that say their index: 3 groups of 4, 10 and 16 samples."""

    groups = np.repeat([0, 1, 2], [4, 10, 16])

    def __len__(self) -> int:
        return 30

    def __getitem__(self, index: int) -> dict:
        return {"embodiment": "eva_bimanual", "frame": index, "faults": []}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_restored_loader_continues_the_balanced_order(num_workers: int, take_batches) -> None:
    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, groups=_Frames.groups
        )

    def take(dl, n, iterator=None):
        batches, iterator = take_batches(dl, n, iterator)
        return [b["frame"].tolist() for b in batches], iterator

    whole, _ = take(loader(), 16)  # 7 batches an epoch: into the third
    first = loader()
    head, iterator = take(first, 5)
    state = first.state_dict()
    del iterator
    resumed = loader()
    resumed.load_state_dict(state)
    tail, _ = take(resumed, 11)
    assert head + tail == whole
    epoch = np.array([f for batch in whole[:7] for f in batch])  # 28 of a pass of 30
    assert np.bincount(_Frames.groups[epoch]).min() >= 8  # 10 each, less the 2 left over
    assert whole[:7] != whole[7:14]


def test_sample_groups_by_an_episode_attribute(tmp_path: Path) -> None:
    from polymimic_data.synthetic import ensure_synthetic_episodes

    root = ensure_synthetic_episodes(
        tmp_path, "eva_bimanual", episodes=3, frames=6, height=16, width=16, progress=False
    )
    episodes = resolve_episodes(root)
    for info, task in zip(episodes, ["fold", "pour", "fold"], strict=True):
        info.attrs["task_name"] = task
    dataset = EpisodeDataset(episodes, embodiment="eva_bimanual", horizon=2)
    groups, labels = dataset.sample_groups("task_name")
    assert labels == ["fold", "pour"]
    assert len(groups) == len(dataset)
    by_episode = dataset.sample_episodes()
    for e, code in enumerate([0, 1, 0]):
        assert set(groups[by_episode == e].tolist()) == {code}
    lacking = (
        r"balance_by: 'operator' is not an attribute of 3 episode\(s\), e.g. .*\.zarr; it holds"
    )
    with pytest.raises(ValueError, match=lacking + r" \[.*'task_name'"):
        dataset.sample_groups("operator")
    loader = make_dataloader(
        dataset, batch_size=4, shuffle=True, num_workers=0, groups=groups, pin_memory=False
    )
    assert isinstance(next(iter(loader))["actions"], torch.Tensor)
