"""The block order (make_dataloader's `episodes_per_block`): still an honest shuffle.

Every sample once per pass, a different order each epoch, the same for the same seed, a
restored loader continues it exactly; and each worker stays on a few episodes at a time:
with an LRU cache of one block's episodes, a worker opens each of its episodes once a pass.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import Dataset

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.samples.dataloaders import ShuffledOrder, make_dataloader
from polymimic_data.samples.episode_blocks import block_order, worker_lanes


def _episodes(lengths: list[int]) -> np.ndarray:
    return np.repeat(np.arange(len(lengths)), lengths)


def _sampler(lengths, seed=0, *, per_block=2, workers=1, batch=1, rank=0, world_size=1):
    episodes = _episodes(lengths)
    return ShuffledOrder(
        range(len(episodes)),
        seed,
        rank=rank,
        world_size=world_size,
        batch_size=batch,
        episodes=episodes,
        episodes_per_block=per_block,
        workers=workers,
        worker_batch_size=batch,
    )


def _lru_opens(episodes: list[int], capacity: int) -> int:
    """How many times a worker with an LRU cache of `capacity` episodes opens one."""
    cache: OrderedDict[int, None] = OrderedDict()
    opens = 0
    for episode in episodes:
        if episode in cache:
            cache.move_to_end(episode)
            continue
        opens += 1
        cache[episode] = None
        if len(cache) > capacity:
            cache.popitem(last=False)
    return opens


_lengths = st.lists(st.integers(1, 30), min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(
    lengths=_lengths,
    per_block=st.integers(1, 6),
    workers=st.integers(1, 3),
    batch=st.integers(1, 8),
    world_size=st.integers(1, 3),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_sample_once_per_pass_and_each_worker_on_a_block_at_a_time(
    lengths: list[int], per_block: int, workers: int, batch: int, world_size: int, seed: int
) -> None:
    episodes = _episodes(lengths)
    shares = [
        list(
            _sampler(
                lengths,
                seed,
                per_block=per_block,
                workers=workers,
                batch=batch,
                rank=r,
                world_size=world_size,
            )
        )
        for r in range(world_size)
    ]
    per_rank = len(episodes) // world_size // batch * batch
    assert [len(s) for s in shares] == [per_rank] * world_size
    drawn = [i for s in shares for i in s]
    assert len(set(drawn)) == len(drawn)  # no sample twice, on any rank
    if world_size == 1 and batch == 1:
        assert sorted(drawn) == list(range(len(episodes)))  # every sample, exactly once
    for share in shares:
        dealt = [share[k : k + batch] for k in range(0, len(share), batch)]
        for worker in range(workers):  # the DataLoader deals batch k to worker k % workers
            mine = [int(episodes[i]) for b in dealt[worker::workers] for i in b]
            # an LRU of one block's episodes: each of the worker's episodes opened once
            assert _lru_opens(mine, per_block) == len(set(mine))


def test_the_order_is_blocks_of_episodes_then_their_samples_shuffled() -> None:
    lengths = [5] * 12
    episodes = _episodes(lengths)
    order = block_order(np.random.default_rng(0), episodes, 3)
    assert sorted(order.tolist()) == list(range(60))
    blocks = [set(episodes[order[k : k + 15]].tolist()) for k in range(0, 60, 15)]
    assert all(len(b) == 3 for b in blocks) and len(set().union(*blocks)) == 12
    frames = [int(i) % 5 for i in order[:15]]
    assert frames != sorted(frames)  # within a block, samples are shuffled, not in frame order
    assert set(episodes[order[:15]].tolist()) != {0, 1, 2}  # and the episodes are permuted


def test_lanes_deal_contiguous_spans_of_whole_batches_and_keep_a_partial_one_last() -> None:
    order = np.arange(23)
    dealt = worker_lanes(order, 2, 4).tolist()
    # 5 whole batches: lane 0 takes batches 0-2, lane 1 batches 3-4; the 3 left stay last
    assert dealt == [0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 16, 17, 18, 19, 8, 9, 10, 11,
                     20, 21, 22]  # fmt: skip
    assert worker_lanes(order, 1, 4).tolist() == order.tolist()


def test_epochs_and_seeds_draw_their_own_order_and_the_same_seed_the_same() -> None:
    lengths = [7, 3, 9, 4, 6, 8, 2, 5]
    sampler = _sampler(lengths, seed=4, per_block=2, workers=2, batch=4)
    epoch0, cycle1 = list(sampler), list(sampler)
    sampler.set_epoch(1)
    epoch1 = list(sampler)
    assert len({tuple(o) for o in (epoch0, cycle1, epoch1)}) == 3
    assert sorted(epoch0) == sorted(epoch1)  # the same samples, in another order
    again = _sampler(lengths, seed=4, per_block=2, workers=2, batch=4)
    assert list(again) == epoch0
    assert list(_sampler(lengths, seed=5, per_block=2, workers=2, batch=4)) != epoch0


def test_a_restored_sampler_finishes_the_pass_in_the_order_it_was_in() -> None:
    lengths = [6, 5, 7, 4, 6, 3]
    sampler = _sampler(lengths, seed=1, per_block=2, workers=2, batch=2)
    whole = list(sampler)
    partial = _sampler(lengths, seed=1, per_block=2, workers=2, batch=2)
    it = iter(partial)
    head = [next(it) for _ in range(9)]
    state = partial.state_dict()
    assert state == {"epoch": 0, "cycle": 0, "drawn": 9, "episodes_per_block": 2, "lanes": 2}
    # restored with other settings: that pass goes on as it was, the next takes its own
    other = _sampler(lengths, seed=1, per_block=3, workers=1, batch=2)
    other.load_state_dict(state)
    assert head + list(other) == whole
    other.set_epoch(1)
    fresh = _sampler(lengths, seed=1, per_block=3, workers=1, batch=2)
    fresh.set_epoch(1)
    assert list(other) == list(fresh)
    # a uniformly shuffled pass (an older checkpoint) is finished uniformly
    uniform = ShuffledOrder(range(31), 1)
    it = iter(uniform)
    head = [next(it) for _ in range(5)]
    blocks = _sampler(lengths, seed=1)
    blocks.load_state_dict(uniform.state_dict())
    assert head + list(blocks) == list(ShuffledOrder(range(31), 1))


def test_episodes_per_block_needs_the_episodes() -> None:
    with pytest.raises(ValueError, match="episodes"):
        ShuffledOrder(range(10), 0, episodes_per_block=2)
    with pytest.raises(ValueError, match="samples"):
        ShuffledOrder(range(10), 0, episodes=[0] * 9, episodes_per_block=2)
    with pytest.raises(ValueError, match="sample_episodes"):
        make_dataloader(range(10), batch_size=2, shuffle=True, episodes_per_block=2)  # type: ignore[arg-type]


class _Frames(Dataset):
    """Samples that say their index and the worker that made them; 9 episodes of 5."""

    def __len__(self) -> int:
        return 45

    def sample_episodes(self) -> np.ndarray:
        return np.arange(45) // 5

    def __getitem__(self, index: int) -> dict:
        info = torch.utils.data.get_worker_info()
        worker = info.id if info is not None else -1
        return {"embodiment": "eva_bimanual", "frame": index, "worker": worker, "faults": []}


def _frames(batches) -> list[list[int]]:
    return [b["frame"].tolist() for b in batches]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_a_restored_loader_continues_the_block_order(num_workers: int, take_batches) -> None:
    def loader():
        return make_dataloader(
            _Frames(), batch_size=4, shuffle=True, num_workers=num_workers, episodes_per_block=2
        )

    whole, _ = take_batches(loader(), 25)  # 11 batches an epoch: into the third
    first = loader()
    head, iterator = take_batches(first, 7)
    state = first.state_dict()
    del iterator
    resumed = loader()
    resumed.load_state_dict(state)
    tail, _ = take_batches(resumed, 18)
    assert _frames(head + tail) == _frames(whole)
    epoch = [f for b in _frames(whole[:11]) for f in b]
    assert len(set(epoch)) == 44  # 45 samples, whole batches: each once, one left out
    assert epoch != sorted(epoch) and _frames(whole[:11]) != _frames(whole[11:22])
    if num_workers:
        # batch k is made by worker k % 2, from its own lane of episodes
        assert [b["worker"][0] for b in whole[:11]] == [0, 1] * 5 + [0]
        lanes = [{f // 5 for b in whole[w:11:2] for f in b["frame"].tolist()} for w in (0, 1)]
        assert len(lanes[0] & lanes[1]) <= 2  # only the block cut between the lanes


class _Opened(EpisodeDataset):
    """Each sample says how many episodes its worker has opened so far."""

    def __getitem__(self, index: int) -> dict:
        sample = super().__getitem__(index)
        info = torch.utils.data.get_worker_info()
        sample["worker"] = info.id if info is not None else -1
        sample["opened"] = self.episodes_opened
        return sample


@pytest.mark.parametrize("episodes_per_block", [None, 2])
def test_workers_open_each_episode_about_once_a_pass(
    tmp_path: Path, episodes_per_block: int | None
) -> None:
    """12 episodes of 10 frames, workers that cache 2 episodes: a uniform shuffle reopens
    nearly every sample's episode, the block order each episode about once."""
    from polymimic_data.synthetic import ensure_synthetic_episodes

    root = ensure_synthetic_episodes(
        tmp_path, "eva_bimanual", episodes=12, frames=10, height=16, width=16, progress=False
    )
    dataset = _Opened(
        resolve_episodes(root), embodiment="eva_bimanual", horizon=2, cache_episodes=2
    )
    loader = make_dataloader(
        dataset,
        batch_size=4,
        shuffle=True,
        num_workers=2,
        episodes_per_block=episodes_per_block,
        pin_memory=False,
    )
    batches = list(loader)
    drawn = [
        (e, f) for b in batches for e, f in zip(b["episode"], b["frame"].tolist(), strict=True)
    ]
    assert len(drawn) == len(set(drawn)) == 120  # every sample once
    opened = {}
    for b in batches:
        for worker, count in zip(b["worker"], b["opened"], strict=True):
            opened[worker] = max(opened.get(worker, 0), int(count))
    total = sum(opened.values())
    if episodes_per_block is None:
        assert total > 60  # nearly every sample reopens its episode
    else:
        assert total <= 12 + episodes_per_block  # once each, but the block the lanes cut
