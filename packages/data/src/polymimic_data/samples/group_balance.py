"""A shuffle that gives each group of episodes (a task, a lab, an operator) an equal share.

A uniform shuffle draws every sample once a pass, so a group's share of training is its
share of the samples: of MetaWorld's MT10 as scripted, 50 episodes a task, reach's episodes
are about 47 frames and drawer-open's about 98, so a uniform pass trains reach at 0.57x an
even share. A balanced pass keeps the pass's length (the dataset's sample count: epochs,
and what a step sees, are as before) and gives each of the G groups an equal share of it,
N // G samples (the remainder one each to groups drawn at random). A group with fewer
samples than its share has them all, repeated in fresh permutations until the share is
full; a group with more has a random subset of its share, drawn anew each pass. The order
is then one permutation of the whole, so every batch mixes the groups; it is drawn from the
pass's generator alone, so a resumed sampler draws the same pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from polymimic_data.episodes.resolver import EpisodeInfo


def group_codes(labels: Sequence[str]) -> tuple[np.ndarray, list[str]]:
    """Each label's group number, and the groups' labels (in order of first appearance)."""
    seen: dict[str, int] = {}
    codes = np.array([seen.setdefault(label, len(seen)) for label in labels], dtype=np.int64)
    return codes, list(seen)


def lacking_attribute(episodes: Sequence[EpisodeInfo], attribute: str) -> str | None:
    """Where episodes lack `attribute`: how many, one of them, what it holds; else None.

    `attribute` is a key of an episode's zarr.json `attributes` (e.g. task_name).
    """
    lacking = [e for e in episodes if attribute not in e.attrs]
    if not lacking:
        return None
    held = sorted(set(lacking[0].attrs) - {"embodiment_declaration"})
    return (
        f"{attribute!r} is not an attribute of {len(lacking)} episode(s), "
        f"e.g. {lacking[0].path}; it holds {held}"
    )


def group_members(groups: np.ndarray) -> list[np.ndarray]:
    """The indices of each group, in group-number order (a number unused: left out)."""
    if len(groups) and int(groups.min()) < 0:
        raise ValueError(f"group numbers must be 0 or more, got {int(groups.min())}")
    order = np.argsort(groups, kind="stable")
    cuts = np.flatnonzero(np.diff(groups[order])) + 1
    return [m for m in np.split(order, cuts) if len(m)]


def balanced_order(rng: np.random.Generator, members: Sequence[np.ndarray]) -> np.ndarray:
    """A pass as long as all `members` together, each group an equal share, shuffled.

    `members`: each group's indices (group_members). Indices of a group smaller than its
    share repeat; see the module's docstring.
    """
    total = sum(len(m) for m in members)
    if total == 0:
        return np.zeros(0, dtype=np.int64)
    share, extra = divmod(total, len(members))
    quotas = np.full(len(members), share)
    quotas[rng.permutation(len(members))[:extra]] += 1
    drawn = []
    for indices, quota in zip(members, quotas, strict=True):
        rounds = -(-int(quota) // len(indices))  # ceil: permutations needed to fill it
        tiled = rng.permuted(np.tile(indices, (rounds, 1)), axis=1).reshape(-1)
        drawn.append(tiled[:quota])
    order = np.concatenate(drawn)
    return order[rng.permutation(total)]
