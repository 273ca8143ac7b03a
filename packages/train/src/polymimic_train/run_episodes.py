"""The episodes of a run's datasets, resolved once per dataset and handed to every user.

The checks (a dataset with no episodes is a config error), the embodiments that episodes
declare (`embodiment: auto`, `cameras: auto`) and the data module all work from the one
result, so a run stats each episode once, not once per question asked of it. Named
splits (`data.splits`) are filters applied in memory to a dataset's episodes. A root
given by URL (`s3://bucket/prefix`) is first mirrored into the cache, one process per
node copying (see polymimic_data.store.sync_remote_episodes), and resolved there.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

from polymimic_data import EpisodeInfo, registered_embodiments, resolve_episodes
from polymimic_data.embodiments import (
    dataset_cameras,
    declared_cameras,
    declared_names,
    get_embodiment,
    lacking_cameras,
)
from polymimic_data.episodes import job_cache_dir
from polymimic_data.samples import lacking_attribute
from polymimic_data.store import (
    RemoteRootError,
    attrs_match,
    is_remote_root,
    mirror_folder_name,
    sync_remote_episodes,
)
from polymimic_train.run_config import ConfigError

AUTO = "auto"
DatasetEpisodes = dict[str, list[EpisodeInfo]]


def recorded_cameras(data: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The cameras a run reads, where its data config alone names them; else None.

    `data`: a composed train config's `data`. One dataset: the cameras it reads (its
    `cameras`, or polymimic-data's default where it names none), which its episodes must
    hold: those a simulator records for it. None where the episodes' own will do: several
    datasets (each task records its own), or `cameras: auto`. ConfigError for cameras given
    as one string.
    """
    datasets = dict(data.get("datasets") or {})
    if len(datasets) != 1:
        return None
    ((name, spec),) = datasets.items()
    if spec.get("cameras") == AUTO:
        return None
    try:
        return dataset_cameras(spec)
    except ValueError as exc:
        raise ConfigError(f"data.datasets.{name}.{exc}") from None


def index_cache(cache_dir: str | Path) -> Path:
    """Where resolved episode lists are cached (per SLURM job inside one)."""
    return job_cache_dir(Path(cache_dir) / "episode_index")


def _filters(data: Mapping[str, Any], spec: Mapping[str, Any]) -> dict[str, Any]:
    merged = {**(data.get("filters") or {}), **(spec.get("filters") or {})}
    # Hydra's ListConfig is no list: attrs_match would take it for one value, matching nothing
    return {
        str(k): list(v) if isinstance(v, Sequence) and not isinstance(v, str) else v
        for k, v in merged.items()
    }


def mirror_dir(cache_dir: str | Path, url: str) -> Path:
    """Where a remote root is mirrored: per SLURM job, per node (`cache_dir` is the node's)."""
    return job_cache_dir(Path(cache_dir) / "remote") / mirror_folder_name(url)


def _mirror_filters(data: Mapping[str, Any]) -> list[dict[str, Any]]:
    """What any dataset may use: its filters, with its embodiment unless that is `auto`."""
    out = []
    for spec in (data.get("datasets") or {}).values():
        wanted = str(spec.get("embodiment")).lower()
        out.append(_filters(data, spec) | ({} if wanted == AUTO else {"embodiment": wanted}))
    return out


def _mirrored(url: str, data: Mapping[str, Any], cache_dir: str | Path) -> Path:
    """The local mirror of a remote root, brought up to date (one error if it cannot be)."""
    try:
        return sync_remote_episodes(url, mirror_dir(cache_dir, url), filters=_mirror_filters(data))
    except RemoteRootError as exc:
        raise ConfigError(f"data.roots: {exc}") from exc
    except ImportError as exc:
        raise ConfigError(
            f"data.roots: {url} needs the s3 extra: pip install 'polymimic-train[s3]' ({exc})"
        ) from exc


