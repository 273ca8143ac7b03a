"""Policies by registered name: records as plain data, and records that name anything else."""

from __future__ import annotations

import importlib
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from polymimic_policies import (
    HPTConfig,
    HPTPolicy,
    PiConfig,
    PiPolicy,
    Policy,
    PolicyConfig,
    RDTConfig,
    RDTPolicy,
    UnregisteredPolicyError,
    build_policy,
    policy_class,
    policy_from_record,
    policy_record,
    register_policy,
    registered_policies,
)
from polymimic_policies.paligemma_loading import ensure_tiny_paligemma

SPECS = {
    "eva": {"state_dim": 8, "action_dim": 8, "history": 2, "horizon": 4, "cameras": ["front_1"]},
    "aria": {
        "state_dim": 6,
        "action_dim": 6,
        "history": 1,
        "horizon": 3,
        "cameras": ["front_1"],
        "action_groups": [["left", 3], ["right", 3]],
    },
}
TINY = {"d_model": 32, "num_heads": 2, "image_tokens": 2, "resnet_blocks": (1, 1, 1, 1)}
SENTINEL = "polymimic_record_sentinel"  # a module that writes a file when imported


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_tiny_paligemma(tmp_path_factory.mktemp("cache"))


def tiny_config(name: str, tiny: Path) -> PolicyConfig:
    return {
        "hpt": lambda: HPTConfig(**TINY, use_prompt=True, shared_stems={"front_1": "front"}),
        "rdt": lambda: RDTConfig(**TINY, rdt_width=16, rdt_layers=2, rdt_heads=2),
        "pi": lambda: PiConfig(
            paligemma_path=tiny,
            expert_width=32,
            expert_mlp_dim=64,
            image_slots={"base_0_rgb": ["top", "front_1"]},
        ),
    }[name]()


def test_the_three_policies_are_registered_with_what_they_declare() -> None:
    assert registered_policies() == ["hpt", "pi", "rdt"]
    assert policy_class("hpt") is HPTPolicy and policy_class("rdt") is RDTPolicy
    assert policy_class("pi") is PiPolicy
    assert [policy_class(n).rotation_kinds for n in ("hpt", "rdt", "pi")] == [
        None,
        None,
        ("rot6d",),
    ]
    assert {f: w.marker for f, w in PiPolicy.local_weights.items()} == {
        "paligemma_path": "config.json"
    }
    assert HPTPolicy.local_weights == RDTPolicy.local_weights == {}
    assert [policy_class(n).config_type for n in ("hpt", "rdt", "pi")] == [
        HPTConfig,
        RDTConfig,
        PiConfig,
    ]


@pytest.mark.parametrize("name", registered_policies())
def test_every_registered_policy_round_trips_through_its_record(name: str, tiny: Path) -> None:
    torch.manual_seed(0)
    policy = build_policy(tiny_config(name, tiny), SPECS)
    assert isinstance(policy, Policy) and type(policy) is policy_class(name)
    record = policy_record(policy)
    assert record["name"] == name
    plain = json.loads(json.dumps(record))  # plain data only
    assert plain == record
    again = policy_from_record(plain, SPECS)
    assert type(again) is type(policy) and again.config == policy.config
    shapes = {k: v.shape for k, v in policy.state_dict().items()}
    assert {k: v.shape for k, v in again.state_dict().items()} == shapes
    assert again.specs == policy.specs


HOSTILE = {  # what Hydra would instantiate, were it handed to `instantiate`
    "_target_": "pathlib.Path.write_text",
    "self": {"_target_": "pathlib.Path", "_args_": ["{tmp}/written"]},
    "data": "pwned",
}


