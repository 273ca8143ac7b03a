"""Corrections of episodes already on disk: dry run, idempotent, atomic per episode.

Each correction has a name recorded in the episode's `corrections_applied` attribute,
so running it again changes nothing. An episode is corrected in a hard-linked copy (only
the changed arrays are real copies), then swapped in with two renames; an interrupted
swap is rolled back the next time any correction runs over that root.

`mecka_left_wrist`: some mecka converters applied the left-hand mirror to the LEFT wrist
orientation once more than they should, storing M R M with M = diag(-1, 1, 1) instead of
R. The mirror is its own inverse, so the fix applies it once more: in quaternion terms
(w, x, y, z) -> (w, x, -y, -z). Positions are unaffected.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zarr

from polymimic_data.episodes.resolver import episode_dirs
from polymimic_data.store.atomic_files import write_json_atomic
from polymimic_data.store.episode_attrs import read_group_attrs
from polymimic_data.store.episode_store import INCOMPLETE_PREFIX, episode_hash

log = logging.getLogger(__name__)
APPLIED = "corrections_applied"
_BACKUP = f"{INCOMPLETE_PREFIX}backup-"


@dataclass(frozen=True)
class Correction:
    """A named fix of some keys, for the episodes of the embodiments it applies to."""

    name: str
    embodiments: frozenset[str]
    keys: tuple[str, ...]
    fix: Callable[[str, np.ndarray], np.ndarray]  # (key, values) -> corrected values


def _unmirror_left_wrist(key: str, values: np.ndarray) -> np.ndarray:
    out = values.copy()
    out[..., 5:7] *= -1.0  # quaternion y, z of (x, y, z, w, x, y, z)
    return out


CORRECTIONS = {
    "mecka_left_wrist": Correction(
        "mecka_left_wrist",
        frozenset({"mecka_bimanual"}),
        ("left.obs_wrist_pose",),
        _unmirror_left_wrist,
    ),
}


@dataclass(frozen=True)
class CorrectionResult:
    """What a correction did to one episode, or why it skipped it."""

    episode: str
    action: str  # "corrected", "would correct", "already applied", "not applicable", "skipped"
    path: Path | None = None
    why: str = ""  # for "skipped": what made the episode unreadable or its correction fail


def _recover_interrupted(root: Path) -> None:
    for backup in root.rglob(f"{_BACKUP}*"):
        original = backup.parent / backup.name.removeprefix(_BACKUP).rsplit("-", 1)[0]
        if not original.exists():
            os.rename(backup, original)
            log.warning("restored %s from an interrupted correction", original)
        else:
            shutil.rmtree(backup)


def _correct_episode(path: Path, correction: Correction) -> None:
    token = uuid.uuid4().hex[:8]
    work = path.parent / f"{INCOMPLETE_PREFIX}{path.name}-{token}"
    shutil.copytree(path, work, copy_function=os.link)
    try:
        for key in correction.keys:
            # Replace the hard links with real copies before writing: the original must not change.
            shutil.rmtree(work / key)
            shutil.copytree(path / key, work / key)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                array = zarr.open_array(work / key, mode="r+")
                array[:] = correction.fix(key, np.asarray(array[:]))
        meta = json.loads((path / "zarr.json").read_text())
        attrs = meta.setdefault("attributes", {})
        attrs[APPLIED] = [*attrs.get(APPLIED, []), correction.name]
        (work / "zarr.json").unlink()  # a hard link to the original's: write a new file
        write_json_atomic(work / "zarr.json", meta)
        backup = path.parent / f"{_BACKUP}{path.name}-{token}"
        os.rename(path, backup)
        os.rename(work, path)
        shutil.rmtree(backup)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def apply_correction(
    root: str | os.PathLike[str], name: str, *, dry_run: bool
) -> list[CorrectionResult]:
    """Apply correction `name` to every episode under `root` it concerns."""
    if name not in CORRECTIONS:
        raise KeyError(f"unknown correction {name!r}; known: {sorted(CORRECTIONS)}")
    correction = CORRECTIONS[name]
    root = Path(root)
    if not dry_run:
        _recover_interrupted(root)
    results = []
    for path in episode_dirs(root):
        try:
            action = _apply(path, correction, dry_run=dry_run)
        except Exception as exc:  # one broken episode must not stop the others
            results.append(CorrectionResult(episode_hash(path), "skipped", path, str(exc)))
            continue
        results.append(CorrectionResult(episode_hash(path), action, path))
    return results


def _apply(path: Path, correction: Correction, *, dry_run: bool) -> str:
    try:
        attrs = read_group_attrs(path)
    except (OSError, ValueError) as exc:
        raise ValueError(f"cannot read group metadata ({exc})") from exc
    if str(attrs.get("embodiment", "")).lower() not in correction.embodiments:
        return "not applicable"
    if correction.name in attrs.get(APPLIED, []):
        return "already applied"
    if dry_run:
        return "would correct"
    _correct_episode(path, correction)
    return "corrected"
