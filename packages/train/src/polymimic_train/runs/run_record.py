"""What a run directory records besides checkpoints: config, code version, statistics, summary."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from polymimic_data.store import write_json_atomic, write_text_atomic


def git_commit(cwd: Path) -> str:
    """The code's commit (with `-dirty` if the tree has changes), or "unknown" outside git."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    return f"{sha}-dirty" if dirty else sha


def record_run_start(run_dir: Path, cfg: DictConfig, norm_stats: dict[str, Any]) -> None:
    """Write what a run starts from: the composed config, the git commit, the statistics."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(run_dir / "config.yaml", OmegaConf.to_yaml(cfg, resolve=True))
    write_text_atomic(run_dir / "git_commit.txt", git_commit(Path(__file__).parent) + "\n")
    write_json_atomic(run_dir / "norm_stats.json", norm_stats)


def summarise(trainer: Any, run_dir: Path) -> dict[str, Any]:
    """The run's final figures: validation metrics, and what its callbacks measured."""
    from polymimic_train.callbacks.data_fault_monitor import DataFaultMonitor
    from polymimic_train.callbacks.step_timing import StepTimer

    metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
    summary: dict[str, Any] = {
        "val_action_error": metrics.get("val_action_error"),
        "baseline_action_error": metrics.get("baseline_action_error"),
        "steps": trainer.global_step,
        "run_dir": str(run_dir.resolve()),
        "metrics": metrics,
    }
    for callback in trainer.callbacks:
        if isinstance(callback, DataFaultMonitor):
            summary["data_faults"] = callback.counts()
        if isinstance(callback, StepTimer):
            summary |= callback.summary()
    return summary
