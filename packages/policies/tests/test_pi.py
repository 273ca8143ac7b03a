"""Pi (pi0 / pi0.5) on a tiny random PaliGemma written by make_tiny_paligemma."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from polymimic_policies import ActionPrefix
from polymimic_policies.paligemma_loading import (
    TINY_DIRNAME,
    ensure_tiny_paligemma,
    load_paligemma,
    make_tiny_paligemma,
    paligemma_3b_config,
)
from polymimic_policies.pi import ExpertLayer, PiConfig, PiPolicy, pi_parameter_count

B, T, A, S = 2, 6, 4, 5
EMBODIMENT = {"state_dim": S, "action_dim": A, "history": 2, "horizon": T}
SMALL: dict[str, Any] = {"expert_width": 32, "expert_mlp_dim": 64, "max_token_len": 64}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_paligemma(tmp_path_factory.mktemp("cache"))


def make_policy(tiny: Path, cameras=("front_1", "left_wrist"), seed: int = 0, **kwargs) -> PiPolicy:
    torch.manual_seed(seed)
    embodiments = {"arm": {**EMBODIMENT, "cameras": list(cameras)}}
    return PiPolicy(PiConfig(paligemma_path=tiny, **(SMALL | kwargs)), embodiments)


def make_batch(seed: int = 0, cameras=("front_1", "left_wrist")) -> dict:
    g = torch.Generator().manual_seed(seed)
    batch = {
        "embodiment": "arm",
        "state": torch.randn(B, 2, S, generator=g),
        "actions": torch.randn(B, T, A, generator=g),
        "action_mask": torch.ones(B, T, dtype=torch.bool),
        "prompt": ["pick up the cube", "push_it\nleft"],
    }
    sizes = {"front_1": (40, 48), "left_wrist": (32, 32), "right_wrist": (24, 24)}
    for camera in cameras:
        batch[f"images.{camera}"] = torch.randint(0, 256, (B, 3, *sizes[camera]), generator=g).to(
            torch.uint8
        )
    return batch


def noise_for(seed: int = 0) -> torch.Tensor:
    return torch.randn(B, T, A, generator=torch.Generator().manual_seed(seed))


# ----- the tiny directory and loading -------------------------------------------------------


def test_tiny_directory_round_trips_through_the_loading_path(tiny: Path) -> None:
    assert tiny.name == TINY_DIRNAME
    files = {p.name for p in tiny.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= files
    stamp = (tiny / "model.safetensors").stat().st_mtime_ns
    assert make_tiny_paligemma(tiny) == tiny  # idempotent: nothing rewritten
    assert (tiny / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in tiny.parent.iterdir() if p.name.startswith(".")]  # no temp left

    # transformers writes PaliGemma's original checkpoint names; map them to the modules'
    renames = {
        "language_model.model.": "model.language_model.",
        "vision_tower.": "model.vision_tower.",
        "multi_modal_projector.": "model.multi_modal_projector.",
    }
    saved = {}
    for name, tensor in load_file(tiny / "model.safetensors").items():
        old = next(o for o in renames if name.startswith(o))
        saved[renames[old] + name.removeprefix(old)] = tensor
    policy = make_policy(tiny)
    loaded = dict(policy.paligemma.named_parameters())
    assert set(saved) == set(loaded)
    for name, tensor in saved.items():
        assert torch.equal(loaded[name].detach(), tensor), name
    # Gemma ties lm_head to the embeddings; the tie survives loading
    assert policy.paligemma.lm_head.weight is (
        policy.paligemma.model.language_model.embed_tokens.weight
    )
    assert load_paligemma(tiny).dtype == torch.float32


def test_resume_builds_without_the_weights_file(tiny: Path, tmp_path: Path) -> None:
    copy = tmp_path / "resume"
    shutil.copytree(tiny, copy)
    (copy / "model.safetensors").rename(copy / "elsewhere.bin")
    policy = make_policy(copy, load_base_weights=False)
    assert policy.config.load_base_weights is False
    out = policy.compute_loss(make_batch())
    assert torch.isfinite(out["loss"])
    with pytest.raises(FileNotFoundError, match=str(copy)):
        make_policy(copy, load_base_weights=True)
    missing = tmp_path / "no-such-paligemma"
    with pytest.raises(FileNotFoundError, match=str(missing)):
        make_policy(missing)


def test_bad_arguments_are_named(tiny: Path) -> None:
    with pytest.raises(ValueError, match="variant"):
        make_policy(tiny, variant="pi1")
    with pytest.raises(ValueError, match="image_slots"):
        make_policy(tiny, cameras=("front_1", "top"))


# ----- prefix: masked slots, padding, computed once ------------------------------------------


def test_masked_slot_changes_nothing(tiny: Path) -> None:
    # front_1 fills base_0_rgb; the two wrist slots are masked for this embodiment
    policy = make_policy(tiny, cameras=("front_1",)).eval()
    batch = make_batch(cameras=("front_1",))
    reference = policy.sample_actions(batch, noise=noise_for())
    for seed in (1, 2):  # whatever a masked slot's camera holds
        extra = make_batch(seed, cameras=("left_wrist", "right_wrist"))
        noisy = batch | {k: v for k, v in extra.items() if k.startswith("images.")}
        torch.testing.assert_close(policy.sample_actions(noisy, noise=noise_for()), reference)
    # ... and the same as a policy that has no such slots at all (same weights)
    single = make_policy(tiny, cameras=("front_1",), image_slots={"base_0_rgb": "front_1"})
    single.load_state_dict(policy.state_dict())
    torch.testing.assert_close(single.eval().sample_actions(batch, noise=noise_for()), reference)
    # while the camera the slot does take matters
    other = batch | {"images.front_1": make_batch(3)["images.front_1"]}
    assert not torch.allclose(policy.sample_actions(other, noise=noise_for()), reference)


def test_a_slot_takes_the_first_camera_it_lists_that_an_embodiment_has(tiny: Path) -> None:
    """Cotraining embodiments whose cameras are named differently (eva's front_1, an
    imported LeRobot arm's top): one slot lists both."""
    listed = {"base_0_rgb": ["top", "front_1"], "left_wrist_0_rgb": ["wrist", "left_wrist"]}
    both = PiPolicy(
        PiConfig(paligemma_path=tiny, image_slots=listed, **SMALL),
        {
            "arm": {**EMBODIMENT, "cameras": ["front_1", "left_wrist"]},
            "lerobot/koch": {**EMBODIMENT, "cameras": ["top", "wrist"]},
        },
    ).eval()
    assert both.slot_cameras["lerobot/koch"] == {"base_0_rgb": "top", "left_wrist_0_rgb": "wrist"}
    assert both.slot_cameras["arm"] == {"base_0_rgb": "front_1", "left_wrist_0_rgb": "left_wrist"}
    plain = make_policy(
        tiny, image_slots={"base_0_rgb": "front_1", "left_wrist_0_rgb": "left_wrist"}
    )
    loaded = plain.load_state_dict(both.state_dict(), strict=False)
    assert not loaded.missing_keys  # the same weights for `arm`
    batch = make_batch()
    torch.testing.assert_close(
        both.sample_actions(batch, noise=noise_for()),
        plain.eval().sample_actions(batch, noise=noise_for()),
    )
    koch = {
        k.replace("front_1", "top").replace("left_wrist", "wrist"): v for k, v in batch.items()
    } | {"embodiment": "lerobot/koch"}
    reference = both.sample_actions(koch, noise=noise_for())
    other = koch | {"images.top": make_batch(3)["images.front_1"]}  # its base slot is read
    assert not torch.allclose(both.sample_actions(other, noise=noise_for()), reference)


def test_prompt_padding_changes_nothing(tiny: Path) -> None:
    short = make_policy(tiny, max_token_len=64)
    long = make_policy(tiny, max_token_len=96)
    long.load_state_dict(short.state_dict())
    batch = make_batch()
    _, valid = short.tokenize(batch)
    assert valid.any(1).all() and (~valid).any(1).all()  # real tokens and padding in each row
    torch.testing.assert_close(
        long.sample_actions(batch, noise=noise_for()),
        short.sample_actions(batch, noise=noise_for()),
    )
    losses = []
    for policy in (short, long):
        torch.manual_seed(5)
        losses.append(policy.compute_loss(batch)["loss"])
    torch.testing.assert_close(losses[0], losses[1])
    changed = batch | {"prompt": ["put down the cube", "push_it\nleft"]}
    assert not torch.allclose(
        short.sample_actions(changed, noise=noise_for()),
        short.sample_actions(batch, noise=noise_for()),
    )


def _joint_expert_output(
    policy: PiPolicy, batch: dict, tokens: torch.Tensor, cond: torch.Tensor | None
) -> torch.Tensor:
    """openpi's one-pass form: prefix and expert tokens in one attention per layer.

    Masks from the cumulative "autoregressive" flags (big_vision's make_att_2d_masks),
    positions from the running count of valid tokens; plain softmax attention.
    """
    embs, valid = policy.embed_prefix(batch)
    language = policy.paligemma.model.language_model
    size, prefix_len, _ = embs.shape
    length = tokens.shape[1]
    pad = torch.cat([valid, torch.ones(size, length, dtype=torch.bool)], 1)
    suffix_ar = [1] * (length - T) + [1] + [0] * (T - 1)  # pi0: state block, then actions
    flags = torch.tensor([0] * prefix_len + suffix_ar)
    cum = flags.cumsum(0)
    allowed = (cum[None, :] <= cum[:, None])[None] & pad[:, None, :] & pad[:, :, None]
    allowed = allowed | torch.eye(prefix_len + length, dtype=torch.bool)
    positions = pad.long().cumsum(1) - 1
    cos, sin = language.rotary_emb(embs, positions)
    cos, sin = cos[:, None], sin[:, None]

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin

    def heads(x: torch.Tensor, d: int) -> torch.Tensor:
        return x.view(size, x.shape[1], -1, d).transpose(1, 2)

    hp, hs = embs, tokens
    for lm, ex in zip(language.layers, policy.expert.layers, strict=True):
        assert isinstance(ex, ExpertLayer)
        d = lm.self_attn.head_dim
        xp = lm.input_layernorm(hp)
        xs, gate = ex.input_layernorm(hs, cond)
        q = rotate(heads(torch.cat([lm.self_attn.q_proj(xp), ex.q_proj(xs)], 1), d))
        k = rotate(heads(torch.cat([lm.self_attn.k_proj(xp), ex.k_proj(xs)], 1), d))
        v = heads(torch.cat([lm.self_attn.v_proj(xp), ex.v_proj(xs)], 1), d)
        groups = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
        scores = (q @ k.transpose(-1, -2)) * d**-0.5
        scores = scores.masked_fill(~allowed[:, None], float("-inf"))
        out = (scores.softmax(-1) @ v).transpose(1, 2).flatten(2)
        hp = hp + lm.self_attn.o_proj(out[:, :prefix_len])
        hp = hp + lm.mlp(lm.post_attention_layernorm(hp))
        attn = ex.o_proj(out[:, prefix_len:])
        hs = hs + (attn if gate is None else attn * gate)
        xs, gate = ex.post_attention_layernorm(hs, cond)
        gated = torch.nn.functional.gelu(ex.gate_proj(xs), approximate="tanh") * ex.up_proj(xs)
        mlp = ex.down_proj(gated)
        hs = hs + (mlp if gate is None else mlp * gate)
    return policy.expert.norm(hs, cond)[0]


@pytest.mark.parametrize("variant", ["pi05", "pi0"])
def test_prefix_runs_once_and_matches_joint_attention(tiny: Path, variant: str) -> None:
    policy = make_policy(tiny, variant=variant, sample_steps=4).eval()
    batch = make_batch()
    calls = {"vision": 0, "language": 0}
    language = policy.paligemma.model.language_model
    hooks = [
        policy.paligemma.model.vision_tower.register_forward_hook(
            lambda *_: calls.__setitem__("vision", calls["vision"] + 1)
        ),
        language.layers[0].input_layernorm.register_forward_hook(
            lambda *_: calls.__setitem__("language", calls["language"] + 1)
        ),
    ]
    steps = []
    hooks.append(
        policy.expert.register_forward_hook(lambda _m, args, out: steps.append((args, out)))
    )
    actions = policy.sample_actions(batch, noise=noise_for())
    for hook in hooks:
        hook.remove()
    assert calls == {"vision": 1, "language": 1}
    assert len(steps) == 4

    # each Euler step's expert output equals the one-pass joint computation
    with torch.no_grad():
        for (tokens, cond, *_), out in steps:
            joint = _joint_expert_output(policy, batch, tokens, cond)
            torch.testing.assert_close(out, joint, atol=1e-5, rtol=1e-4)

        # and the whole chunk equals a naive loop recomputing the prefix at every step
        x, dt = noise_for(), 1.0 / 4
        for i in range(4):
            prefix, valid = policy.encode_prefix(batch)
            t = torch.full((B,), 1.0 - i * dt)
            x = x - dt * policy.velocity(batch, x, t, prefix, valid)
    torch.testing.assert_close(actions, x)


# ----- sampling and loss ---------------------------------------------------------------------


def test_sampling_is_deterministic_given_seed_or_noise(tiny: Path) -> None:
    policy = make_policy(tiny).eval()
    batch = make_batch()
    first = policy.sample_actions(batch, generator=torch.Generator().manual_seed(7))
    again = policy.sample_actions(batch, generator=torch.Generator().manual_seed(7))
    other = policy.sample_actions(batch, generator=torch.Generator().manual_seed(8))
    assert first.shape == (B, T, A) and first.dtype == torch.float32
    torch.testing.assert_close(first, again, rtol=0, atol=0)
    assert not torch.allclose(first, other)
    noise = torch.randn(B, T, A, generator=torch.Generator().manual_seed(7))
    torch.testing.assert_close(policy.sample_actions(batch, noise=noise), first, rtol=0, atol=0)
    with pytest.raises(ValueError, match="noise"):
        policy.sample_actions(batch, noise=torch.zeros(B, T + 1, A))


@pytest.mark.parametrize("variant", ["pi05", "pi0"])
def test_padded_steps_change_neither_loss_nor_gradients(tiny: Path, variant: str) -> None:
    policy = make_policy(tiny, variant=variant)
    batch = make_batch()
    batch["action_mask"][:, -2:] = False
    results = []
    for fill in (0.0, 5.0, None):
        actions = batch["actions"].clone()
        if fill is None:
            actions[:, 0] += 1.0  # a valid step: this one must change the loss
        else:
            actions[:, -2:] = fill
        policy.zero_grad()
        torch.manual_seed(3)
        loss = policy.compute_loss(batch | {"actions": actions})["loss"]
        loss.backward()
        grads = [p.grad.clone() for p in policy.parameters() if p.grad is not None]
        results.append((loss.detach(), grads))
    (loss0, grads0), (loss5, grads5), (moved, _) = results
    torch.testing.assert_close(loss0, loss5)
    for a, b in zip(grads0, grads5, strict=True):
        torch.testing.assert_close(a, b)
    assert not torch.allclose(loss0, moved)


def test_pi0_trains_and_samples(tiny: Path) -> None:
    policy = make_policy(tiny, variant="pi0")
    assert not hasattr(policy, "time_mlp") and "arm" in policy.state_in
    batch = make_batch()
    out = policy.compute_loss(batch)
    assert set(out) == {"loss", "flow_loss"} and not out["flow_loss"].requires_grad
    out["loss"].backward()
    assert policy.state_in["arm"].weight.grad is not None
    assert policy.prompts(batch) == ["pick up the cube\n", "push it left\n"]
    actions = policy.sample_actions(batch, generator=torch.Generator().manual_seed(0))
    assert actions.shape == (B, T, A) and torch.isfinite(actions).all()


def test_pi05_writes_the_state_into_the_prompt(tiny: Path) -> None:
    policy = make_policy(tiny)
    batch = make_batch()
    batch["state"][0, -1] = torch.tensor([-1.0, 1.0, 0.0, -2.0, 0.999])
    text = policy.prompts(batch)[0]
    assert text == "Task: pick up the cube, State: 0 255 128 0 255;\nAction: "


def _held_loss(policy: PiPolicy, batch: dict) -> float:
    """The loss at 8 fixed draws of time and noise (training draws them at random)."""
    losses = []
    with torch.no_grad():
        for seed in range(8):
            torch.manual_seed(100 + seed)
            losses.append(policy.compute_loss(batch)["loss"].item())
    return sum(losses) / len(losses)


def test_loss_falls_on_a_fixed_batch(tiny: Path) -> None:
    policy = make_policy(tiny)
    batch = make_batch()
    optimizer = torch.optim.AdamW(policy.param_groups(lr=1e-2, backbone_lr=1e-3), weight_decay=0)
    before = _held_loss(policy, batch)
    torch.manual_seed(0)
    for _ in range(30):
        loss = policy.compute_loss(batch)["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    after = _held_loss(policy, batch)
    assert after < 0.8 * before, (before, after)


# ----- parameters ----------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["pi05", "pi0"])
def test_every_trainable_parameter_gets_a_gradient(tiny: Path, variant: str) -> None:
    policy = make_policy(tiny, variant=variant)
    policy.compute_loss(make_batch())["loss"].backward()
    no_grad = [n for n, p in policy.named_parameters() if p.requires_grad and p.grad is None]
    assert no_grad == []  # as the class docstring says: nothing trainable is left unused
    last = "paligemma.model.language_model.layers.1"
    assert sorted(policy.unused_frozen) == sorted(
        [
            f"{last}.self_attn.q_proj.weight",
            f"{last}.self_attn.o_proj.weight",
            f"{last}.post_attention_layernorm.weight",
            f"{last}.mlp.gate_proj.weight",
            f"{last}.mlp.up_proj.weight",
            f"{last}.mlp.down_proj.weight",
            "paligemma.model.language_model.norm.weight",
        ]
    )
    frozen = [n for n, p in policy.named_parameters() if not p.requires_grad]
    assert frozen == policy.unused_frozen
    for part in ("q_proj", "o_proj", "post_attention_layernorm", "mlp", "final norm", "FROZEN"):
        assert part in (PiPolicy.__doc__ or "")
    groups = policy.param_groups(lr=1e-3, backbone_lr=1e-4)
    assert [g["name"] for g in groups] == ["backbone", "policy"]
    assert [g["lr"] for g in groups] == [1e-4, 1e-3]
    in_groups = {id(p) for g in groups for p in g["params"]}
    assert in_groups == {id(p) for p in policy.parameters() if p.requires_grad}
    assert all(id(p) in {id(q) for q in groups[1]["params"]} for p in policy.expert.parameters())


def test_pi05_3b_counts_on_the_meta_device(tiny: Path, tmp_path: Path) -> None:
    counts = pi_parameter_count(paligemma_3b_config(), expert_width=1024, expert_mlp_dim=4096)
    print(f"pi05 (PaliGemma 3B + 300M expert) parameters: {counts}")
    assert 2.85e9 < counts["paligemma"] < 3.0e9
    assert 3.2e9 < counts["total"] < 3.5e9
    # the policy itself, from a config-only directory, on the meta device
    directory = tmp_path / "paligemma-3b-config"
    directory.mkdir()
    paligemma_3b_config().save_pretrained(directory)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(tiny / name, directory / name)
    embodiments = {"robot": {"state_dim": 32, "action_dim": 32, "history": 1, "horizon": 50}}
    with torch.device("meta"):
        policy = PiPolicy(PiConfig(paligemma_path=directory, load_base_weights=False), embodiments)
    assert all(p.is_meta for p in policy.parameters())
    assert sum(p.numel() for p in policy.parameters()) == counts["total"]


def test_pi_inpaints_the_frozen_steps_of_the_previous_chunk(tiny: Path) -> None:
    policy = make_policy(tiny).eval()
    batch = make_batch()
    assert policy.can_inpaint("arm")
    plain = policy.sample_actions(batch, noise=noise_for(7))
    previous = torch.randn(B, T - 1, A, generator=torch.Generator().manual_seed(9))
    prefix = ActionPrefix.of(previous, delay=2, horizon=T)
    guided = policy.sample_actions(batch, noise=noise_for(7), prefix=prefix)
    before = (plain[:, :2] - previous[:, :2]).abs().mean()
    after = (guided[:, :2] - previous[:, :2]).abs().mean()
    assert after < 0.1 * before, (before, after)
    assert torch.isfinite(guided).all()
