"""`cpu_size(model)`: a GPU-size model config cut to a CPU size, width and depth only."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module

from polymimic_train.testing import cpu_size


def _model(*overrides: str):
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        return compose("train", overrides=["name=cut", *overrides]).model


def test_a_size_of_hpt_cut_keeps_every_choice_but_width_and_depth() -> None:
    whole, cut = _model("model=hpt_300m"), _model("model=hpt_300m", *cpu_size("hpt_300m"))
    changed = {key for key in whole if whole[key] != cut[key]}
    assert changed == {"d_model", "num_heads", "trunk_layers"}
    assert cut.d_model < whole.d_model and cut.trunk_layers < whole.trunk_layers


def test_pi_is_cut_at_its_expert() -> None:
    whole, cut = _model("model=pi05"), _model("model=pi05", *cpu_size("pi05"))
    assert {key for key in whole if whole[key] != cut[key]} == {"expert_width", "expert_mlp_dim"}


def test_a_family_without_a_cut_is_named() -> None:
    with pytest.raises(KeyError, match=r"no CPU size for model=rdt_1b: families \['hpt', 'pi'\]"):
        cpu_size("rdt_1b")
