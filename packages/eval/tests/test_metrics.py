from __future__ import annotations

import torch

from polymimic_eval import action_error


def test_action_error_ignores_masked_steps() -> None:
    target = torch.zeros(2, 3, 2)
    pred = torch.ones(2, 3, 2)
    pred[:, 2] = 50.0
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert action_error(pred, target, mask).item() == 1.0
