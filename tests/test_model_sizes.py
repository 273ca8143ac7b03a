"""Each named HPT size config holds the parameters its name says (within 5%), counted as
HPT counts its sizes (the shared trunk) on the meta device: nothing is allocated."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

import polymimic_train.configs
from polymimic_data.embodiments import policy_embodiments
from polymimic_policies import HPTPolicy, RDTPolicy, build_policy

CONFIGS = Path(polymimic_train.configs.__file__).parent / "model"
NAMED = {
    p.stem: float(m[1]) * {"m": 1e6, "b": 1e9}[m[2]]
    for p in CONFIGS.glob("hpt_*.yaml")
    if (m := re.fullmatch(r"hpt_(\d+)([mb])", p.stem))
}


def test_every_named_size_exists() -> None:
    assert set(NAMED) == {"hpt_3m", "hpt_12m", "hpt_50m", "hpt_300m", "hpt_1b", "hpt_3b"}


@pytest.mark.parametrize("model", sorted(NAMED))
def test_a_named_size_holds_what_its_name_says(model: str) -> None:
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}", "name=sizes"])
    with torch.device("meta"):
        policy = build_policy(instantiate(cfg.model), policy_embodiments(cfg.data))
    assert isinstance(policy, HPTPolicy)
    assert {p.device.type for p in policy.parameters()} == {"meta"}
    trunk = sum(p.numel() for p in policy.trunk.parameters())
    assert abs(trunk - NAMED[model]) / NAMED[model] < 0.05, f"{model}: {trunk / 1e6:.1f}M"


def _meta_policy(model: str, *overrides: str):
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}", "name=sizes", *overrides])
    with torch.device("meta"):
        return build_policy(instantiate(cfg.model), policy_embodiments(cfg.data))


def test_rdt_1b_has_rdt_1b_s_head() -> None:
    """RDT-1B: width 2048, 28 blocks, 32 heads, MLP at the width: about 1.2B in the head."""
    policy = _meta_policy("rdt_1b")
    assert isinstance(policy, RDTPolicy)
    (head,) = policy.heads.values()
    count = sum(p.numel() for p in head.parameters())
    assert 1.15e9 < count < 1.25e9, f"{count / 1e9:.3f}B"
    assert {p.device.type for p in policy.parameters()} == {"meta"}
