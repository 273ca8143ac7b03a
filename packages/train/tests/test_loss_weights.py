"""`data.datasets.<name>.loss_weight`: each embodiment's loss counts by its weight in a step."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from polymimic_train.lightning import PolicyModule

LOSSES = {"robot": 0.01, "hands": 0.75}  # a clean embodiment's loss, a noisy one's


class _FixedLosses(nn.Module):
    """A policy whose loss on a batch is its embodiment's entry in LOSSES (times a parameter)."""

    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.ones(()))

    def compute_loss(self, batch: dict) -> dict[str, torch.Tensor]:
        return {"loss": self.scale * LOSSES[batch["embodiment"]]}


class _Identity(nn.Module):
    def normalize_batch(self, batch: dict) -> dict:
        return batch


def _module(loss_weights: dict[str, float] | None) -> PolicyModule:
    return PolicyModule(
        _FixedLosses(),  # type: ignore[arg-type]  (a stand-in for a Policy)
        _Identity(),  # type: ignore[arg-type]  (a stand-in for a Normalizer)
        {},
        lr=1e-3, backbone_lr=1e-4, weight_decay=0.0, warmup_steps=0,
        loss_weights=loss_weights,
    )  # fmt: skip


def _step(module: PolicyModule) -> float:
    batches = {n: {"embodiment": n, "state": torch.zeros(4, 1, 2)} for n in LOSSES}
    with pytest.warns(UserWarning, match="self.log"):  # no trainer here: logging is skipped
        loss = module.training_step(batches, 0)
    return loss.detach().item()


def test_by_default_each_embodiments_loss_counts_the_same() -> None:
    assert _step(_module(None)) == pytest.approx((0.01 + 0.75) / 2)


def test_a_loss_weight_scales_an_embodiments_share_of_the_step() -> None:
    # the hands' loss at a tenth: (1 * 0.01 + 0.1 * 0.75) / 1.1
    assert _step(_module({"hands": 0.1})) == pytest.approx((0.01 + 0.075) / 1.1)
    assert _step(_module({"robot": 2.0, "hands": 2.0})) == pytest.approx((0.01 + 0.75) / 2)
