"""Episodes in an object store (s3://bucket/prefix, or any fsspec URL), mirrored locally.

Training reads frames at random, which an object store serves slowly; so episodes are
downloaded once into a local cache (only what is new or changed, each episode atomically)
and resolved there like any local root. The client libraries are an optional extra,
imported only here: `pip install 'polymimic-data[s3]'`.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from polymimic_data.store.atomic_files import write_json_atomic
from polymimic_data.store.episode_attrs import attrs_match
from polymimic_data.store.episode_store import INCOMPLETE_PREFIX, episode_hash

_MANIFESTS = ".remote-manifests"


def _filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            f"reading episodes from {url} needs the optional extra: "
            "pip install 'polymimic-data[s3]'"
        ) from exc
    return fsspec.core.url_to_fs(url, **dict(storage_options or {}))


def sync_remote_episodes(
    url: str,
    local_root: str | os.PathLike[str],
    *,
    filters: Mapping[str, Any] | None = None,
    episodes: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> Path:
    """Mirror the episodes under `url` that match into `local_root`; returns `local_root`.

    An episode is downloaded when it is missing locally or any of its files changed
    size; each lands atomically, so an interrupted sync leaves no half episode.
    """
    fs, prefix = _filesystem(url, storage_options)
    local = Path(local_root)
    manifests = local / _MANIFESTS
    wanted = set(episodes) if episodes is not None else None
    todo: list[tuple[str, str, dict[str, int]]] = []
    for remote in sorted(fs.ls(prefix, detail=False)):
        name = remote.rstrip("/").rsplit("/", 1)[-1]
        if name.startswith(".") or not fs.exists(f"{remote}/zarr.json"):
            continue
        h = episode_hash(name)
        if wanted is not None and h not in wanted:
            continue
        meta = json.loads(fs.cat_file(f"{remote}/zarr.json"))
        if meta.get("node_type") != "group" or not attrs_match(
            meta.get("attributes", {}), filters or {}
        ):
            continue
        files = {
            p[len(remote) :].lstrip("/"): int(d["size"])
            for p, d in fs.find(remote, detail=True).items()
        }
        manifest = manifests / f"{h}.json"
        if (
            (local / name).exists()
            and manifest.exists()
            and json.loads(manifest.read_text()) == files
        ):
            continue
        todo.append((remote, name, files))
    for remote, name, files in tqdm(
        todo, desc=f"downloading episodes from {url}", disable=not progress
    ):
        tmp = local / f"{INCOMPLETE_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
        try:
            fs.get(f"{remote}/", str(tmp), recursive=True)
            if (local / name).exists():
                shutil.rmtree(local / name)
            os.rename(tmp, local / name)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        write_json_atomic(manifests / f"{episode_hash(name)}.json", files)
    local.mkdir(parents=True, exist_ok=True)
    return local
