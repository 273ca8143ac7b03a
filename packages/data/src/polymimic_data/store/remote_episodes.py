"""Episodes in an object store (s3://bucket/prefix, or any fsspec URL), mirrored locally.

Training reads frames at random, which an object store serves slowly; so episodes are
downloaded once into a local mirror (only what is new or changed, each episode atomically)
and resolved there like any local root. The client libraries are an optional extra,
imported only here: `pip install 'polymimic-data[s3]'`.

For s3:// the client (s3fs on botocore) reads the usual AWS settings from the environment:
AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN, AWS_PROFILE), AWS_DEFAULT_REGION
and, for a server other than AWS (MinIO, Ceph, moto), AWS_ENDPOINT_URL, which botocore
honours itself (since 1.31).

One sync at a time writes a mirror: the others, on the same machine, wait on a file lock
in it and then find everything up to date. A sync that was killed leaves only hidden
folders (which the resolver skips), removed by the next sync.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm.auto import tqdm

from polymimic_data.store.atomic_files import exclusive, write_json_atomic
from polymimic_data.store.episode_attrs import attrs_match
from polymimic_data.store.episode_store import INCOMPLETE_PREFIX, episode_hash

log = logging.getLogger(__name__)

_MANIFESTS = ".remote-manifests"
_LOCK = ".sync.lock"
_GROUP = "zarr.json"
Files = dict[str, list[Any]]  # path inside the episode -> [size, etag or ""]


class RemoteRootError(Exception):
    """A remote root that cannot be read: its URL, what is wrong, and what to set."""

    def __init__(self, url: str, problem: str, fix: str) -> None:
        self.url, self.problem, self.fix = url, problem, fix
        super().__init__(f"{url}: {problem}; {fix}")


def is_remote_root(root: str | os.PathLike[str]) -> bool:
    """Whether a data root names a store by URL (`s3://...`, any `<protocol>://`)."""
    return "://" in str(root)


def mirror_folder_name(url: str) -> str:
    """A folder name for the local mirror of `url`: readable, and distinct per URL."""
    url = url.rstrip("/")
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", url.replace("://", "_")).strip("_.")[:80]
    return f"{readable}-{hashlib.sha256(url.encode()).hexdigest()[:10]}"


def _filesystem(url: str, storage_options: Mapping[str, Any] | None) -> tuple[Any, str]:
    try:
        import fsspec
    except ImportError as exc:
        raise ImportError(
            f"reading episodes from {url} needs the optional extra: "
            "pip install 'polymimic-data[s3]'"
        ) from exc
    # A fresh client per sync: a cached one would keep its listings and its credentials.
    options = {"skip_instance_cache": True, **(storage_options or {})}
    try:
        return fsspec.core.url_to_fs(url, **options)
    except ImportError as exc:  # fsspec names the protocol's package (s3fs)
        raise ImportError(
            f"reading episodes from {url} needs the optional extra "
            f"(pip install 'polymimic-data[s3]'): {exc}"
        ) from exc


def _endpoint() -> str:
    return os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "AWS"


def _explained(exc: Exception, prefix: str, url: str) -> Exception:
    """The client's error as a RemoteRootError saying what to set, where it is one we know."""
    kinds = {c.__name__ for c in type(exc).__mro__}  # botocore's, without importing it
    if kinds & {"NoCredentialsError", "PartialCredentialsError"}:
        return RemoteRootError(
            url,
            f"no credentials found ({exc})",
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE)",
        )
    if isinstance(exc, PermissionError):
        return RemoteRootError(
            url,
            f"{_endpoint()} refused the credentials ({exc})",
            "check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for "
            "temporary ones), and that they may list and read this bucket",
        )
    if isinstance(exc, FileNotFoundError):
        bucket = prefix.split("/", 1)[0]
        return RemoteRootError(
            url,
            f"the bucket {bucket!r} does not exist on {_endpoint()} ({exc})",
            "check the bucket in data.roots, and AWS_ENDPOINT_URL if it is on another server",
        )
    if kinds & {"EndpointConnectionError", "ConnectTimeoutError", "ConnectionError"}:
        return RemoteRootError(
            url,
            f"cannot connect to {_endpoint()} ({exc})",
            "check AWS_ENDPOINT_URL (for a server other than AWS) and the network",
        )
    return exc


def _nothing_under(fs: Any, prefix: str, url: str) -> RemoteRootError:
    parent = prefix.rstrip("/").rsplit("/", 1)[0] if "/" in prefix.strip("/") else prefix
    try:
        there = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in fs.ls(parent, detail=False))
    except Exception:  # the hint is a courtesy; the error stands without it
        there = []
    shown = f" ({parent} holds {there[:10]})" if there and parent != prefix else ""
    return RemoteRootError(
        url, f"nothing is stored under this prefix{shown}", "check the prefix in data.roots"
    )


def _list_episodes(fs: Any, prefix: str, url: str) -> dict[str, Files]:
    """Every folder directly under `prefix` with a group zarr.json: name -> its files."""
    try:
        found = fs.find(prefix, detail=True)
    except Exception as exc:
        raise _explained(exc, prefix, url) from exc
    if not found:
        raise _nothing_under(fs, prefix, url)
    base = prefix.strip("/")
    folders: dict[str, Files] = {}
    for path, info in found.items():
        parts = PurePosixPath(path.strip("/")).relative_to(base).parts
        if len(parts) < 2 or parts[0].startswith("."):
            continue
        if ".." in parts or any(p in ("", ".") for p in parts):
            raise RemoteRootError(url, f"refusing the object key {path!r}", "rename it")
        tag = str(info.get("ETag") or info.get("etag") or "")
        folders.setdefault(parts[0], {})["/".join(parts[1:])] = [int(info["size"]), tag]
    return {name: files for name, files in folders.items() if _GROUP in files}


