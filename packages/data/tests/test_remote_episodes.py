"""Object-store episodes, against a real S3-compatible server (moto's, on 127.0.0.1).

Downloads are counted from the server's own request log.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.store.episode_store import INCOMPLETE_PREFIX
from polymimic_data.store.remote_episodes import RemoteRootError, sync_remote_episodes
from polymimic_data.testing import S3TestServer


def _new_bucket(server: S3TestServer, eva_root: Path) -> str:
    """s3://<a new bucket>/eva holding three of the eva episodes."""
    url = f"s3://t-{uuid.uuid4().hex[:12]}/eva"
    for episode in sorted(eva_root.glob("*.zarr"))[:3]:
        server.upload(episode, f"{url}/{episode.name}")
    return url


@pytest.fixture(scope="module")
def bucket(eva_root: Path, s3_server: S3TestServer) -> str:
    """One such bucket for the tests that only read it (uploads to moto take seconds)."""
    return _new_bucket(s3_server, eva_root)


def _reads(server: S3TestServer, url: str) -> list[str]:
    """Objects downloaded from `url`'s bucket so far."""
    bucket = url.removeprefix("s3://").split("/")[0]
    return [p for p in server.object_reads() if p.startswith(f"/{bucket}/")]


def test_sync_mirrors_matching_episodes_then_downloads_only_changes(
    eva_root: Path, s3_env: S3TestServer, tmp_path: Path
) -> None:
    bucket = _new_bucket(s3_env, eva_root)  # its own: this test changes it
    local = sync_remote_episodes(
        bucket, tmp_path / "mirror", filters={"embodiment": "eva_bimanual"}, progress=False
    )
    episodes = resolve_episodes(local)
    assert len(episodes) == 3
    sample = EpisodeDataset(episodes, embodiment="eva_bimanual", image_size=(32, 40))[5]
    assert sample["images.front_1"].shape == (3, 32, 40)
    fs, prefix = s3_env.filesystem(), bucket.removeprefix("s3://")
    assert len(_reads(s3_env, bucket)) == len(fs.find(prefix))  # each object once

    before = len(_reads(s3_env, bucket))
    sync_remote_episodes(bucket, local, progress=False)
    assert len(_reads(s3_env, bucket)) == before  # up to date: a listing, no download

    changed = fs.find(f"{prefix}/{episodes[1].path.name}/left.gripper/c")[0]
    data = bytearray(fs.cat_file(changed))
    data[-1] ^= 0xFF  # the same size, other bytes: the ETag tells
    fs.pipe_file(changed, bytes(data))
    sync_remote_episodes(bucket, local, progress=False)
    again = _reads(s3_env, bucket)[before:]
    assert again and all(episodes[1].path.name in p for p in again)

    fs.rm(f"{prefix}/{episodes[0].path.name}", recursive=True)
    sync_remote_episodes(bucket, local, progress=False)
    assert [e.hash for e in resolve_episodes(local)] == [e.hash for e in episodes[1:]]


def test_filters_and_episode_lists_limit_what_is_downloaded(
    bucket: str, s3_env: S3TestServer, tmp_path: Path
) -> None:
    local = sync_remote_episodes(
        bucket, tmp_path / "m", filters={"embodiment": "aria_bimanual"}, progress=False
    )
    assert not list(local.glob("*.zarr"))
    either = [{"embodiment": "aria_bimanual"}, {"embodiment": "eva_bimanual"}]  # any of
    sync_remote_episodes(bucket, tmp_path / "any", filters=either, progress=False)
    assert len(resolve_episodes(tmp_path / "any")) == 3
    name = sorted(p.name for p in (tmp_path / "any").glob("*.zarr"))[0].removesuffix(".zarr")
    sync_remote_episodes(bucket, local, episodes=[name], progress=False)
    assert [e.hash for e in resolve_episodes(local)] == [name]


KILLED_MID_EPISODE = """
import os, signal, sys
import s3fs
from polymimic_data.store.remote_episodes import sync_remote_episodes
url, local, victim = sys.argv[1:]
get_file, seen = s3fs.S3FileSystem._get_file, []
async def dying(self, rpath, lpath, **kwargs):  # SIGKILL on the victim's third file
    if victim in rpath:
        seen.append(rpath)
        if len(seen) == 3:
            os.kill(os.getpid(), signal.SIGKILL)
    return await get_file(self, rpath, lpath, **kwargs)
s3fs.S3FileSystem._get_file = dying
sync_remote_episodes(url, local, progress=False)
"""


