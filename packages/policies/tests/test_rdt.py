"""RDT: DiT diffusion heads with alternating cross-attention on HPT's stems and trunk."""

from __future__ import annotations

import pytest
import torch

from polymimic_policies import ActionPrefix
from polymimic_policies.hpt import pretrained_parts
from polymimic_policies.rdt import RDTBlock, RDTConfig, RDTHead, RDTPolicy

EVA_GROUPS = [("left_position", 3), ("left_rotation", 4), ("left_gripper", 1), ("right", 8)]
ARIA_GROUPS = [("left_position", 3), ("left_rotation", 6), ("right", 3)]
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
TINY = {
    "d_model": 32,
    "num_heads": 2,
    "image_tokens": 2,
    "resnet_blocks": (1, 1, 1, 1),
    "rdt_width": 24,  # not d_model: the conditions are projected
    "rdt_layers": 4,
    "rdt_heads": 2,
    "train_timesteps": 100,
}


def policy(**overrides) -> RDTPolicy:
    torch.manual_seed(0)
    return RDTPolicy(RDTConfig(**(TINY | overrides)), SPECS)


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


def _loss(model: RDTPolicy, data: dict, seed: int = 3) -> torch.Tensor:
    torch.manual_seed(seed)  # the same timesteps and noise
    return model.compute_loss(data)["loss"]


def _grads(model: RDTPolicy, data: dict, seed: int = 3) -> dict[str, torch.Tensor]:
    model.zero_grad()
    _loss(model, data, seed).backward()
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_builds_on_the_cpu_and_every_parameter_of_the_embodiment_learns() -> None:
    model = policy(use_prompt=True)
    assert {p.device.type for p in model.parameters()} == {"cpu"}
    assert isinstance(model.head_for("eva_bimanual"), RDTHead)
    out = model.compute_loss(batch("eva_bimanual"))
    assert set(out) == {"loss", "rdt_loss"} and torch.isfinite(out["loss"])
    out["loss"].backward()
    idle = [n for n, p in model.named_parameters() if "aria" not in n and p.grad is None]
    assert idle == []


def test_padded_steps_change_neither_loss_nor_gradients() -> None:
    model = policy(use_prompt=True)
    data = batch("eva_bimanual")
    data["action_mask"] = torch.tensor([[True, True, False, False]] * 3)
    loss = _loss(model, data)
    before = _grads(model, data)
    data["actions"][:, 2:] += 1000.0  # what a padded step holds must not matter
    torch.testing.assert_close(_loss(model, data), loss)
    after = _grads(model, data)
    assert before.keys() == after.keys()
    for name, grad in before.items():
        torch.testing.assert_close(after[name], grad, msg=name)
    data["actions"][:, :2] += 1.0  # while a valid step does
    assert not torch.allclose(_loss(model, data), loss)


