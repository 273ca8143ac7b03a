"""Resolving episodes under local roots: found, filtered, validated and cached.

The embodiments the episodes declare (see embodiments.declared) are registered here, and
only here: once per distinct declaration among the episodes resolved.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from polymimic_data.embodiments.declared import (
    DECLARATION,
    DeclarationError,
    declaration_key,
    declare,
)
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.store.atomic_files import file_identity, write_json_atomic
from polymimic_data.store.episode_attrs import attrs_match, read_group_attrs
from polymimic_data.store.episode_store import episode_hash

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EpisodeInfo:
    """One resolved episode: its folder, hash, embodiment, frame count and attributes."""

    path: Path
    hash: str
    embodiment: str
    total_frames: int
    attrs: dict[str, Any] = field(compare=False, repr=False)


_SHOWN_PROBLEMS = 50


class EpisodeValidationError(ValueError):
    """Raised with every bad episode and why, so one run shows them all."""

    def __init__(self, problems: list[tuple[str, str]]) -> None:
        self.problems = problems
        shown = problems[:_SHOWN_PROBLEMS]
        lines = "\n".join(f"  {where}: {why}" for where, why in shown)
        more = len(problems) - len(shown)
        tail = f"\n  ... and {more} more (`polymimic-data validate` lists all)" if more else ""
        super().__init__(f"{len(problems)} bad episode(s):\n{lines}{tail}")

    def full_report(self) -> str:
        lines = "\n".join(f"  {where}: {why}" for where, why in self.problems)
        return f"{len(self.problems)} bad episode(s):\n{lines}"


def _info(path: Path, attrs: dict[str, Any]) -> EpisodeInfo:
    # `features` describes every key at length; the index has no use for it, and it would
    # be copied into every worker for every episode.
    kept = {k: v for k, v in attrs.items() if k != "features"}
    return EpisodeInfo(
        path, episode_hash(path), str(attrs["embodiment"]).lower(), attrs["total_frames"], kept
    )


class _Declarations:
    """Registers each distinct embodiment declaration met once: the one place that does.

    Remembers the outcome per declaration (its canonical text), so ten thousand episodes
    of one imported dataset register, and compare, their embodiment once.
    """

    def __init__(self) -> None:
        self._outcome: dict[str, str | None] = {}  # declaration -> why it failed, or None

    def register(self, where: str, attrs: Mapping[str, Any]) -> str | None:
        """Why the episode's declaration cannot be registered, or None (also if it has none)."""
        key = declaration_key(attrs)
        if key is None:
            return None
        if key not in self._outcome:
            try:
                declare(attrs[DECLARATION], source=where)
                self._outcome[key] = None
            except DeclarationError as exc:
                self._outcome[key] = str(exc)
        return self._outcome[key]


def _check_episode(path: Path, attrs: dict[str, Any], declarations: _Declarations) -> str | None:
    """Why the episode cannot be trained on, or None."""
    if "embodiment" not in attrs:
        return "attribute 'embodiment' is missing"
    why = declarations.register(str(path), attrs)
    if why:
        return why
    try:
        spec = get_embodiment(str(attrs["embodiment"]))
    except KeyError as exc:
        return str(exc.args[0])
    frames = attrs.get("total_frames")
    if not isinstance(frames, int) or frames <= 0:
        return f"total_frames must be a positive integer, got {frames!r}"
    missing = [k for k in spec.numeric_keys if not (path / k / "zarr.json").exists()]
    if missing:
        return f"keys missing for {spec.name}: {missing}"
    return None


EPISODE = "episode"
EMPTY_FOLDER = "empty folder (an emptied episode?)"
NO_GROUP_METADATA = "zarr arrays without the group's zarr.json (an episode with lost metadata?)"
STRAY_FILE = "a file where episodes or folders of them were expected"


def _is_array(path: str) -> bool:
    try:
        with open(os.path.join(path, "zarr.json"), "rb") as f:
            return json.load(f).get("node_type") == "array"
    except (OSError, ValueError):
        return False


def _entries(folder: str) -> list[os.DirEntry[str]]:
    with os.scandir(folder) as it:
        return sorted((e for e in it if not e.name.startswith(".")), key=lambda e: e.name)


