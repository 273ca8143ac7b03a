"""A shuffle that keeps each loader worker on a few episodes at a time.

With many more episodes than a worker's episode cache holds, a uniform shuffle makes
nearly every sample reopen its episode (its numeric arrays read whole and checked again).
A block order still draws every sample exactly once per pass, from a seeded permutation:
the episodes are permuted and cut into blocks of `episodes_per_block`, the blocks come in
that order, and the samples of a block come in a permutation of their own. A worker then
meets each episode of a block once, while the block lasts.

The DataLoader deals batch k to worker k % W (in order, also after a resume), so the
order is laid out in W lanes: the pass is cut into W contiguous spans of whole batches,
and batch k is taken from span k % W. Each worker walks one span, block after block, and
opens each episode of it about once a pass instead of once per sample.

The price is in the batches: a batch holds samples of at most a few blocks' episodes
(with 8 episodes a block and 32 samples a batch, about 4 samples of each of 8 episodes),
where a uniform shuffle draws 32 samples from 32 different episodes of a large set.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def block_order(
    rng: np.random.Generator, episodes: np.ndarray, episodes_per_block: int
) -> np.ndarray:
    """A permutation of range(len(episodes)): blocks of episodes, then samples within each.

    `episodes` is the episode of each sample, numbered 0..E-1 (each number used).
    """
    if episodes_per_block < 1:
        raise ValueError(f"episodes_per_block must be >= 1, got {episodes_per_block}")
    count = int(episodes.max()) + 1 if len(episodes) else 0
    place = np.empty(count, dtype=np.int64)
    place[rng.permutation(count)] = np.arange(count)  # each episode's place in this pass
    block = place[episodes] // episodes_per_block
    return np.lexsort((rng.random(len(episodes)), block))


def worker_lanes(order: np.ndarray, lanes: int, batch_size: int) -> np.ndarray:
    """`order` re-dealt so that batch k comes from the (k % lanes)-th contiguous span of it.

    Whole batches only are dealt; a last partial batch stays last (a DataLoader cuts
    batches from consecutive indices, so one in the middle would misalign the rest).
    """
    if lanes <= 1 or batch_size < 1:
        return order
    whole = len(order) // batch_size
    batches = order[: whole * batch_size].reshape(whole, batch_size)
    share, extra = divmod(whole, lanes)
    starts = np.cumsum([0] + [share + (lane < extra) for lane in range(lanes)])
    number = np.arange(whole)
    lane = np.searchsorted(starts, number, side="right") - 1
    step = number - starts[lane]  # the batch's place within its lane
    dealt = batches[np.lexsort((lane, step))].reshape(-1)
    return np.concatenate([dealt, order[whole * batch_size :]])


def compact_episodes(episodes: Sequence[int] | np.ndarray) -> np.ndarray:
    """Episode numbers of the samples renumbered 0..E-1 (in order of first number)."""
    values = np.asarray(episodes, dtype=np.int64)
    if values.ndim != 1:
        raise ValueError(f"episodes must be one number per sample, got shape {values.shape}")
    return np.unique(values, return_inverse=True)[1].astype(np.int64)
