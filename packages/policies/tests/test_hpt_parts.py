"""HPT's parts: the text stem, pretrained weights by hash, devices, and compilation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from polymimic_policies import HPTConfig, HPTPolicy, PretrainedWeightsError, pretrained_parts
from polymimic_policies.stems import TextStem

SPEC = {
    "eva": {"state_dim": 8, "action_dim": 8, "history": 2, "horizon": 4, "cameras": ["front_1"]}
}
TINY = {"d_model": 32, "num_heads": 2, "image_tokens": 2, "resnet_blocks": (1, 1, 1, 1)}


def hpt(**options) -> HPTPolicy:
    return HPTPolicy(HPTConfig(**(TINY | options)), SPEC)


def _batch(prompts: list[str]) -> dict:
    size = len(prompts)
    g = torch.Generator().manual_seed(0)
    return {
        "embodiment": "eva",
        "images.front_1": torch.randint(0, 256, (size, 3, 32, 40), dtype=torch.uint8, generator=g),
        "state": torch.randn(size, 2, 8, generator=g),
        "actions": torch.randn(size, 4, 8, generator=g),
        "action_mask": torch.ones(size, 4, dtype=torch.bool),
        "prompt": prompts,
    }


def test_a_prompts_tokens_do_not_depend_on_the_padding_its_batch_needs() -> None:
    torch.manual_seed(0)
    stem = TextStem(d_model=32, num_tokens=3, num_heads=2).eval()
    alone = stem(["fold"])
    padded = stem(["fold", "put the red cup on the blue plate, then push it left"])
    torch.testing.assert_close(padded[:1], alone, rtol=1e-5, atol=1e-6)
    empty = stem(["", "x"])
    assert torch.isfinite(empty).all() and not torch.allclose(empty[0], empty[1])


def test_the_policy_output_for_a_prompt_is_the_same_in_any_batch() -> None:
    torch.manual_seed(0)
    policy = hpt(use_prompt=True, head="regression").eval()
    one = policy.sample_actions(_batch(["stack the blocks"]))
    two = _batch(["stack the blocks", "a much longer prompt that pads the first one a lot"])
    two["images.front_1"][:1] = _batch(["x"])["images.front_1"]
    two["state"][:1] = _batch(["x"])["state"]
    torch.testing.assert_close(policy.sample_actions(two)[:1], one, rtol=1e-5, atol=1e-5)
    no_prompt = _batch(["", ""])
    del no_prompt["prompt"]  # a batch without prompts reads as empty prompts
    assert torch.equal(policy.sample_actions(no_prompt), policy.sample_actions(_batch(["", ""])))


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    torch.manual_seed(1)
    return hpt().save_pretrained(tmp_path / "lab-a")


def test_a_saved_trunk_starts_another_policy_and_is_never_reinitialised(saved: Path) -> None:
    parts = pretrained_parts(saved, ["trunk"])
    torch.manual_seed(2)
    policy = hpt(pretrained=parts)
    from safetensors.torch import load_file

    expected = load_file(parts["trunk"]["path"])
    torch.optim.AdamW([p for g in policy.param_groups(1e-3, 1e-4) for p in g["params"]])
    for key, value in policy.trunk.state_dict().items():
        assert torch.equal(value, expected[key]), key
    torch.manual_seed(1)
    source = hpt()
    head = next(iter(policy.heads.values())).state_dict()
    assert not all(
        torch.equal(v, next(iter(source.heads.values())).state_dict()[k]) for k, v in head.items()
    )  # the rest was not loaded: initialised afresh
    config = json.loads(saved.read_text())
    assert set(config["parts"]) == {"trunk", "stems.eva__state", "stems.eva__front_1", "heads.eva"}
    assert config["policy"] == {"name": "hpt", "config": HPTConfig(**TINY).to_dict()}


def test_a_file_that_is_not_the_named_one_is_refused_with_both_hashes(saved: Path) -> None:
    parts = pretrained_parts(saved, ["trunk"])
    wanted = "0" * 64
    with pytest.raises(PretrainedWeightsError) as caught:
        hpt(pretrained={"trunk": {"path": parts["trunk"]["path"], "sha256": wanted}})
    assert parts["trunk"]["path"] in str(caught.value)
    assert parts["trunk"]["sha256"] in str(caught.value) and wanted in str(caught.value)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"trunk_layers": 3}, r"12 missing parameter\(s\), e.g. blocks\.2\.norm1\.weight"),
        ({"d_model": 64}, r"shape parameter\(s\), e.g. blocks\.0\.norm1\.weight \(file \(32,\)"),
    ],
)
def test_a_part_that_does_not_fit_names_the_parameter(
    saved: Path, overrides: dict, message: str
) -> None:
    with pytest.raises(PretrainedWeightsError, match=message):
        hpt(pretrained=pretrained_parts(saved, ["trunk"]), **overrides)


def test_the_300m_size_builds_on_the_meta_device_without_allocating() -> None:
    with torch.device("meta"):
        policy = HPTPolicy(
            HPTConfig(d_model=840, trunk_layers=36, num_heads=10, resnet_blocks=(2, 2, 2, 2)), SPEC
        )
    assert {t.device.type for t in [*policy.parameters(), *policy.buffers()]} == {"meta"}
    trunk = sum(p.numel() for p in policy.trunk.parameters())
    assert abs(trunk - 300e6) / 300e6 < 0.05


def test_building_a_policy_makes_no_cuda_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("a policy constructor touched CUDA")

    for name in ("is_available", "current_device", "device_count", "_lazy_init", "init"):
        monkeypatch.setattr(torch.cuda, name, refuse)
    policy = hpt(use_prompt=True)
    assert {p.device.type for p in policy.parameters()} == {"cpu"}


# Dynamo reads .grad of non-leaf tensors while tracing; torch warns about its own access.
@pytest.mark.filterwarnings("ignore:The .grad attribute of a Tensor that is not a leaf")
def test_compiled_trunk_and_heads_train_on_the_cpu_and_keep_their_keys() -> None:
    torch.manual_seed(0)
    eager = hpt()
    torch.manual_seed(0)
    compiled = hpt(compile=True)
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    optimizer = torch.optim.AdamW(compiled.parameters(), lr=1e-3)
    for step in range(3):
        torch.manual_seed(step)
        loss = compiled.compute_loss(_batch(["", "", ""]))["loss"]
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        assert torch.isfinite(loss)
