"""HPT as a plain nn.Module: stems, trunk and heads, per embodiment or shared."""

from __future__ import annotations

import re

import pytest
import torch

from polymimic_policies import ActionPrefix, FlowHead, HPTConfig, HPTPolicy
from polymimic_policies.stems import ImageStem

EVA_GROUPS = [
    ("left_position", 3),
    ("left_rotation", 4),
    ("left_gripper", 1),
    ("right_position", 3),
    ("right_rotation", 4),
    ("right_gripper", 1),
]
ARIA_GROUPS = [("left_position", 3), ("left_rotation", 6), ("right_position", 3)]
SPECS = {
    "eva_bimanual": {
        "state_dim": 16,
        "action_dim": 16,
        "history": 2,
        "horizon": 4,
        "cameras": ["front_1"],
        "action_groups": EVA_GROUPS,
    },
    "aria_bimanual": {
        "state_dim": 12,
        "action_dim": 12,
        "history": 1,
        "horizon": 3,
        "cameras": ["front_1"],
        "action_groups": ARIA_GROUPS,
    },
}
TINY = {"d_model": 32, "num_heads": 2, "image_tokens": 2, "resnet_blocks": (1, 1, 1, 1)}


def policy(**overrides) -> HPTPolicy:
    torch.manual_seed(0)
    return HPTPolicy(HPTConfig(**(TINY | overrides)), SPECS)


def batch(embodiment: str, size: int = 3, seed: int = 1) -> dict:
    spec = SPECS[embodiment]
    g = torch.Generator().manual_seed(seed)
    images = torch.randint(0, 256, (size, 3, 32, 40), dtype=torch.uint8, generator=g)
    return {
        "embodiment": embodiment,
        "images.front_1": images,
        "state": torch.randn(size, spec["history"], spec["state_dim"], generator=g),
        "actions": torch.randn(size, spec["horizon"], spec["action_dim"], generator=g),
        "action_mask": torch.ones(size, spec["horizon"], dtype=torch.bool),
        "prompt": ["pick up the cup", "", "fold"][:size],
        # the latest state in the actions' units (the Normalizer's), for residual actions
        "action_anchor": torch.randn(size, 1, spec["action_dim"], generator=g),
    }


def _grads(model: HPTPolicy, data: dict, seed: int = 3) -> dict[str, torch.Tensor]:
    model.zero_grad()
    torch.manual_seed(seed)
    model.compute_loss(data)["loss"].backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_builds_on_the_cpu_and_every_parameter_of_the_embodiment_learns() -> None:
    model = policy(use_prompt=True)
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    out = model.compute_loss(batch("eva_bimanual"))
    assert set(out) == {"loss", "flow_loss"} and torch.isfinite(out["loss"])
    out["loss"].backward()
    idle = [n for n, p in model.named_parameters() if "aria" not in n and p.grad is None]
    assert idle == []


@pytest.mark.parametrize("head", ["flow", "regression"])
def test_padded_steps_give_no_gradient(head: str) -> None:
    model = policy(head=head)
    data = batch("eva_bimanual")
    data["action_mask"] = torch.tensor([[True, True, False, False]] * 3)
    before = _grads(model, data)
    data["actions"][:, 2:] += 1000.0  # what a padded step holds must not matter
    after = _grads(model, data)
    assert before.keys() == after.keys()
    for name, grad in before.items():
        torch.testing.assert_close(after[name], grad, msg=name)


def test_a_shared_head_predicts_each_embodiments_own_channel_groups() -> None:
    model = policy(shared_head=True, shared_stems={"front_1": "front"})
    assert list(model.heads) == ["shared"] and list(model.stems)[1] == "front"
    head = model.heads["shared"]
    assert isinstance(head, FlowHead)
    assert "left_rotation__4" in head.action_in and "left_rotation__6" in head.action_in
    assert model.sample_actions(batch("aria_bimanual")).shape == (3, 3, 12)
    grads = _grads(model, batch("aria_bimanual"))
    touched = {n.split(".")[3] for n in grads if n.startswith("heads.shared.action_")}
    assert touched == {"left_position__3", "left_rotation__6", "right_position__3"}


def test_sampling_is_deterministic_with_a_generator_and_shaped_like_the_chunk() -> None:
    model = policy().eval()
    data = batch("aria_bimanual")
    first = model.sample_actions(data, torch.Generator().manual_seed(7))
    again = model.sample_actions(data, torch.Generator().manual_seed(7))
    other = model.sample_actions(data, torch.Generator().manual_seed(8))
    assert first.shape == (3, 3, 12)
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, other)