def _real_roots(
    data: Mapping[str, Any], unknown: Sequence[str], cache_dir: str | Path
) -> list[Path]:
    given = [str(r) for r in data.get("roots") or []]
    if not given:
        needs = (
            f"; datasets {list(unknown)} name embodiments declared by episodes" if unknown else ""
        )
        raise ConfigError(
            "data.roots: set it to folders of episodes, e.g. 'data.roots=[/data/eva]', "
            f"or to a store's prefix, e.g. 'data.roots=[s3://bucket/eva]'{needs}"
        )
    roots = []
    for root in given:
        if is_remote_root(root):
            roots.append(_mirrored(root, data, cache_dir))
        elif not Path(root).is_dir():
            raise ConfigError(f"data.roots: {root} does not exist or is not a folder")
        else:
            roots.append(Path(root))
    return roots


def _name_auto(name: str, spec: MutableMapping[str, Any], found: list[EpisodeInfo]) -> str:
    """`embodiment: auto` becomes the one embodiment the episodes declare; its new name."""
    declared = declared_names(e.attrs for e in found)
    if len(declared) != 1:
        raise ConfigError(
            f"data.datasets.{name}.embodiment: auto needs the episodes under data.roots to "
            f"declare exactly one embodiment; they declare {declared}. "
            f"Name one: data.datasets.{name}.embodiment=<name>"
        )
    spec["embodiment"] = declared[0]
    return declared[0]  # a dataset is named after its embodiment


def _cameras_auto(name: str, found: list[EpisodeInfo]) -> list[str] | None:
    """`cameras: auto` for declared episodes: the cameras every one of them was recorded with.

    Not the embodiment's: a declared embodiment has every camera any of its episodes
    declared in this process, which other folders may have added. None where no episode
    declares its cameras (a built-in embodiment: all of its own); ConfigError where some
    hold cameras and all of them share none.
    """
    held = [(e.path, c) for e in found if (c := declared_cameras(e.attrs)) is not None]
    if not held:
        return None
    shared = [c for c in held[0][1] if all(c in cameras for _, cameras in held)]
    if not shared and any(cameras for _, cameras in held):
        sets = Counter(cameras for _, cameras in held)
        example = {cameras: path for path, cameras in reversed(held)}  # the first of each
        listed = "; ".join(
            f"{count} hold {list(cameras)}, e.g. {example[cameras]}"
            for cameras, count in sets.most_common(4)
        ) + (f"; and {len(sets) - 4} more sets" if len(sets) > 4 else "")
        raise ConfigError(
            f"data.datasets.{name}.cameras: auto takes the cameras all its episodes hold, and "
            f"they share none ({listed}). Filter the episodes (data.datasets.{name}.filters) "
            "or give each recording its own dataset"
        )
    return shared


def _check_held(name: str, spec: Mapping[str, Any], found: list[EpisodeInfo]) -> None:
    """ConfigError where a dataset's declared episodes were recorded without its cameras."""
    try:
        cameras = dataset_cameras(spec)
    except ValueError:
        return  # check_config names it
    lacking = lacking_cameras(found, cameras)
    if lacking:
        raise ConfigError(
            f"data.datasets.{name}.cameras: {list(cameras)}, but {lacking}. Name cameras they "
            f"hold (cameras: auto takes those all of them hold), or filter the episodes"
        )


def _check_balance(name: str, data: Mapping[str, Any], found: list[EpisodeInfo]) -> None:
    """ConfigError where episodes lack the attribute `data.balance_by` groups them by."""
    attribute = data.get("balance_by")
    missing = attribute and lacking_attribute(found, attribute)
    if missing:
        raise ConfigError(f"data.balance_by of data.datasets.{name}: {missing}")


def _resolve(roots: list[Path], filters: Mapping[str, Any], cache: Path) -> list[EpisodeInfo]:
    try:
        return resolve_episodes(roots, filters=filters, cache_dir=cache)
    except FileNotFoundError:
        return []  # said below, naming the dataset