@pytest.fixture
def sentinel(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """A module on sys.path that, were it imported, would write `imported` beside itself."""
    where = tmp_path_factory.mktemp("sentinel")
    (where / f"{SENTINEL}.py").write_text(
        "from pathlib import Path\n"
        "(Path(__file__).parent / 'imported').write_text('yes')\n"
        "def build(*args, **kwargs):\n"
        "    (Path(__file__).parent / 'called').write_text('yes')\n"
    )
    monkeypatch.syspath_prepend(str(where))
    assert SENTINEL not in sys.modules
    yield where
    sys.modules.pop(SENTINEL, None)


@pytest.mark.parametrize(
    "name",
    [
        "hydra.utils.instantiate",
        "pathlib.Path",
        f"{SENTINEL}.build",
        SENTINEL,
        "polymimic_policies.hpt.HPTPolicy",  # a real class, but not by its registered name
        "HPTPolicy",
        "",
    ],
)
def test_a_record_naming_anything_but_a_registered_policy_is_refused_untouched(
    name: str, tmp_path: Path, sentinel: Path
) -> None:
    payload = json.loads(json.dumps(HOSTILE).replace("{tmp}", str(tmp_path)))
    record = {"name": name, "config": payload, "kwargs": payload, "class": name}
    modules = set(sys.modules)
    with pytest.raises(UnregisteredPolicyError, match=re.escape(repr(name))) as caught:
        policy_from_record(record, SPECS)
    assert "hpt" in str(caught.value)  # and the names that are registered
    assert list(tmp_path.iterdir()) == []  # nothing written
    assert SENTINEL not in sys.modules and set(sys.modules) == modules  # nothing imported
    assert not (sentinel / "imported").exists() and not (sentinel / "called").exists()
    # The sentinel does tell: importing it, as the old loader would have, leaves its mark.
    importlib.import_module(SENTINEL)
    assert (sentinel / "imported").exists()


def test_an_old_style_record_naming_a_class_is_refused_untouched(tmp_path: Path) -> None:
    payload = json.loads(json.dumps(HOSTILE).replace("{tmp}", str(tmp_path)))
    record = {"class": "hydra.utils.instantiate", "kwargs": payload}
    with pytest.raises(UnregisteredPolicyError, match=r"no registered policy name"):
        policy_from_record(record, SPECS)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"_target_": "pathlib.Path", "d_model": 32}, "_target_: not a field of HPTConfig"),
        (
            {"shared_stems": {"front_1": {"_target_": "pathlib.Path", "_args_": ["x"]}}},
            "shared_stems.front_1: must be str",
        ),
        (
            {"pretrained": {"trunk": {"path": {"_target_": "pathlib.Path"}, "sha256": "0"}}},
            "pretrained.trunk.path: must be str",
        ),
    ],
)
def test_a_registered_name_with_a_payload_in_its_config_is_refused(
    config: dict, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        policy_from_record({"name": "hpt", "config": config}, SPECS)
    assert list(tmp_path.iterdir()) == []


def test_a_record_with_keys_beside_name_and_config_is_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown keys \['kwargs'\]"):
        policy_from_record({"name": "hpt", "config": TINY, "kwargs": {}}, SPECS)


def test_weights_from_a_checkpoint_read_no_pretrained_parts(tmp_path: Path) -> None:
    missing = {"trunk": {"path": str(tmp_path / "gone.safetensors"), "sha256": "0" * 64}}
    record = {"name": "hpt", "config": HPTConfig(**TINY, pretrained=missing).to_dict()}
    policy = policy_from_record(record, SPECS, weights_from_checkpoint=True)
    assert policy.config == HPTConfig(**TINY)
    with pytest.raises(ValueError, match=r"gone\.safetensors"):  # PretrainedWeightsError
        policy_from_record(record, SPECS)


# Records as 0.3.0's `policy_record` wrote them, before RDTConfig composed HPTConfig's
# stems and trunk with its own head config: RDT's had no head, head_layers or
# regression_loss.
OLD_STEMS_TRUNK = {
    "d_model": 32,
    "trunk_layers": 2,
    "num_heads": 2,
    "mlp_ratio": 4.0,
    "drop_path": 0.0,
    "image_tokens": 2,
    "state_tokens": 2,
    "text_tokens": 4,
    "readout_tokens": 4,
    "image_backbone": "resnet",
    "resnet_blocks": [1, 1, 1, 1],
    "vit_layers": 4,
    "vit_patch_size": 8,
    "freeze_backbone": False,
    "use_prompt": True,
    "text_layers": 2,
    "max_prompt_bytes": 128,
    "shared_stems": {},
}
OLD_RECORDS = {
    "rdt": {
        **OLD_STEMS_TRUNK,
        "shared_head": False,
        "sample_steps": 5,
        "residual_actions": True,
        "pretrained": {},
        "compile": False,
        "rdt_width": 24,
        "rdt_layers": 4,
        "rdt_heads": 2,
        "rdt_mlp_ratio": 1.0,
        "train_timesteps": 100,
    },
    "hpt": {
        **OLD_STEMS_TRUNK,
        "head": "regression",
        "shared_head": False,
        "head_layers": 2,
        "sample_steps": 10,
        "regression_loss": "l1",
        "residual_actions": False,
        "pretrained": {},
        "compile": False,
    },
}
NEW_CONFIGS = {
    "rdt": lambda: RDTConfig(
        **TINY,
        use_prompt=True,
        residual_actions=True,
        rdt_width=24,
        rdt_layers=4,
        rdt_heads=2,
        train_timesteps=100,
    ),
    "hpt": lambda: HPTConfig(**TINY, use_prompt=True, head="regression"),
}


@pytest.mark.parametrize("name", sorted(OLD_RECORDS))
def test_a_record_in_the_old_flat_form_rebuilds_the_same_model(name: str) -> None:
    torch.manual_seed(0)
    old = policy_from_record({"name": name, "config": OLD_RECORDS[name]}, SPECS)
    torch.manual_seed(0)
    new = build_policy(NEW_CONFIGS[name](), SPECS)
    assert type(old) is type(new) and old.config == new.config
    assert isinstance(old.config, HPTConfig)  # RDTConfig too
    assert old.config.head == ("rdt" if name == "rdt" else "regression")
    weights = new.state_dict()
    assert list(old.state_dict()) == list(weights)
    assert all(torch.equal(old.state_dict()[k], v) for k, v in weights.items())
    old.load_state_dict(weights)  # strict: every name as before


def test_build_policy_takes_the_class_from_the_config_and_each_class_its_own_config() -> None:
    assert type(build_policy(RDTConfig(**TINY), SPECS)) is RDTPolicy
    with pytest.raises(TypeError, match="HPTPolicy is built from HPTConfig, not RDTConfig"):
        HPTPolicy(RDTConfig(**TINY), SPECS)

    class Foreign(PolicyConfig):
        pass

    with pytest.raises(UnregisteredPolicyError, match="Foreign"):
        build_policy(Foreign(), SPECS)


def test_unknown_names_and_duplicates_are_refused_by_name() -> None:
    with pytest.raises(UnregisteredPolicyError, match=r"'act'.*\['hpt', 'pi', 'rdt'\]"):
        policy_class("act")
    assert issubclass(UnregisteredPolicyError, ValueError)

    class Impostor(HPTPolicy):
        pass

    with pytest.raises(ValueError, match="policy 'hpt': already registered"):
        register_policy(Impostor)
    with pytest.raises(UnregisteredPolicyError, match="Impostor is not a registered"):
        policy_record(Impostor(HPTConfig(**TINY), SPECS))
    assert registered_policies() == ["hpt", "pi", "rdt"]
