"""Callbacks of validation and diagnosis, on tiny Lightning modules (no app, no data)."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import lightning.pytorch as pl
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from polymimic_train.callbacks.grad_norm_monitor import GradNormMonitor
from polymimic_train.callbacks.step_error_plot import step_error_curves
from polymimic_train.callbacks.trajectory_video import TrajectoryVideoCallback


class _Regression(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2)


class _TrueNorm(pl.Callback):
    """The global gradient norm, as torch's clipping utility computes it."""

    def __init__(self) -> None:
        self.norms: list[float] = []

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        grads = [p.grad for p in pl_module.parameters() if p.grad is not None]
        self.norms.append(float(torch.nn.utils.get_total_norm(grads)))


def _fit(tmp: Path, callbacks: list[pl.Callback]) -> dict[str, torch.Tensor]:
    pl.seed_everything(0)
    x = torch.randn(64, 4)
    data = DataLoader(TensorDataset(x, x.sum(1, keepdim=True) ** 2), batch_size=8)
    module = _Regression()
    trainer = pl.Trainer(
        max_steps=24,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        gradient_clip_val=0.5,
        callbacks=callbacks,
        default_root_dir=str(tmp),
    )
    trainer.fit(module, data)
    return {k: v.clone() for k, v in module.state_dict().items()}


def test_grad_norm_statistics_never_change_training(tmp_path: Path) -> None:
    monitor = GradNormMonitor(window=10, k=3.0, min_history=4, log_every_n_steps=5)
    truth = _TrueNorm()
    watched = _fit(tmp_path, [monitor, truth])
    plain = _fit(tmp_path, [])
    for key, value in plain.items():
        torch.testing.assert_close(watched[key], value, rtol=0, atol=0)
    # Step 24 is not a logging step: four flushes of five took 20 norms; four wait.
    assert len(truth.norms) == 24 and len(monitor.pending) == 4
    assert list(monitor.stats.norms) == pytest.approx(truth.norms[10:20], rel=1e-6)
    # Taken before clipping (gradient_clip_val=0.5): the real norms, not the clipped ones.
    assert max(truth.norms) > 0.5 and monitor.stats.last == pytest.approx(truth.norms[19])


def test_step_error_curves_come_from_the_logged_metrics() -> None:
    metrics = {
        "val/eva_bimanual/step_error/000": 0.1,
        "val/eva_bimanual/step_error/002": 0.3,
        "val/aria_bimanual/step_error/000": 0.5,
        "val/eva_bimanual/action_error": 9.0,
        "val_action_error": 9.0,
    }
    curves = step_error_curves(metrics)
    assert list(curves) == ["aria_bimanual", "eva_bimanual"]
    assert curves["aria_bimanual"] == [0.5]
    assert curves["eva_bimanual"][0] == 0.1 and curves["eva_bimanual"][2] == 0.3
    assert curves["eva_bimanual"][1] != curves["eva_bimanual"][1]  # NaN: no valid sample


class _Episodes:
    """A datamodule that records what the video callback asks of it."""

    def __init__(self) -> None:
        self.cfg = {"datasets": {"eva": {}}}
        self.asked: list[str] = []

    def episodes(self, name: str, split: str) -> list:
        self.asked.append(split)
        return []


def test_videos_load_nothing_when_none_is_due() -> None:
    callback = TrajectoryVideoCallback(every_n_validations=2, splits=["val", "train"])
    datamodule = _Episodes()
    trainer = SimpleNamespace(
        sanity_checking=False, datamodule=datamodule, global_step=0, default_root_dir="."
    )
    asked = []
    for _ in range(4):
        callback.on_validation_end(trainer, None)  # type: ignore[arg-type]
        asked.append(len(datamodule.asked))
    assert asked == [2, 2, 4, 4]  # validations 1 and 3 only
    trainer.sanity_checking = True
    callback.on_validation_end(trainer, None)  # type: ignore[arg-type]
    assert len(datamodule.asked) == 4


def test_video_settings_are_checked() -> None:
    with pytest.raises(ValueError, match="splits must be among"):
        TrajectoryVideoCallback(splits=["test"])


def test_the_rerun_callback_needs_its_extra_only_when_on(monkeypatch) -> None:
    from polymimic_data.episodes import MissingViewerError
    from polymimic_train.callbacks.rerun_predictions import RerunPredictions

    monkeypatch.setitem(sys.modules, "rerun", None)  # as without polymimic-train[viz]
    assert not RerunPredictions(every_n_validations=0).enabled  # the default: off, no import
    with pytest.raises(MissingViewerError, match=r"callbacks\.rerun needs rerun-sdk: pip "
                       r"install 'polymimic-train\[viz\]'"):  # fmt: skip
        RerunPredictions(every_n_validations=1)
    with pytest.raises(ValueError, match=r"every_n_validations: 0 \(off\) or more, got -1"):
        RerunPredictions(every_n_validations=-1)
    # the app says so before any data is read: one line naming the field and the extra
    from omegaconf import OmegaConf

    from polymimic_train.run_config import ConfigError, _check_rerun

    off = OmegaConf.create({"callbacks": {"rerun": {"every_n_validations": 0}}})
    _check_rerun(off)
    on = OmegaConf.create({"callbacks": {"rerun": {"every_n_validations": 1}}})
    expected = (
        r"^callbacks\.rerun\.every_n_validations: callbacks\.rerun needs rerun-sdk: pip "
        r"install 'polymimic-train\[viz\]'"
    )
    with pytest.raises(ConfigError, match=expected):
        _check_rerun(on)
