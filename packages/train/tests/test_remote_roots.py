"""`data.roots=[s3://bucket/eva]`: episodes on an S3-compatible store (moto's server on
127.0.0.1), mirrored into the run's cache before training; a store that cannot be read is
one config error naming data.roots, the URL and what to set, before anything trains."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from polymimic_data import resolve_episodes
from polymimic_data.synthetic import ensure_synthetic_episodes
from polymimic_data.testing import S3TestServer
from polymimic_train.run_config import ConfigError
from polymimic_train.run_episodes import _mirror_filters, mirror_dir, resolve_real_datasets

URL = "s3://bucket/eva"


@pytest.fixture(scope="module")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3TestServer]:
    """The server, with eight eva episodes and two aria ones under s3://bucket/eva."""
    data = tmp_path_factory.mktemp("episodes")
    small = {"height": 32, "width": 40, "progress": False}
    with S3TestServer.start() as server:
        eva = ensure_synthetic_episodes(data, "eva_bimanual", episodes=8, frames=20, **small)
        aria = ensure_synthetic_episodes(data, "aria_bimanual", episodes=2, frames=8, **small)
        for root in (eva, aria):
            server.upload(root, URL)
        yield server


@pytest.fixture
def s3_env(s3_server: S3TestServer, monkeypatch: pytest.MonkeyPatch) -> S3TestServer:
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)  # and so into the `train` subprocess
    return s3_server


def test_training_from_a_bucket_mirrors_the_episodes_it_needs_into_the_cache(
    s3_env: S3TestServer, tmp_path: Path, train_app
) -> None:
    run_dir = tmp_path / "run"
    result = train_app(
        tmp_path,
        run_dir,
        "data=episodes",
        f"data.roots=[{URL}]",
        "data.val_fraction=0.25",
        "data.image_size=[32,40]",
    )
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4
    mirror = mirror_dir(tmp_path / "cache", URL)
    assert {e.embodiment for e in resolve_episodes(mirror)} == {"eva_bimanual"}  # no aria
    assert len(resolve_episodes(mirror)) == 8


def test_a_bucket_that_does_not_exist_stops_the_run_before_anything(
    s3_env: S3TestServer, tmp_path: Path, train_app
) -> None:
    result = train_app(tmp_path, None, "data=episodes", "data.roots=[s3://no-such-bucket/eva]")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors[0].startswith(
        "error: data.roots: s3://no-such-bucket/eva: the bucket 'no-such-bucket' does not exist"
    ), errors
    assert "AWS_ENDPOINT_URL" in errors[0] and "Traceback" not in result.stderr
    assert not list((tmp_path / "runs").rglob("run.json"))


@pytest.mark.parametrize(
    ("case", "url", "expected"),
    [
        ("bucket", "s3://no-such-bucket/eva", "the bucket 'no-such-bucket' does not exist"),
        ("prefix", "s3://bucket/evaa", "nothing is stored under this prefix (bucket holds"),
        ("no_credentials", URL, "no credentials found"),
        ("refused_credentials", URL, "refused the credentials"),
    ],
)
def test_a_store_that_cannot_be_read_is_one_config_error_naming_what_to_set(
    case: str, url: str, expected: str, s3_env: S3TestServer, tmp_path: Path, monkeypatch
) -> None:
    data = {"roots": [url], "datasets": {"eva_bimanual": {"embodiment": "eva_bimanual"}}}
    if case == "no_credentials":
        monkeypatch.delenv("AWS_ACCESS_KEY_ID")
        monkeypatch.delenv("AWS_SECRET_ACCESS_KEY")
    s3_env.require_credentials(case == "refused_credentials")
    try:
        with pytest.raises(ConfigError) as error:
            resolve_real_datasets(data, tmp_path / "cache")
    finally:
        s3_env.require_credentials(False)
    message = str(error.value)
    assert message.startswith(f"data.roots: {url}: ") and expected in message, message
    to_set = {"no_credentials": "set AWS_ACCESS_KEY_ID", "refused_credentials": "AWS_SECRET"}
    assert to_set.get(case, "check the") in message


def test_the_mirror_takes_what_any_dataset_may_use_as_plain_filters() -> None:
    data = OmegaConf.create(
        {
            "filters": {"operator": ["ann", "bob"]},  # a ListConfig, which is no list
            "datasets": {
                "eva_bimanual": {"embodiment": "eva_bimanual", "filters": {"task": "fold"}},
                "auto": {"embodiment": "auto"},
            },
        }
    )
    assert _mirror_filters(data) == [
        {"operator": ["ann", "bob"], "task": "fold", "embodiment": "eva_bimanual"},
        {"operator": ["ann", "bob"]},
    ]
    assert type(_mirror_filters(data)[0]["operator"]) is list