@pytest.mark.parametrize("head", ["flow", "regression"])
def test_overfits_one_batch(head: str) -> None:
    model = policy(head=head)
    data = batch("eva_bimanual", size=4)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for step in range(150):
        torch.manual_seed(step)
        loss = model.compute_loss(data)["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-20:]) < 0.7 * sum(losses[:20])


def test_param_groups_split_backbones_and_cover_every_trainable_parameter_once() -> None:
    model = policy()
    groups = model.param_groups(lr=1e-3, backbone_lr=1e-4)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    backbone = next(g for g in groups if g["name"] == "backbone")
    assert backbone["lr"] == 1e-4 and backbone["params"]


def test_a_frozen_backbone_keeps_its_weights_and_batch_norm_statistics() -> None:
    model = policy(freeze_backbone=True)
    stem = model.stems["eva_bimanual__front_1"]
    assert isinstance(stem, ImageStem)
    before = {k: v.clone() for k, v in stem.backbone.state_dict().items()}
    model.train()
    assert not stem.backbone.training and stem.training
    opt = torch.optim.Adam(
        [p for g in model.param_groups(lr=1e-2, backbone_lr=1e-2) for p in g["params"]], lr=1e-2
    )
    for _ in range(3):
        loss = model.compute_loss(batch("eva_bimanual"))["loss"]
        opt.zero_grad()
        loss.backward()
        opt.step()
    for key, value in stem.backbone.state_dict().items():
        assert torch.equal(value, before[key]), key  # running_mean/var included
    assert not next(g for g in model.param_groups(1e-3, 1e-4) if g["name"] == "backbone")["params"]


@pytest.mark.parametrize("placed", [False, True])
def test_placed_image_tokens_tell_the_pool_where_a_feature_is(placed: bool) -> None:
    """The pool is attention over a set: the same feature at another place of the map pools
    the same unless the tokens carry their place (image_positions)."""
    torch.manual_seed(0)
    stem = ImageStem(d_model=32, num_tokens=2, num_heads=4, resnet_blocks=(1, 1, 1, 1),
                     image_positions=placed).eval()  # fmt: skip
    background, feature = torch.zeros(1, 512, 3, 4), torch.randn(512)
    here, there = background.clone(), background.clone()
    here[0, :, 0, 0], there[0, :, 2, 3] = feature, feature  # one feature, two places
    with torch.no_grad():
        pooled = [stem.pool(stem.tokens(features)) for features in (here, there)]
    assert torch.allclose(pooled[0], pooled[1], atol=1e-6) is not placed


def test_image_positions_train_an_hpt_and_change_its_output() -> None:
    placed, plain = policy(image_positions=True), policy()  # the same weights (one seed)
    assert placed.state_dict().keys() == plain.state_dict().keys()  # no parameter added
    data = batch("eva_bimanual")
    torch.manual_seed(1)
    placed_loss = placed.compute_loss(data)["loss"]
    torch.manual_seed(1)
    assert not torch.equal(placed_loss, plain.compute_loss(data)["loss"])
    placed_loss.backward()
    assert torch.isfinite(placed_loss)


def test_a_small_vit_backbone_takes_images_of_any_shape() -> None:
    model = policy(image_backbone="vit", vit_layers=1, vit_patch_size=8)
    for height, width in ((32, 40), (48, 24)):
        data = batch("eva_bimanual")
        data["images.front_1"] = torch.randint(0, 256, (3, 3, height, width), dtype=torch.uint8)
        assert torch.isfinite(model.compute_loss(data)["loss"])


def test_a_state_stem_is_shared_only_between_equal_inputs() -> None:
    with pytest.raises(ValueError, match="shared_stems: state stem 'proprio'"):
        policy(shared_stems={"state": "proprio"})


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"d_model": 30, "num_heads": 4}, r"num_heads: 4 does not divide d_model=30"),
        ({"image_tokens": 0}, r"image_tokens: must be a positive integer, got 0"),
        ({"head": "diffusion"}, r"head: 'diffusion' is not one of"),
        ({"image_backbone": "vgg"}, r"image_backbone: 'vgg' is not one of"),
    ],
)
def test_sizes_that_cannot_work_are_named(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy(**overrides)


def test_unknown_embodiment_and_float_images_are_refused() -> None:
    model = policy()
    with pytest.raises(KeyError, match="mecka_bimanual"):
        model.compute_loss(batch("eva_bimanual") | {"embodiment": "mecka_bimanual"})
    data = batch("eva_bimanual")
    data["images.front_1"] = data["images.front_1"].float()
    with pytest.raises(TypeError, match="uint8"):
        model.compute_loss(data)


def test_residual_actions_are_relative_to_the_latest_state() -> None:
    model = policy(head="regression", residual_actions=True).eval()
    for layer in model.head_for("eva_bimanual").action_out.values():
        assert isinstance(layer, torch.nn.Linear)
        torch.nn.init.zeros_(layer.weight)
        torch.nn.init.zeros_(layer.bias)
    data = batch("eva_bimanual")
    expected = data["action_anchor"].expand(-1, 4, -1)
    torch.testing.assert_close(model.sample_actions(data), expected)  # holding still
    with pytest.raises(ValueError, match=r"residual_actions: .*\['aria_bimanual'\]"):
        HPTPolicy(
            HPTConfig(residual_actions=True, **TINY),
            SPECS | {"aria_bimanual": SPECS["aria_bimanual"] | {"state_dim": 5}},
        )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            {"state": torch.zeros(3, 4, 16)},  # a K=4 history for a history of 2
            "batch['state']: eva_bimanual expects (B, 2, 16), got (3, 4, 16)",
        ),
        ({"state": torch.zeros(3, 2, 12)}, "batch['state']: eva_bimanual expects (B, 2, 16)"),
        ({"actions": torch.zeros(3, 4, 12)}, "batch['actions']: eva_bimanual expects (3, 4, 16)"),
        ({"action_mask": torch.ones(3, 5, dtype=torch.bool)}, "batch['action_mask']: eva_bimanual"),
        ({"images.front_1": torch.zeros(2, 3, 32, 40)}, "batch['images.front_1']: eva_bimanual "),
    ],
)
def test_a_batch_that_does_not_fit_the_embodiment_is_named(change: dict, message: str) -> None:
    model = policy()
    with pytest.raises(ValueError, match=re.escape(message)):
        model.compute_loss(batch("eva_bimanual") | change)


