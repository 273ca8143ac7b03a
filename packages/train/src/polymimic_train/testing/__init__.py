"""For tests only (no module of the app imports it): a GPU-size model config, cut for a CPU.

`cpu_size(model)` is the overrides that cut model config `model` (e.g. `hpt_300m`, `pi05`)
to a size a CPU trains in seconds. They change width and depth only, so every other choice
of the config (its stems, heads, tokens, backbone, dropout) is still composed, built and
trained. The README's GPU lines run at this size in tests/test_readme_commands.py, and the
matrix (tests/test_matrix.py) trains a model over 10M parameters at it on every data config
(sizes of one config, e.g. hpt_3m and hpt_12m, cut to one model: that one).
"""

from __future__ import annotations

__all__ = ["CPU_SIZES", "cpu_size"]

# By model family (the config name's prefix): HPT's trunk at hpt_small's width and depth;
# Pi's action expert as pi_tiny's (its PaliGemma is whatever POLYMIMIC_PALIGEMMA_DIR holds).
CPU_SIZES: dict[str, tuple[str, ...]] = {
    "hpt": ("model.d_model=128", "model.num_heads=4", "model.trunk_layers=2"),
    "pi": ("model.expert_width=64", "model.expert_mlp_dim=128"),
}


def cpu_size(model: str) -> list[str]:
    """The overrides that cut model config `model` to a CPU size (KeyError: no family)."""
    family = next((f for f in CPU_SIZES if model.startswith(f)), None)
    if family is None:
        raise KeyError(f"no CPU size for model={model}: families {sorted(CPU_SIZES)}")
    return list(CPU_SIZES[family])