def _manifest(local: Path, name: str) -> Path:
    return local / _MANIFESTS / f"{episode_hash(name)}.json"


def _up_to_date(local: Path, name: str, files: Files) -> bool:
    manifest = _manifest(local, name)
    if not ((local / name).is_dir() and manifest.exists()):
        return False
    recorded = json.loads(manifest.read_text())
    return recorded.get("name") == name and recorded.get("files") == files


def _filter_sets(
    filters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
) -> list[Mapping[str, Any]]:
    if filters is None:
        return [{}]
    return [filters] if isinstance(filters, Mapping) else list(filters)


def _to_download(
    fs: Any,
    prefix: str,
    remote: dict[str, Files],
    local: Path,
    filters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None,
    episodes: Sequence[str] | None,
) -> list[tuple[str, bytes]]:
    """(name, group zarr.json) of each wanted episode that is missing or changed locally."""
    wanted = set(episodes) if episodes is not None else None
    names = [
        n
        for n in sorted(remote)
        if (wanted is None or episode_hash(n) in wanted) and not _up_to_date(local, n, remote[n])
    ]
    if not names:
        return []
    paths = {n: f"{prefix.rstrip('/')}/{n}/{_GROUP}" for n in names}
    groups = fs.cat(list(paths.values()))  # concurrently, keyed by path
    out = []
    for name in names:
        raw = groups[paths[name]]
        meta = json.loads(raw)
        attrs = meta.get("attributes", {})
        if meta.get("node_type") == "group" and any(
            attrs_match(attrs, f) for f in _filter_sets(filters)
        ):
            out.append((name, raw))
    return out


def _swap_in(tmp: Path, final: Path) -> None:
    """`tmp` becomes `final`; an older `final` is moved aside first and then removed."""
    if not final.exists():
        os.rename(tmp, final)
        return
    old = final.parent / f"{INCOMPLETE_PREFIX}{final.name}-old-{uuid.uuid4().hex[:8]}"
    os.rename(final, old)
    os.rename(tmp, final)
    shutil.rmtree(old)


def _download(fs: Any, prefix: str, name: str, files: Files, group: bytes, local: Path) -> None:
    """One episode, into a hidden folder that is renamed into place once complete."""
    tmp = local / f"{INCOMPLETE_PREFIX}{name}-{uuid.uuid4().hex[:8]}"
    inner = [p for p in files if p != _GROUP]
    targets = [tmp / p for p in inner]
    try:
        for folder in {t.parent for t in targets} | {tmp}:
            folder.mkdir(parents=True, exist_ok=True)
        if inner:
            remote = f"{prefix.rstrip('/')}/{name}"
            fs.get([f"{remote}/{p}" for p in inner], [str(t) for t in targets])
        (tmp / _GROUP).write_bytes(group)  # read once already, to match the filters
        _swap_in(tmp, local / name)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    write_json_atomic(_manifest(local, name), {"name": name, "files": files})


def _remove_leftovers(local: Path) -> None:
    """What a killed sync left: hidden partial episodes and manifest temporaries."""
    for path in local.glob(f"{INCOMPLETE_PREFIX}*"):
        log.info("removing %s, left by an interrupted sync", path)
        shutil.rmtree(path, ignore_errors=True)
    for path in (local / _MANIFESTS).glob("*.tmp"):
        path.unlink(missing_ok=True)


def _prune(local: Path, remote: Mapping[str, Files]) -> None:
    """Mirrored episodes that are no longer in the store are removed from the mirror."""
    for manifest in sorted((local / _MANIFESTS).glob("*.json")):
        name = json.loads(manifest.read_text()).get("name")
        if name and name not in remote:
            log.info("removing %s: no longer in the store", local / name)
            shutil.rmtree(local / name, ignore_errors=True)
            manifest.unlink()


def sync_remote_episodes(
    url: str,
    local_root: str | os.PathLike[str],
    *,
    filters: Mapping[str, Any] | Sequence[Mapping[str, Any]] | None = None,
    episodes: Sequence[str] | None = None,
    storage_options: Mapping[str, Any] | None = None,
    progress: bool = True,
) -> Path:
    """Mirror the episodes under `url` that match into `local_root`; returns `local_root`.

    `filters`: attribute filters as resolve_episodes takes them, or a list of such
    (an episode matching any is mirrored); `episodes`: only these hashes. An episode is
    downloaded when it is missing locally or any of its files changed (size or ETag);
    each lands atomically, so an interrupted sync leaves no half episode. Episodes gone
    from the store are removed from the mirror. `local_root` is the mirror's own folder.
    Raises RemoteRootError for a bucket or prefix that is not there and for missing or
    refused credentials, naming what to set.
    """
    fs, prefix = _filesystem(url, storage_options)
    local = Path(local_root)
    local.mkdir(parents=True, exist_ok=True)
    with exclusive(local / _LOCK, f"waiting for another process syncing {local}"):
        _remove_leftovers(local)
        remote = _list_episodes(fs, prefix, url)
        _prune(local, remote)
        try:
            todo = _to_download(fs, prefix, remote, local, filters, episodes)
            for name, group in tqdm(
                todo, desc=f"downloading episodes from {url}", disable=not (progress and todo)
            ):
                _download(fs, prefix, name, remote[name], group, local)
        except PermissionError as exc:  # may list, yet not read
            raise _explained(exc, prefix, url) from exc
    return local
