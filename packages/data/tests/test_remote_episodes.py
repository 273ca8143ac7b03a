"""Object-store episodes, through fsspec's in-memory filesystem (the same API as s3fs)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fsspec
import pytest

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.store.remote_episodes import sync_remote_episodes


@pytest.fixture
def bucket(eva_root: Path, request: pytest.FixtureRequest) -> str:
    url = f"memory://bucket-{request.node.name}/episodes"
    fs = fsspec.filesystem("memory")
    for episode in sorted(eva_root.glob("*.zarr"))[:3]:
        fs.put(str(episode), f"{url.removeprefix('memory://')}/{episode.name}", recursive=True)
    yield url
    fs.rm(url.removeprefix("memory://").split("/")[0], recursive=True)


def test_sync_mirrors_matching_episodes_then_downloads_only_changes(
    bucket: str, tmp_path: Path, monkeypatch
) -> None:
    local = sync_remote_episodes(
        bucket, tmp_path / "mirror", filters={"embodiment": "eva_bimanual"}, progress=False
    )
    episodes = resolve_episodes(local)
    assert len(episodes) == 3
    sample = EpisodeDataset(episodes, embodiment="eva_bimanual", image_size=(32, 40))[5]
    assert sample["images.front_1"].shape == (3, 32, 40)

    fs = fsspec.filesystem("memory")
    downloads: list[str] = []
    original = type(fs).get

    def counting_get(self, rpath, lpath, **kwargs):
        downloads.append(rpath)
        return original(self, rpath, lpath, **kwargs)

    monkeypatch.setattr(type(fs), "get", counting_get)
    sync_remote_episodes(bucket, local, progress=False)
    assert downloads == []
    array = f"{bucket.removeprefix('memory://')}/{episodes[1].path.name}/left.gripper/c"
    changed = fs.find(array)[0]
    fs.pipe_file(changed, fs.cat_file(changed) + b"\0")
    sync_remote_episodes(bucket, local, progress=False)
    assert len(downloads) == 1 and episodes[1].path.name in downloads[0]


def test_filters_and_episode_lists_limit_what_is_downloaded(bucket: str, tmp_path: Path) -> None:
    local = sync_remote_episodes(
        bucket, tmp_path / "m", filters={"embodiment": "aria_bimanual"}, progress=False
    )
    assert not list(local.glob("*.zarr"))
    first = sorted(fsspec.filesystem("memory").ls(bucket.removeprefix("memory://"), detail=False))[
        0
    ]
    name = first.rsplit("/", 1)[-1].removesuffix(".zarr")
    sync_remote_episodes(bucket, local, episodes=[name], progress=False)
    assert [e.hash for e in resolve_episodes(local)] == [name]


def test_the_client_is_needed_only_when_used() -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"  # as if the extra were not installed
        "import polymimic_data.store.remote_episodes as r\n"
        "try:\n    r.sync_remote_episodes('s3://b/p', '/tmp/x')\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'polymimic-data[s3]'" in out.stdout
