"""`train` in a subprocess, its data, caches and runs under one folder (for benchmarks)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path


def run_train(tmp: Path, *args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    """Seconds `train *args` took, and its result; data, cache and runs under `tmp`."""
    env = os.environ | {
        "POLYMIMIC_DATA_ROOT": str(tmp / "data"),
        "POLYMIMIC_CACHE_DIR": str(tmp / "cache"),
        "POLYMIMIC_RUNS_ROOT": str(tmp / "runs"),
    }
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-m", "polymimic_train", *args], env=env, capture_output=True, text=True
    )
    return time.perf_counter() - start, result
