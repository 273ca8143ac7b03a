"""A shuffle that gives each group of episodes (a task, a lab, an operator) an equal share.

A uniform shuffle draws every sample once a pass, so a group's share of training is its
share of the frames: in MetaWorld's MT10 the scripted reach finishes in about 48 frames and
the window tasks take about 95, so a uniform pass trains reach about half as often as a
window. A balanced pass keeps the pass's length (the dataset's sample count: epochs, and
what a step sees, are as before) and gives each of the G groups an equal share of it,
N // G samples (the remainder one each to groups drawn at random). A group with fewer
samples than its share has them all, repeated in fresh permutations until the share is
full; a group with more has a random subset of its share, drawn anew each pass. The order
is then one permutation of the whole, drawn from the pass's generator alone, so a resumed
sampler draws the same pass.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def group_codes(labels: Sequence[object]) -> np.ndarray:
    """Each label's group number, 0..G-1 in order of first appearance."""
    seen: dict[object, int] = {}
    return np.array([seen.setdefault(label, len(seen)) for label in labels], dtype=np.int64)


def balanced_order(rng: np.random.Generator, groups: np.ndarray) -> np.ndarray:
    """len(groups) indices into `groups` (numbered 0..G-1), each group an equal share.

    Indices of a group smaller than its share repeat; see the module's docstring.
    """
    total = len(groups)
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    members = [np.flatnonzero(groups == g) for g in range(int(groups.max()) + 1)]
    members = [m for m in members if len(m)]
    share, extra = divmod(total, len(members))
    quotas = np.full(len(members), share)
    quotas[rng.permutation(len(members))[:extra]] += 1
    drawn = []
    for indices, quota in zip(members, quotas, strict=True):
        rounds = -(-int(quota) // len(indices))  # ceil: permutations needed to fill it
        tiled = np.concatenate([indices[rng.permutation(len(indices))] for _ in range(rounds)])
        drawn.append(tiled[:quota])
    order = np.concatenate(drawn)
    return order[rng.permutation(total)]
