"""What a run directory records besides checkpoints: config, code version, statistics, summary."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


def git_commit(cwd: Path) -> str:
    """The code's commit (with `-dirty` if the tree has changes), or "unknown" outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd, capture_output=True, text=True, check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def write_json_atomic(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        json.dump(data, f, indent=2)
    os.replace(f.name, path)


def record_run_start(run_dir: Path, cfg: DictConfig, norm_stats: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    (run_dir / "git_commit.txt").write_text(git_commit(Path(__file__).parent) + "\n")
    write_json_atomic(run_dir / "norm_stats.json", norm_stats)
