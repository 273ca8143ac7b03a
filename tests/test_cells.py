"""A closed-loop cell's figures (benchmarks/cells.py): a cotrained run's validation error is
the mean over its embodiments, so each embodiment's own is kept beside it."""

from __future__ import annotations

import importlib.util
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def _cells():
    spec = importlib.util.spec_from_file_location("cells_benchmark", BENCHMARKS / "cells.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_embodiments_figures_are_kept_by_its_name_slashes_and_all() -> None:
    metrics = {  # as a cotrained run's summary.json holds them
        "val_action_error": 0.0135, "baseline_action_error": 0.027,
        "val/sim/aloha_ego_masked/action_error": 0.0072,
        "val/sim/aloha_ego_masked/baseline_action_error": 0.08,
        "val/sim/hands/action_error": 0.0142, "val/sim/hands/baseline_action_error": 0.021,
        "train/sim/aloha_ego_masked/flow_loss": 0.037, "train/sim/hands/flow_loss": 0.76,
        "train/sim/hands/loss": 0.76, "val/sim/hands/left_position_error": 0.016,
    }  # fmt: skip
    cells = _cells()
    assert cells.embodiment_figures(metrics) == {
        "sim/aloha_ego_masked": {
            "val_action_error": 0.0072, "val_baseline_action_error": 0.08,
            "train_flow_loss": 0.037,
        },
        "sim/hands": {
            "val_action_error": 0.0142, "val_baseline_action_error": 0.021,
            "train_flow_loss": 0.76,
        },
    }  # fmt: skip
    assert cells.embodiment_figures({}) == {}  # a run with no metrics: none, not a failure