def test_a_one_step_history_refuses_a_longer_one_and_a_missing_camera_is_named() -> None:
    model = policy()
    aria = batch("aria_bimanual")
    with pytest.raises(ValueError, match=re.escape("expects (B, 1, 12), got (3, 4, 12)")):
        model.sample_actions(aria | {"state": torch.zeros(3, 4, 12)})
    missing = {k: v for k, v in batch("eva_bimanual").items() if k != "images.front_1"}
    with pytest.raises(ValueError, match=re.escape("batch['images.front_1']: missing")):
        model.sample_actions(missing)


# ----- real-time chunking: a flow head inpaints the previous chunk ---------------------


def _rtc_noise(seed: int = 3) -> torch.Tensor:
    return torch.randn(3, 4, 16, generator=torch.Generator().manual_seed(seed))


def _previous(seed: int = 5, steps: int = 3) -> torch.Tensor:
    return torch.randn(3, steps, 16, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("residual", [True, False])
def test_a_flow_head_inpaints_the_frozen_steps_of_the_previous_chunk(residual: bool) -> None:
    model = policy(residual_actions=residual).eval()
    data = batch("eva_bimanual")
    assert model.can_inpaint("eva_bimanual")
    plain = model.sample_actions(data, noise=_rtc_noise())
    previous = _previous()
    guided = model.sample_actions(data, noise=_rtc_noise(), prefix=ActionPrefix.of(previous, 2, 4))
    before = (plain[:, :2] - previous[:, :2]).abs().mean()
    after = (guided[:, :2] - previous[:, :2]).abs().mean()
    assert after < 0.1 * before, (before, after)
    assert torch.isfinite(guided).all() and guided.shape == plain.shape
    # past the overlap nothing binds: the last step stays a sample, not a copy
    assert (guided[:, 3] - plain[:, 3]).abs().mean() < (guided[:, 0] - plain[:, 0]).abs().mean()


def test_a_prefix_that_binds_nothing_samples_exactly_as_without_one() -> None:
    model = policy().eval()
    data = batch("eva_bimanual")
    empty = ActionPrefix.of(torch.zeros(3, 0, 16), delay=0, horizon=4)
    assert not empty.binds
    torch.testing.assert_close(
        model.sample_actions(data, noise=_rtc_noise(), prefix=empty),
        model.sample_actions(data, noise=_rtc_noise()),
        rtol=0,
        atol=0,
    )


def test_a_prefix_of_the_wrong_shape_is_named() -> None:
    model = policy().eval()
    wrong = ActionPrefix.of(_previous(), 1, horizon=5)
    with pytest.raises(ValueError, match=r"action prefix: actions \(3, 5, 16\)"):
        model.sample_actions(batch("eva_bimanual"), noise=_rtc_noise(), prefix=wrong)
    with pytest.raises(ValueError, match="4 steps, more than the chunk's horizon 3"):
        ActionPrefix.of(_previous(steps=4), 1, horizon=3)


def test_a_regression_head_says_it_cannot_inpaint() -> None:
    model = policy(head="regression").eval()
    assert not model.can_inpaint("eva_bimanual")
    with pytest.raises(ValueError, match=r"regression head .* cannot inpaint"):
        model.sample_actions(
            batch("eva_bimanual"), prefix=ActionPrefix.of(_previous(), 1, horizon=4)
        )
