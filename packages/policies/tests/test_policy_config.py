"""Policy configs: checked when made, converted to their fields' types, plain data both ways."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from polymimic_policies import HPTConfig, PiConfig, RDTConfig


def test_hydra_and_json_values_become_the_fields_types() -> None:
    config = HPTConfig(
        resnet_blocks=[1, 1, 1, 1],  # type: ignore[arg-type]  # a list, as Hydra and JSON give
        mlp_ratio=4,
        shared_stems={"front_1": "front"},
        pretrained={"trunk": {"path": "t.safetensors", "sha256": "0" * 64}},
    )
    assert config.resnet_blocks == (1, 1, 1, 1) and isinstance(config.mlp_ratio, float)
    assert config == HPTConfig(
        resnet_blocks=(1, 1, 1, 1),
        shared_stems={"front_1": "front"},
        pretrained={"trunk": {"path": "t.safetensors", "sha256": "0" * 64}},
    )
    slots = PiConfig(paligemma_path=Path("/models/p"), image_slots={"base_0_rgb": ["top", "f"]})
    assert slots.paligemma_path == "/models/p" and slots.image_slots == {"base_0_rgb": ("top", "f")}


@pytest.mark.parametrize(
    "config",
    [
        HPTConfig(),
        HPTConfig(d_model=64, resnet_blocks=(1, 2, 1, 1), shared_stems={"prompt": "text"}),
        RDTConfig(use_prompt=True, rdt_width=32, train_timesteps=50),
        PiConfig(paligemma_path="/p", variant="pi0", image_slots={"base_0_rgb": ("a", "b")}),
        PiConfig(paligemma_path="/p", max_token_len=64, image_slots={"base_0_rgb": "a"}),
    ],
)
def test_to_dict_is_plain_data_that_from_dict_rebuilds(config) -> None:
    data = config.to_dict()
    assert json.loads(json.dumps(data)) == data
    assert list(data) == [f.name for f in dataclasses.fields(config) if f.name in data]
    assert type(config).from_dict(json.loads(json.dumps(data))) == config


def test_from_dict_names_a_key_that_is_not_a_field() -> None:
    with pytest.raises(ValueError, match=r"^dmodel: not a field of HPTConfig; its fields are"):
        HPTConfig.from_dict({"dmodel": 64})
    with pytest.raises(ValueError, match="rdt_width: not a field of HPTConfig"):
        HPTConfig.from_dict(RDTConfig().to_dict())
    with pytest.raises(ValueError, match=r"head: 'flow' is not one of \['rdt'\]"):
        RDTConfig.from_dict(HPTConfig().to_dict())
    with pytest.raises(ValueError, match="paligemma_path: missing; PiConfig has no default"):
        PiConfig.from_dict({"variant": "pi0"})
    with pytest.raises(ValueError, match="a config is a mapping"):
        HPTConfig.from_dict([("d_model", 64)])  # type: ignore[arg-type]


def test_configs_are_frozen_and_replace_checks_again() -> None:
    config = HPTConfig()
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.d_model = 256  # type: ignore[misc]
    with pytest.raises(ValueError, match="num_heads: 4 does not divide d_model=30"):
        dataclasses.replace(config, d_model=30)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: HPTConfig(d_model="wide"), r"d_model: must be int, got 'wide'"),  # type: ignore[arg-type]
        (lambda: HPTConfig(trunk_layers=True), r"trunk_layers: must be int, got True"),
        (lambda: HPTConfig(resnet_blocks=(2, 2, 2)), r"resnet_blocks: four positive counts"),
        (lambda: HPTConfig(readout_tokens=-1), r"readout_tokens: must be an integer >= 0"),
        (lambda: HPTConfig(drop_path=1.0), r"drop_path: must be in \[0, 1\), got 1.0"),
        (lambda: HPTConfig(regression_loss="huber"), r"regression_loss: 'huber' is not one of"),
        (lambda: HPTConfig(pretrained={"trunk": {"path": "x"}}), r"pretrained.trunk: needs"),
        (lambda: HPTConfig(head="rdt"), r"head: 'rdt' is not one of \['flow', 'regression'\]"),
        (lambda: RDTConfig(head="regression"), r"head: 'regression' is not one of \['rdt'\]"),
        (lambda: PiConfig(paligemma_path=None), r"paligemma_path: must be str or a path"),  # type: ignore[arg-type]
        (lambda: PiConfig(paligemma_path="/p", variant="pi1"), r"variant: 'pi1' is not one of"),
        (lambda: PiConfig(paligemma_path="/p", expert_width=33), r"expert_width: must be even"),
        (lambda: PiConfig(paligemma_path="/p", max_token_len=0), r"max_token_len: must be a"),
        (lambda: PiConfig(paligemma_path="/p", image_slots={"a": 1}), r"image_slots.a: must be"),  # type: ignore[dict-item]
    ],
)
def test_a_field_that_cannot_work_is_named(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_defaults_each_model_keeps() -> None:
    assert HPTConfig().sample_steps == 10 and RDTConfig().sample_steps == 5
    assert PiConfig(paligemma_path="/p").token_len == 200
    assert PiConfig(paligemma_path="/p", variant="pi0").token_len == 48
    assert RDTConfig(
        pretrained={"trunk": {"path": "x", "sha256": "0"}}
    ).without_initial_weights() == (RDTConfig())
    pi = PiConfig(paligemma_path="/p").without_initial_weights()
    assert pi.load_base_weights is False and pi.paligemma_path == "/p"
