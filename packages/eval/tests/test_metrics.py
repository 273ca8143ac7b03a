from __future__ import annotations

import torch

from polymimic_data.layouts import layout_from_widths
from polymimic_eval import action_error, position_error


def test_action_error_ignores_masked_steps() -> None:
    target = torch.zeros(2, 3, 2)
    pred = torch.ones(2, 3, 2)
    pred[:, 2] = 50.0
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert action_error(pred, target, mask).item() == 1.0


def test_position_error_is_euclidean_per_group() -> None:
    layout = layout_from_widths(
        "l", [("left_position", "position", 3), ("left_gripper", "gripper", 1)]
    )
    target = torch.zeros(1, 2, 4)
    pred = torch.tensor([[[3.0, 4.0, 0.0, 9.0], [0.0, 0.0, 0.0, 9.0]]])
    errors = position_error(pred, target, torch.ones(1, 2, dtype=torch.bool), layout)
    assert errors.keys() == {"left_position_error"}
    assert errors["left_position_error"].item() == 2.5
