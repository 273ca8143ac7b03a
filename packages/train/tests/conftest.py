"""`train_app` and `train_process`: the `train` command in a subprocess, as a user runs it,
at a tiny size (4 steps of a 2-layer HPT); overrides replace these settings by key."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SMALL = {
    "trainer.max_steps": "4",
    "trainer.val_check_interval": "2",
    "trainer.log_every_n_steps": "2",
    "trainer.enable_progress_bar": "false",
    "data.num_workers": "0",
    "data.batch_size": "4",
    "data.norm.num_samples": "50",
    "model.d_model": "32",
    "model.num_heads": "2",
    "model.image_tokens": "2",
    "callbacks.trajectory_video.max_frames": "6",
}


def train_command(*overrides: str) -> list[str]:
    settings, flags = dict(SMALL), []
    for override in overrides:
        if override.startswith("-"):  # --help, -m
            flags.append(override)
            continue
        key, _, value = override.partition("=")
        settings.pop(key, None)
        settings[key] = value
    pairs = [f"{k}={v}" for k, v in settings.items()]
    return [sys.executable, "-m", "polymimic_train", *flags, *pairs]


def train_env(tmp: Path) -> dict[str, str]:
    return os.environ | {
        "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
        "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
        "POLYMIMIC_RUNS_ROOT": str(tmp / "runs"),
    }


def _train(tmp: Path, run_dir: Path | None, *overrides: str) -> subprocess.CompletedProcess[str]:
    where = [f"hydra.run.dir={run_dir}"] if run_dir is not None else []
    return subprocess.run(
        train_command(*where, *overrides),
        env=train_env(tmp),
        capture_output=True,
        text=True,
        timeout=600,
    )


def _start(tmp: Path, *overrides: str) -> subprocess.Popen[str]:
    """Output goes to a file under `tmp/logs` (a pipe nobody reads would fill and block)."""
    (tmp / "logs").mkdir(exist_ok=True)
    log = tmp / "logs" / f"train-{len(list((tmp / 'logs').iterdir()))}.log"
    with log.open("w") as out:
        return subprocess.Popen(
            train_command(*overrides),
            env=train_env(tmp),
            stdout=out,
            stderr=subprocess.STDOUT,
            text=True,
        )


TrainApp = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture(scope="session")
def train_app() -> TrainApp:
    """train_app(tmp, run_dir or None, *overrides): data, caches and runs under `tmp`."""
    return _train


@pytest.fixture(scope="session")
def train_process() -> Callable[..., subprocess.Popen[str]]:
    """train_process(tmp, *overrides): the same, started and not waited for."""
    return _start


@pytest.fixture(scope="session")
def train_environment() -> Callable[[Path], dict[str, str]]:
    """train_environment(tmp): the environment `train` runs in, everything under `tmp`."""
    return train_env


@pytest.fixture(scope="session")
def train_argv() -> Callable[..., list[str]]:
    """train_argv(*overrides): the `train` command line at the tiny size, to run yourself."""
    return train_command