def _walk(entries: list[os.DirEntry[str]]) -> Iterator[tuple[str, str]]:
    """(path, kind) for a folder's `entries`, depth-first, sorted.

    Kinds: EPISODE (a folder with a zarr.json), EMPTY_FOLDER, NO_GROUP_METADATA,
    STRAY_FILE; other folders are searched. Hidden names (unfinished writes) are skipped.
    """
    for entry in entries:
        if not entry.is_dir():
            yield entry.path, STRAY_FILE
        elif os.path.exists(os.path.join(entry.path, "zarr.json")):
            yield entry.path, EPISODE
        else:
            yield from _walk_folder(entry.path)


def _walk_folder(folder: str) -> Iterator[tuple[str, str]]:
    children = _entries(folder)  # scanned once, searched from here
    if not children:
        yield folder, EMPTY_FOLDER
        return
    first_node = next(
        (c.path for c in children if os.path.exists(os.path.join(c.path, "zarr.json"))), None
    )
    if first_node is not None and _is_array(first_node):
        yield folder, NO_GROUP_METADATA
        return
    yield from _walk(children)


def _walk_root(root: str) -> Iterator[tuple[str, str]]:
    if os.path.exists(os.path.join(root, "zarr.json")) and not _is_array(root):
        yield root, EPISODE
        return
    yield from _walk(_entries(root))


def walk_root(root: str | os.PathLike[str]) -> Iterator[tuple[Path, str]]:
    """Every entry under `root` that is an episode or should have been: (path, kind).

    A root that is itself an episode is its only entry.
    """
    for path, kind in _walk_root(str(root)):
        yield Path(path), kind


def episode_dirs(root: Path) -> Iterable[Path]:
    """Every episode folder under `root` (hidden ones, e.g. unfinished writes, skipped)."""
    return (path for path, kind in walk_root(root) if kind == EPISODE)


def job_cache_dir(base: str | os.PathLike[str]) -> Path:
    """`base`, or a per-job folder under it inside a SLURM job, so concurrent jobs never clash."""
    job = os.environ.get("SLURM_JOB_ID")
    return Path(base) / f"slurm-{job}" if job else Path(base)


def _fingerprint(roots: Sequence[Path]) -> list[list[Any]]:
    """Each candidate episode with its folder's mtime and its group metadata's identity.

    The identity (store.file_identity) holds the change time and inode too: a `zarr.json`
    copied or rewritten with its mtime restored (`cp -p`, `rsync -t`) still changes it.
    """
    out = []
    for root in roots:  # paths as strings: pathlib would be most of a cached resolve's time
        for path, kind in _walk_root(str(root)):
            if kind == EPISODE:
                meta = file_identity(os.path.join(path, "zarr.json"))
                out.append([path, os.stat(path).st_mtime_ns, *meta])
    return out


def _cache_path(
    cache_dir: Path, roots: Sequence[Path], filters: Mapping[str, Any], hashes: Sequence[str] | None
) -> Path:
    key = json.dumps(
        {"roots": [str(r.resolve()) for r in roots], "filters": filters, "episodes": hashes},
        sort_keys=True,
        default=str,
    )
    return cache_dir / f"episode_index-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def _root_list(roots: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    root_list = [Path(r) for r in ([roots] if isinstance(roots, str | os.PathLike) else roots)]
    for root in root_list:
        if not root.is_dir():
            raise FileNotFoundError(f"data root {root} does not exist or is not a folder")
    return root_list


@dataclass
class EpisodeScan:
    """What a walk over data roots found.

    `problems`: (where, why) for every episode that cannot be trained on, or folder that
    should have been one; `warnings`: (where, why) for what is out of place but harmless.
    """

    episodes: list[EpisodeInfo]
    problems: list[tuple[str, str]]
    warnings: list[tuple[str, str]]


