from __future__ import annotations

import pytest
import torch

from polymimic_eval import action_error


def test_action_error_ignores_masked_steps() -> None:
    target = torch.zeros(2, 3, 2)
    pred = torch.ones(2, 3, 2)
    pred[:, 2] = 50.0
    mask = torch.tensor([[True, True, False], [True, True, False]])
    assert action_error(pred, target, mask).item() == 1.0


def test_metrics_take_numpy_and_give_numpy_with_the_same_values() -> None:
    import numpy as np

    from polymimic_data.geometry import get_layout
    from polymimic_eval import group_metrics, step_errors

    layout = get_layout("eva_cartesian_quat")
    rng = np.random.default_rng(0)
    target = rng.normal(size=(3, 5, layout.dim))
    for side in (3, 11):  # unit quaternions
        q = target[..., side : side + 4]
        target[..., side : side + 4] = q / np.linalg.norm(q, axis=-1, keepdims=True)
    pred = target + 0.05 * rng.normal(size=target.shape)
    mask = np.ones((3, 5), bool)
    mask[0, 3:] = False
    ours = group_metrics(pred, target, mask, layout)
    theirs = group_metrics(
        torch.from_numpy(pred), torch.from_numpy(target), torch.from_numpy(mask), layout
    )
    assert ours.keys() == theirs.keys()
    for key, value in ours.items():
        assert isinstance(value, np.floating), key
        assert value == pytest.approx(float(theirs[key]), rel=1e-9), key
    curve = step_errors(pred, target, mask)
    assert isinstance(curve, np.ndarray) and curve.shape == (5,)
    error = action_error(pred, target, mask)
    assert isinstance(error, np.floating)
    assert error == pytest.approx(
        float(
            action_error(torch.from_numpy(pred), torch.from_numpy(target), torch.from_numpy(mask))
        )
    )
    assert isinstance(
        action_error(torch.zeros(1, 2, 3), torch.ones(1, 2, 3), torch.ones(1, 2, dtype=torch.bool)),
        torch.Tensor,
    )