def test_sampling_is_deterministic_from_a_seed_or_given_noise() -> None:
    model = policy(use_prompt=True).eval()
    data = batch("aria_bimanual")
    first = model.sample_actions(data, torch.Generator().manual_seed(7))
    again = model.sample_actions(data, torch.Generator().manual_seed(7))
    other = model.sample_actions(data, torch.Generator().manual_seed(8))
    assert first.shape == (3, 3, 12) and torch.isfinite(first).all()
    torch.testing.assert_close(first, again)
    assert not torch.allclose(first, other)
    # Given noise is the initial sample: the same noise as the seed draws, the same chunk.
    noise = torch.randn((3, 3, 12), generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(model.sample_actions(data, noise=noise), first)
    assert not torch.allclose(model.sample_actions(data, noise=noise + 1.0), first)
    with pytest.raises(ValueError, match=r"noise must be \(3, 3, 12\)"):
        model.sample_actions(data, noise=torch.zeros(3, 4, 12))


def test_rdt_says_it_cannot_inpaint_a_prefix() -> None:
    model = policy().eval()
    assert not model.can_inpaint("aria_bimanual")
    prefix = ActionPrefix.of(torch.zeros(3, 2, 12), delay=1, horizon=3)
    with pytest.raises(ValueError, match=r"RDT samples with DPM-Solver\+\+, which cannot inpaint"):
        model.sample_actions(batch("aria_bimanual"), prefix=prefix)


def _record_cross_attention_contexts(head: RDTHead) -> tuple[list[torch.Tensor], list]:
    seen: list[torch.Tensor] = []
    blocks = [block for block in head.blocks if isinstance(block, RDTBlock)]
    assert len(blocks) == len(head.blocks)
    hooks = [
        block.cross_attn.register_forward_pre_hook(lambda _, args: seen.append(args[1]))
        for block in blocks
    ]
    return seen, hooks


def test_cross_attention_alternates_between_trunk_and_language_tokens() -> None:
    model = policy(use_prompt=True).eval()
    head = model.head_for("eva_bimanual")
    data = batch("eva_bimanual")
    trunk, language = model.conditions(data)
    assert language is not None and language.shape == (3, 4, 32)  # the prompt stem's tokens
    seen, hooks = _record_cross_attention_contexts(head)
    noisy, t, state = data["actions"], torch.tensor([5, 50, 99]), data["state"][:, -1]
    assert head.language_in is not None
    with torch.no_grad():
        head(noisy, t, state, trunk, language, "eva_bimanual")
        head(noisy, t, state, trunk, language + 1.0, "eva_bimanual")  # other words only
        words, other_words = head.language_in(language), head.language_in(language + 1.0)
        projected = head.context_in(trunk)
    for hook in hooks:
        hook.remove()
    first, second = seen[:4], seen[4:]
    for i in (0, 2):  # even blocks: the trunk, whatever the words
        torch.testing.assert_close(first[i], projected)
        torch.testing.assert_close(second[i], projected)
    for i in (1, 3):  # odd blocks: the words
        torch.testing.assert_close(first[i], words)
        torch.testing.assert_close(second[i], other_words)
    assert not torch.allclose(words, other_words)


def test_without_a_prompt_every_block_attends_to_the_trunk() -> None:
    model = policy().eval()
    head = model.head_for("eva_bimanual")
    assert head.language_in is None
    data = batch("eva_bimanual")
    seen, hooks = _record_cross_attention_contexts(head)
    with torch.no_grad():
        model.sample_actions(data, torch.Generator().manual_seed(0))
        projected = head.context_in(model.encode(data))
    for hook in hooks:
        hook.remove()
    assert len(seen) == 4 * 5  # four blocks, five DPM-Solver++ steps
    for context in seen:
        torch.testing.assert_close(context, projected)


def test_a_shared_head_predicts_each_embodiments_own_channel_groups() -> None:
    model = policy(shared_head=True)
    assert list(model.heads) == ["shared"]
    head = model.heads["shared"]
    assert isinstance(head, RDTHead)
    assert "left_rotation__4" in head.action_out and "left_rotation__6" in head.action_out
    assert model.sample_actions(batch("aria_bimanual")).shape == (3, 3, 12)
    grads = _grads(model, batch("aria_bimanual"))
    touched = {n.split(".")[3] for n in grads if n.startswith("heads.shared.action_out")}
    assert touched == {"left_position__3", "left_rotation__6", "right__3"}


def test_a_few_dozen_steps_on_one_batch_make_the_loss_fall() -> None:
    model = policy(use_prompt=True, rdt_width=32, rdt_layers=2)
    data = batch("eva_bimanual")

    def held_out_loss() -> float:  # the same timesteps and noise before and after
        with torch.no_grad():
            return sum(_loss(model, data, seed).item() for seed in range(1000, 1008)) / 8

    before = held_out_loss()
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(30):
        loss = _loss(model, data, step)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert held_out_loss() < 0.5 * before


def test_residual_actions_are_relative_to_the_latest_state() -> None:
    model = policy(residual_actions=True).eval()
    for layer in model.head_for("eva_bimanual").action_out.values():
        assert isinstance(layer, torch.nn.Linear)
        torch.nn.init.zeros_(layer.weight)
        torch.nn.init.zeros_(layer.bias)
    data = batch("eva_bimanual")
    expected = data["action_anchor"].expand(-1, 4, -1)
    # Predicting a clean chunk of zeros, DPM-Solver++ ends at it: holding still.
    torch.testing.assert_close(model.sample_actions(data), expected, atol=1e-4, rtol=0)
    relative = data | {"actions": data["actions"] - data["action_anchor"]}
    residual = _loss(model, data)
    model.residual_actions = False
    torch.testing.assert_close(_loss(model, relative), residual)


def test_rdt_1b_sizes_on_the_meta_device() -> None:
    w, layers, heads, hidden = 2048, 28, 32, 2048  # RDT-1B; its MLP is as wide as the model
    d_model, state_dim, action_dim, horizon = 1024, 128, 128, 64  # RDT's unified space
    with torch.device("meta"):
        model = RDTPolicy(
            RDTConfig(
                d_model=d_model, num_heads=16, rdt_width=w, rdt_layers=layers, rdt_heads=heads
            ),
            {
                "robot": {
                    "state_dim": state_dim,
                    "action_dim": action_dim,
                    "history": 1,
                    "horizon": horizon,
                }
            },
        )
    head = model.head_for("robot")
    assert {p.device.type for p in head.parameters()} == {"meta"}
    head_dim = w // heads
    attention = 4 * w * w + 4 * w + 2 * head_dim  # qkv (or q and kv), out; QK-norm weights
    mlp = 2 * w * hidden + hidden + w
    block = 2 * attention + mlp + 3 * w  # and three RMSNorms
    blocks = layers * block
    assert blocks == 1_175_157_760  # 28 blocks of 10 w^2 weights (+ biases and norms)
    around = (
        (256 * w + w) + (w * w + w)  # timestep MLP
        + (2 + horizon) * w  # positions of the timestep, state and action tokens
        + (d_model * w + w)  # trunk tokens to the head's width
        + (state_dim * w + w)  # state token
        + (action_dim * w + w) + (w * action_dim + action_dim)  # actions in and out
        + w  # final RMSNorm
    )  # fmt: skip
    count = sum(p.numel() for p in head.parameters())
    assert count == blocks + around == 1_182_907_520
    assert sum(p.numel() for p in head.blocks.parameters()) == blocks


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"rdt_width": 30, "rdt_heads": 4}, r"rdt_heads: 4 does not divide rdt_width=30; .*15"),
        ({"rdt_layers": 0}, r"rdt_layers: must be a positive integer, got 0"),
        ({"rdt_mlp_ratio": 0.0}, r"rdt_mlp_ratio: must make an MLP of at least one unit"),
        ({"train_timesteps": 10, "sample_steps": 20}, r"sample_steps: 20 is more than"),
        ({"sample_steps": 0}, r"sample_steps: must be a positive integer, got 0"),
        ({"d_model": 30, "num_heads": 4}, r"num_heads: 4 does not divide d_model=30"),
    ],
)
def test_sizes_that_cannot_work_are_named(overrides: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        policy(**overrides)


def test_param_groups_compile_and_pretrained_heads_behave_as_in_hpt(tmp_path) -> None:
    model = policy(use_prompt=True)
    groups = model.param_groups(lr=1e-3, backbone_lr=1e-4)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(model.parameters()))
    head_ids = {id(p) for p in model.heads.parameters()}
    assert head_ids <= {id(p) for p in next(g for g in groups if g["name"] == "policy")["params"]}

    config = model.save_pretrained(tmp_path)
    reloaded = policy(
        use_prompt=True,
        pretrained=pretrained_parts(config, ["heads.eva_bimanual"]),
        compile=True,
    )
    assert model.config.rdt_layers == 4 and model.config.to_dict()["head"] == "rdt"
    for name, value in model.heads["eva_bimanual"].state_dict().items():
        assert torch.equal(reloaded.heads["eva_bimanual"].state_dict()[name], value), name
    assert reloaded.heads["eva_bimanual"]._compiled_call_impl is not None
    assert model.heads["eva_bimanual"]._compiled_call_impl is None


def test_hpts_own_head_settings_are_carried_and_change_nothing() -> None:
    """An RDT config composed from an HPT one takes its flow/regression head settings."""
    plain = policy()
    composed = policy(head_layers=3, regression_loss="mse")
    assert composed.config.head == "rdt" and composed.config.head_layers == 3
    weights = plain.state_dict()
    assert list(composed.state_dict()) == list(weights)
    assert all(torch.equal(composed.state_dict()[k], v) for k, v in weights.items())
    data = batch("eva_bimanual")
    assert torch.equal(_loss(plain, data), _loss(composed, data))
