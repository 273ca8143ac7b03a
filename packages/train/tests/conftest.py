"""`train_app`: the `train` command run in a subprocess at a tiny size, as a user runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

SMALL = [
    "trainer.max_steps=4",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=50",
    "model.d_model=32",
    "model.num_heads=2",
    "model.image_tokens=2",
    "callbacks.trajectory_video.max_frames=6",
]

TrainApp = Callable[..., subprocess.CompletedProcess[str]]


def _train(tmp: Path, run_dir: Path, *overrides: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {
        "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
        "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
    }
    return subprocess.run(
        [sys.executable, "-m", "polymimic_train", f"hydra.run.dir={run_dir}", *SMALL, *overrides],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.fixture(scope="session")
def train_app() -> TrainApp:
    """train_app(tmp, run_dir, *overrides): data and caches under `tmp`, 4 tiny steps."""
    return _train
