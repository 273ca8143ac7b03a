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
from polymimic_data.samples.group_balance import balanced_order, group_codes


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 40), min_size=1, max_size=8),
    seed=st.integers(0, 2**32 - 1),
)
def test_each_group_an_equal_share_of_a_pass_of_unchanged_length(
    sizes: list[int], seed: int
) -> None:
    groups = np.repeat(np.arange(len(sizes)), sizes)
    order = balanced_order(np.random.default_rng(seed), groups)
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


def test_a_short_group_is_trained_as_often_as_a_long_one() -> None:
    """reach's 48 frames beside a window task's 95: a uniform pass gives reach a third of the
    samples, a balanced one half; the long task's samples vary between passes."""
    groups = np.repeat([0, 1], [48, 95])
    uniform = np.random.default_rng(0).permutation(len(groups))
    assert np.bincount(groups[uniform]).tolist() == [48, 95]
    passes = [balanced_order(np.random.default_rng([0, epoch]), groups) for epoch in range(2)]
    for order in passes:
        assert sorted(np.bincount(groups[order]).tolist()) == [71, 72]
    long_sets = [set(o[groups[o] == 1].tolist()) for o in passes]
    assert long_sets[0] != long_sets[1]


def test_group_codes_number_labels_in_order_of_first_appearance() -> None:
    assert group_codes(["push", "reach", "push", "pick"]).tolist() == [0, 1, 0, 2]


def test_groups_are_checked() -> None:
    with pytest.raises(ValueError, match="groups names 9 samples"):
        ShuffledOrder(range(10), 0, groups=[0] * 9)
    with pytest.raises(ValueError, match="one or the other"):
        ShuffledOrder(range(4), 0, groups=[0, 0, 1, 1], episodes=[0, 0, 1, 1], episodes_per_block=1)
    with pytest.raises(ValueError, match="shuffle=True"):
        make_dataloader(range(4), batch_size=2, shuffle=False, groups=[0, 0, 1, 1])  # type: ignore[arg-type]


def test_ranks_share_one_balanced_order() -> None:
    groups = np.repeat([0, 1, 2], [5, 20, 11])
    ranks = [
        list(ShuffledOrder(range(36), 3, rank=r, world_size=2, batch_size=2, groups=groups))
        for r in (0, 1)
    ]
    whole = balanced_order(np.random.default_rng([3, 0, 0]), groups)
    assert [i for pair in zip(*ranks, strict=True) for i in pair] == whole.tolist()


class _Frames(Dataset):
    """Samples that say their index: 3 groups of 4, 10 and 16 samples."""

    groups = np.repeat([0, 1, 2], [4, 10, 16])

    def __len__(self) -> int:
        return 30

    def __getitem__(self, index: int) -> dict:
        return {"embodiment": "eva_bimanual", "frame": index, "faults": []}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_restored_loader_continues_the_balanced_order(num_workers: int) -> None:
    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, groups=_Frames.groups
        )

    def take(dl, n, iterator=None):
        iterator = iter(dl) if iterator is None else iterator
        out = []
        for _ in range(n):
            try:
                out.append(next(iterator)["frame"].tolist())
            except StopIteration:
                iterator = iter(dl)
                out.append(next(iterator)["frame"].tolist())
        return out, iterator

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
    with pytest.raises(ValueError, match="balance_by 'operator': 3 episode"):
        dataset.sample_groups("operator")
    loader = make_dataloader(
        dataset, batch_size=4, shuffle=True, num_workers=0, groups=groups, pin_memory=False
    )
    assert isinstance(next(iter(loader))["actions"], torch.Tensor)
