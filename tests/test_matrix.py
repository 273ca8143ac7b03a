"""Every model config trains on every data config for a few steps, through the app itself.

The configs are enumerated from the config tree, so a new model or data config cannot
land untested. Real-size models are marked slow: `nox -s matrix` runs them all.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import polymimic_train.app
from polymimic_data.synthetic import ensure_synthetic_episodes

CONFIGS = Path(polymimic_train.app.__file__).parent / "configs"
SLOW_MODELS = {"hpt"}  # real sizes: seconds a step on a CPU

TINY = [
    "name=matrix",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=20",
    "data.val_frames_per_episode=2",
    "callbacks.trajectory_video.max_frames=4",
]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _pairs() -> list:
    return [
        pytest.param(model, data, marks=[pytest.mark.slow] if model in SLOW_MODELS else [])
        for model in _options("model")
        for data in _options("data")
    ]


def _data_overrides(tmp: Path, data: str) -> list[str]:
    if data.startswith("synthetic"):
        size = ["episodes=3", "frames=20", "height=48", "width=64"]
        return [f"data.synthetic.{s}" for s in size]
    root = ensure_synthetic_episodes(  # a real data config: episodes on disk
        tmp / "episodes", "eva_bimanual", episodes=3, frames=20, height=48, width=64, progress=False
    )
    return [f"data.roots=[{root}]"]


def test_the_matrix_covers_every_config() -> None:
    pairs = {tuple(p.values) for p in _pairs()}
    assert {"synthetic_eva", "synthetic_aria", "synthetic_mecka", "synthetic_scale"} <= {
        d for _, d in pairs
    }
    assert {"synthetic_cotrain", "episodes"} <= {d for _, d in pairs}
    assert len(pairs) == len(_options("model")) * len(_options("data"))


@pytest.mark.parametrize(("model", "data"), _pairs())
def test_every_model_trains_on_every_data_config(
    tmp_path: Path, model: str, data: str, compose_train
) -> None:
    cfg = compose_train(
        tmp_path, f"model={model}", f"data={data}", *TINY, *_data_overrides(tmp_path, data)
    )
    summary = polymimic_train.app.run(cfg)
    assert summary["steps"] == 2
    assert math.isfinite(summary["val_action_error"]) and summary["val_action_error"] > 0
    assert (Path(cfg.paths.run_dir) / "checkpoints" / "last.ckpt").exists()