def test_a_killed_sync_leaves_no_half_episode_and_the_next_finishes(
    bucket: str, s3_env: S3TestServer, tmp_path: Path
) -> None:
    names = sorted(p.rsplit("/", 1)[-1] for p in s3_env.filesystem().ls(bucket[5:]))
    local = tmp_path / "mirror"
    command = [sys.executable, "-c", KILLED_MID_EPISODE, bucket, str(local), names[1]]
    killed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert list(local.glob(f"{INCOMPLETE_PREFIX}{names[1]}-*"))  # what the kill left
    assert [e.path.name for e in resolve_episodes(local)] == names[:1]  # and it is skipped

    before = len(_reads(s3_env, bucket))
    sync_remote_episodes(bucket, local, progress=False)
    assert not list(local.glob(f"{INCOMPLETE_PREFIX}*"))
    assert [e.path.name for e in resolve_episodes(local)] == names
    assert not [p for p in _reads(s3_env, bucket)[before:] if names[0] in p]  # not again


TWO_SYNCS = """
import json, logging, sys, time
from pathlib import Path
import s3fs  # imported before the second says it is ready: that takes a while
import polymimic_data.store.remote_episodes as remote
from polymimic_data import resolve_episodes
logging.basicConfig(level=logging.INFO)
url, local, role, ready = sys.argv[1:]
if role == "first":  # holds the lock until the second is about to sync, then goes on slowly
    swap_in = remote._swap_in
    def slow_swap_in(tmp, final):
        while not Path(ready).exists():
            time.sleep(0.01)
        time.sleep(0.3)
        swap_in(tmp, final)
    remote._swap_in = slow_swap_in
else:
    Path(ready).touch()
remote.sync_remote_episodes(url, local, progress=False)
print(json.dumps([e.hash for e in resolve_episodes(local)]))
"""


def test_two_processes_syncing_one_mirror_download_each_object_once(
    bucket: str, s3_env: S3TestServer, tmp_path: Path
) -> None:
    local, ready = tmp_path / "mirror", tmp_path / "second-is-ready"
    before = len(_reads(s3_env, bucket))

    def start(role: str) -> subprocess.Popen[str]:
        command = [sys.executable, "-c", TWO_SYNCS, bucket, str(local), role, str(ready)]
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    syncs = [start("first")]
    deadline = time.monotonic() + 60
    while not list(local.glob(f"{INCOMPLETE_PREFIX}*")) and time.monotonic() < deadline:
        time.sleep(0.02)  # the first holds the lock, an episode downloaded, not yet in place
    syncs.append(start("second"))
    (out1, err1), (out2, err2) = (p.communicate(timeout=120) for p in syncs)
    assert [p.returncode for p in syncs] == [0, 0], err1[-2000:] + err2[-2000:]
    assert "waiting for another process syncing" in err2
    assert json.loads(out1) == json.loads(out2) and len(json.loads(out1)) == 3
    reads = Counter(_reads(s3_env, bucket)[before:])
    stored = s3_env.filesystem().find(bucket.removeprefix("s3://"))
    assert sorted(reads) == sorted(f"/{p}" for p in stored) and set(reads.values()) == {1}


@pytest.mark.parametrize("case", ["bucket", "prefix", "no_credentials", "refused_credentials"])
def test_a_store_that_cannot_be_read_is_one_error_saying_what_to_set(
    case: str, bucket: str, s3_env: S3TestServer, tmp_path: Path, monkeypatch
) -> None:
    url, expected = {
        "bucket": ("s3://no-such-bucket/eva", "the bucket 'no-such-bucket' does not exist"),
        "prefix": (f"{bucket}-typo", "nothing is stored under this prefix ("),
        "no_credentials": (bucket, "no credentials found"),
        "refused_credentials": (bucket, "refused the credentials"),
    }[case]
    fix = {"no_credentials": "set AWS_ACCESS_KEY_ID", "refused_credentials": "check AWS_ACCESS"}
    if case == "no_credentials":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    s3_env.require_credentials(case == "refused_credentials")
    try:
        with pytest.raises(RemoteRootError) as error:
            sync_remote_episodes(url, tmp_path / "m", progress=False)
    finally:
        s3_env.require_credentials(False)
    assert str(error.value).startswith(f"{url}: ") and expected in error.value.problem
    assert fix.get(case, "check the") in error.value.fix
    assert not list((tmp_path / "m").glob("*.zarr"))


def test_the_client_is_needed_only_when_used() -> None:
    code = (
        "import sys; sys.modules['fsspec'] = None\n"  # as if the extra were not installed
        "import polymimic_data.store.remote_episodes as r\n"
        "try:\n    r.sync_remote_episodes('s3://b/p', '/tmp/x')\n"
        "except ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert "pip install 'polymimic-data[s3]'" in out.stdout