def scan_episodes(
    roots: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    filters: Mapping[str, Any] | None = None,
    episodes: Sequence[str] | None = None,
) -> EpisodeScan:
    """Every episode under `roots` that matches, and everything wrong on the way.

    Never raises for bad episodes (resolve_episodes does); see it for the filters.
    """
    filters = dict(filters or {})
    wanted = set(episodes) if episodes is not None else None
    scan = EpisodeScan([], [], [])
    if episodes is not None:
        duplicated = sorted({h for h in episodes if list(episodes).count(h) > 1})
        scan.problems += [(h, "listed more than once") for h in duplicated]
    declarations = _Declarations()
    seen: dict[str, Path] = {}
    met: set[str] = set()  # hashes of every entry looked at, good or bad
    for root in _root_list(roots):
        for path, kind in walk_root(root):
            h = episode_hash(path)
            if wanted is not None and h not in wanted:
                continue
            met.add(h)
            if kind == STRAY_FILE:
                scan.warnings.append((str(path), kind))
                continue
            if kind != EPISODE:
                scan.problems.append((str(path), kind))
                continue
            try:
                attrs = read_group_attrs(path)
            except (OSError, ValueError) as exc:
                scan.problems.append((str(path), f"cannot read group metadata ({exc})"))
                continue
            if not attrs_match(attrs, filters):
                continue
            why = _check_episode(path, attrs, declarations)
            if why:
                scan.problems.append((str(path), why))
            elif h in seen:
                scan.problems.append((str(path), f"duplicate episode hash, also at {seen[h]}"))
            else:
                seen[h] = path
                scan.episodes.append(_info(path, attrs))
    if wanted is not None:
        missing = sorted(wanted - met)
        scan.problems += [(h, "listed but not found under the roots") for h in missing]
    return scan


def _log_resolved(
    found: Sequence[EpisodeInfo], roots: Sequence[Path], filters: Mapping[str, Any], how: str
) -> None:
    """One line per resolve (a run's log shows how often it resolves, and what)."""
    where = ", ".join(str(r) for r in roots)
    log.info("resolved %d episodes under %s (%s, %s)", len(found), where, filters or "all", how)


def resolve_episodes(
    roots: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    embodiment: str | Sequence[str] | None = None,
    filters: Mapping[str, Any] | None = None,
    episodes: Sequence[str] | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
) -> list[EpisodeInfo]:
    """Find, filter and validate the episodes under `roots`.

    `filters` maps attribute names (`embodiment`, `task`, `operator`, `lab`, any other) to
    a value or a list of values; `episodes` lists exact hashes instead, all of which must be
    present. Raises EpisodeValidationError listing every bad episode (and emptied episode
    folder) and why; stray files are logged as warnings. Half-written episodes (left by an
    interrupted atomic write) are never picked up. With `cache_dir`, the result is cached,
    keyed by roots, filters and the episodes' modification times.
    """
    root_list = _root_list(roots)
    filters = dict(filters or {})
    if embodiment is not None:
        filters["embodiment"] = embodiment
    cache = _cache_path(Path(cache_dir), root_list, filters, episodes) if cache_dir else None
    fingerprint = _fingerprint(root_list) if cache else None
    if cache is not None and cache.exists():
        cached = json.loads(cache.read_text())
        if cached["fingerprint"] == fingerprint:
            found, problems = [], []
            declarations = _Declarations()
            for e in cached["episodes"]:
                why = declarations.register(e["path"], e["attrs"])
                if why:
                    problems.append((e["path"], why))
                found.append(
                    EpisodeInfo(
                        Path(e["path"]), e["hash"], e["embodiment"], e["total_frames"], e["attrs"]
                    )
                )
            if problems:
                raise EpisodeValidationError(problems)
            _log_resolved(found, root_list, filters, "cached")
            return found
    scan = scan_episodes(root_list, filters=filters, episodes=episodes)
    for where, why in scan.warnings:
        log.warning("%s: %s; ignored", where, why)
    if scan.problems:
        raise EpisodeValidationError(scan.problems)
    if not scan.episodes:
        raise FileNotFoundError(
            f"no episodes found under {[str(r) for r in root_list]}"
            + (f" matching {filters}" if filters else "")
        )
    if cache is not None:
        write_json_atomic(
            cache,
            {
                "fingerprint": fingerprint,
                "episodes": [
                    {
                        "path": str(e.path),
                        "hash": e.hash,
                        "embodiment": e.embodiment,
                        "total_frames": e.total_frames,
                        "attrs": e.attrs,
                    }
                    for e in scan.episodes
                ],
            },
        )
    _log_resolved(scan.episodes, root_list, filters, "scanned")
    return scan.episodes
