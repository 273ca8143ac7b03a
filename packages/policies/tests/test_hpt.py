from __future__ import annotations

import pytest
import torch

from polymimic_policies import FlowMatchingActionHead, HPTPolicy

SPECS = {
    "eva_bimanual": {
        "state_dim": 16,
        "action_dim": 16,
        "history": 2,
        "horizon": 4,
        "cameras": ["front_1"],
    },
    "aria_bimanual": {
        "state_dim": 14,
        "action_dim": 14,
        "history": 1,
        "horizon": 4,
        "cameras": ["front_1"],
    },
}


def _policy() -> HPTPolicy:
    torch.manual_seed(0)
    return HPTPolicy(
        embodiments=SPECS, d_model=32, num_heads=2, image_tokens=2, resnet_blocks=(1, 1, 1, 1)
    )


def _batch(embodiment: str, size: int = 3) -> dict:
    spec = SPECS[embodiment]
    g = torch.Generator().manual_seed(1)
    return {
        "embodiment": embodiment,
        "images.front_1": torch.randint(0, 256, (size, 3, 32, 40), dtype=torch.uint8, generator=g),
        "state": torch.randn(size, spec["history"], spec["state_dim"], generator=g),
        "actions": torch.randn(size, spec["horizon"], spec["action_dim"], generator=g),
        "action_mask": torch.ones(size, spec["horizon"], dtype=torch.bool),
    }


def test_builds_on_the_cpu_and_every_trainable_parameter_of_an_embodiment_learns() -> None:
    policy = _policy()
    assert {p.device.type for p in policy.parameters()} == {"cpu"}
    out = policy.compute_loss(_batch("eva_bimanual"))
    assert set(out) >= {"loss"} and out["loss"].ndim == 0 and torch.isfinite(out["loss"])
    out["loss"].backward()
    without_grad = [n for n, p in policy.named_parameters() if "aria" not in n and p.grad is None]
    assert without_grad == []


def test_sampling_is_deterministic_with_a_generator_and_shaped_like_the_chunk() -> None:
    policy = _policy().eval()
    batch = _batch("aria_bimanual")
    first = policy.sample_actions(batch, torch.Generator().manual_seed(7))
    again = policy.sample_actions(batch, torch.Generator().manual_seed(7))
    other = policy.sample_actions(batch, torch.Generator().manual_seed(8))
    assert first.shape == (3, 4, 14)
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, other)


class _ZeroVelocityHead(FlowMatchingActionHead):
    def velocity(self, noisy, t, context):
        return torch.zeros_like(noisy)


def test_masked_steps_do_not_contribute_to_the_loss() -> None:
    head = _ZeroVelocityHead(action_dim=3, horizon=4, d_model=8, num_heads=2)
    actions = torch.randn(2, 4, 3)
    mask = torch.tensor([[True, True, False, False]] * 2)
    torch.manual_seed(3)
    base = head.loss(torch.zeros(2, 1, 8), actions, mask)
    actions[:, 2:] += 100.0
    torch.manual_seed(3)
    assert torch.equal(head.loss(torch.zeros(2, 1, 8), actions, mask), base)
    torch.manual_seed(3)
    assert head.loss(torch.zeros(2, 1, 8), actions, torch.ones(2, 4, dtype=torch.bool)) > 1000


def test_param_groups_split_backbones_and_cover_every_parameter_once() -> None:
    policy = _policy()
    groups = policy.param_groups(lr=1e-3, backbone_lr=1e-4)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(policy.parameters()))
    backbone = next(g for g in groups if g["name"] == "backbone")
    assert backbone["lr"] == 1e-4 and backbone["params"]


def test_overfits_one_batch() -> None:
    policy = _policy()
    batch = _batch("eva_bimanual", size=4)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for step in range(120):
        torch.manual_seed(step)
        loss = policy.compute_loss(batch)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) < 0.7 * sum(losses[:20])


def test_unknown_embodiment_and_float_images_are_refused() -> None:
    policy = _policy()
    with pytest.raises(KeyError, match="mecka_bimanual"):
        policy.compute_loss(_batch("eva_bimanual") | {"embodiment": "mecka_bimanual"})
    batch = _batch("eva_bimanual")
    batch["images.front_1"] = batch["images.front_1"].float()
    with pytest.raises(TypeError, match="uint8"):
        policy.compute_loss(batch)