def resolve_real_datasets(data: MutableMapping[str, Any], cache_dir: str | Path) -> DatasetEpisodes:
    """Each dataset's episodes under `data.roots`, one resolve per dataset.

    In place, `embodiment: auto` becomes the embodiment the episodes declare (and the
    dataset is renamed after it) and `cameras: auto` the cameras they all hold (a built-in
    embodiment's: all of its cameras). A dataset whose
    embodiment nothing declares is left for check_config to name.
    """
    cache = index_cache(cache_dir)
    datasets = data.get("datasets") or {}
    known = set(registered_embodiments())
    unknown = [n for n, s in datasets.items() if str(s.get("embodiment")).lower() not in known]
    roots = _real_roots(data, unknown, cache_dir)
    out: DatasetEpisodes = {}
    renamed: dict[str, Any] = {}
    for name, spec in datasets.items():
        wanted = str(spec.get("embodiment")).lower()
        filters = _filters(data, spec)
        if wanted in known:
            found = _resolve(roots, {**filters, "embodiment": wanted}, cache)
        else:  # declared by the episodes, or auto: resolved unfiltered by it
            found = _resolve(roots, filters, cache)
            if wanted == AUTO:
                wanted = name = _name_auto(name, spec, found)
            found = [e for e in found if e.embodiment == wanted]
        registered = wanted in set(registered_embodiments())  # now, with the declared ones
        if spec.get("cameras") == AUTO and registered:
            shared = _cameras_auto(name, found)
            spec["cameras"] = list(get_embodiment(wanted).cameras) if shared is None else shared
        else:
            _check_held(name, spec, found)
        if not found and registered:
            given = [str(r) for r in data.get("roots") or []]  # URLs as given, not mirrors
            raise ConfigError(
                f"data.datasets.{name}: no episodes of {wanted} under data.roots "
                f"{given} matching {filters | {'embodiment': wanted}}; "
                "`polymimic-data inspect ROOT` lists what is there"
            )
        _check_balance(name, data, found)
        renamed[name], out[name] = spec, found
    data["datasets"] = renamed
    return out


def resolve_synthetic_datasets(
    data: Mapping[str, Any], data_root: str | Path, cache_dir: str | Path
) -> DatasetEpisodes:
    """Each dataset's generated episodes (made once under `data_root`), one resolve each."""
    from polymimic_data.synthetic import ensure_synthetic_episodes

    out: DatasetEpisodes = {}
    for name, spec in data["datasets"].items():
        root = ensure_synthetic_episodes(
            Path(data_root) / "synthetic", str(spec["embodiment"]), **data["synthetic"]
        )
        filters = _filters(data, spec) | {"embodiment": spec["embodiment"]}
        out[name] = resolve_episodes([root], filters=filters, cache_dir=index_cache(cache_dir))
    return out


def resolve_datasets(
    data: MutableMapping[str, Any], *, data_root: str | Path, cache_dir: str | Path
) -> DatasetEpisodes:
    """Each dataset's episodes: generated ones for `data.synthetic`, else under data.roots."""
    if data.get("synthetic"):
        return resolve_synthetic_datasets(data, data_root, cache_dir)
    return resolve_real_datasets(data, cache_dir)


def split_filtered(
    name: str, episodes: Sequence[EpisodeInfo], splits: Mapping[str, Any]
) -> tuple[list[EpisodeInfo], list[EpisodeInfo]]:
    """Train and validation episodes by the named splits' filters (disjoint, none empty)."""
    train, val = (
        [e for e in episodes if attrs_match(e.attrs, dict(splits[part]))]
        for part in ("train", "val")
    )
    for part, chosen in (("train", train), ("val", val)):
        if not chosen:  # as resolve_episodes says of filters that match nothing
            raise FileNotFoundError(
                f"data.splits.{part}: no episodes of dataset {name} match {dict(splits[part])}"
            )
    shared = {e.hash for e in train} & {e.hash for e in val}
    if shared:
        raise ValueError(
            f"data.splits: {len(shared)} episodes are in both train and val, "
            f"e.g. {sorted(shared)[:3]}; make the split filters disjoint"
        )
    return train, val
