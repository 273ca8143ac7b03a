"""The resolvers the train configs use (`${polymimic.<name>:...}`), registered on import.

Importing polymimic_train.configs (what Hydra does to compose them: `train`, `evaluate`,
`initialize_config_module("polymimic_train.configs")`) imports this module first, so every
composition of the configs has them. Each is light: Hydra and OmegaConf only, with what a
resolver needs imported when it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import platformdirs
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from polymimic_train.runs import run_dirs


def user_cache(sub: str) -> str:
    """`${polymimic.user_cache:sub}`: a folder in the user's cache (platformdirs')."""
    return str(Path(platformdirs.user_cache_dir("polymimic")) / sub)


def tiny_paligemma(cache_dir: str) -> str:
    """`${polymimic.tiny_paligemma:dir}`: a tiny PaliGemma for model=pi_tiny, made on first use.

    Transformers loads only when a config asks for it.
    """
    from polymimic_policies import ensure_tiny_paligemma

    return str(ensure_tiny_paligemma(cache_dir))


def gpus_per_node(accelerator: str, devices: Any) -> int | None:
    """What the SLURM launcher asks for per node: the trainer's devices, none on a CPU."""
    return None if str(accelerator) == "cpu" else int(devices)


def sweep_name(*, _root_: DictConfig) -> str:
    """The run's `name` for a multirun's folder, resolved where `${hydra:...}` cannot be.

    A multirun's launcher is built (and its folder named) before Hydra's config is set,
    so the default name, `${hydra:runtime.choices.model}-...`, fails there; the same
    choices are read from the config's own `hydra` node instead.
    """
    try:
        return str(_root_.name)
    except InterpolationResolutionError:
        choices = _root_.hydra.runtime.choices
        return f"{choices.model}-{choices.data}"


OmegaConf.register_new_resolver("polymimic.user_cache", user_cache, replace=True)
OmegaConf.register_new_resolver(
    "polymimic.tiny_paligemma", tiny_paligemma, replace=True, use_cache=True
)
OmegaConf.register_new_resolver("polymimic.gpus_per_node", gpus_per_node, replace=True)
OmegaConf.register_new_resolver("polymimic.sweep_name", sweep_name, replace=True)
# Cached: Hydra reads the run directory more than once; it must be made once.
OmegaConf.register_new_resolver(
    "polymimic.run_dir", run_dirs.run_dir_for, replace=True, use_cache=True
)
