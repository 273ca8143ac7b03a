from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from polymimic_data.synthetic.episodes import ensure_synthetic_episodes
from polymimic_data.testing import S3TestServer


@pytest.fixture(scope="session")
def eva_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("eva")
    return ensure_synthetic_episodes(
        root, "eva_bimanual", episodes=6, frames=24, height=64, width=80, progress=False
    )


@pytest.fixture(scope="session")
def aria_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("aria")
    return ensure_synthetic_episodes(
        root, "aria_bimanual", episodes=3, frames=20, height=64, width=80, progress=False
    )


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3TestServer]:
    """A real S3-compatible server (moto's) on 127.0.0.1, for the whole session."""
    with S3TestServer.start() as server:
        yield server


@pytest.fixture
def s3_env(s3_server: S3TestServer, monkeypatch: pytest.MonkeyPatch) -> S3TestServer:
    """The server, with this test's AWS environment pointing at it."""
    for name, value in s3_server.env.items():
        monkeypatch.setenv(name, value)
    return s3_server


def _take(loader: Any, n: int, iterator: Any = None) -> tuple[list[Any], Any]:
    """`n` batches from `loader` (its `iterator`, else a new one), into its next pass at the end."""
    iterator = iter(loader) if iterator is None else iterator
    out = []
    for _ in range(n):
        try:
            out.append(next(iterator))
        except StopIteration:
            iterator = iter(loader)
            out.append(next(iterator))
    return out, iterator


@pytest.fixture
def take_batches() -> Callable[..., tuple[list[Any], Any]]:
    """take_batches(loader, n, iterator=None): n batches and the iterator, across passes."""
    return _take
