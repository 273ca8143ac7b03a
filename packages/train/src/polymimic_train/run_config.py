"""Checks of the composed train config, run before anything heavy loads.

Each check raises ConfigError with one line that names the field, what it holds and
what would work, so a misconfigured run ends in seconds, not after data preparation.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf

if TYPE_CHECKING:
    from polymimic_policies import Policy


class ConfigError(ValueError):
    """A config value that cannot work; the message names the field."""


_POSITIVE = (
    "data.batch_size",
    "data.history",
    "data.horizon",
    "data.action_stride",
    "data.norm.num_samples",
    "trainer.max_steps",
    "trainer.val_check_interval",
    "trainer.log_every_n_steps",
    "trainer.accumulate_grad_batches",
    "callbacks.trajectory_video.max_frames",
    "callbacks.rerun.max_frames",
    "data.episodes_per_block",
)
_OPTIONAL = ("data.episodes_per_block",)  # null: off
_AUTO = ("data.num_workers",)  # auto: chosen at run time
_NON_NEGATIVE = (
    "data.num_workers",
    "optim.warmup_steps",
    "data.video_episodes",
    "callbacks.rerun.every_n_validations",
)
_NORM_MODES = ("zscore", "minmax", "quantile")
_RUN_NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _number(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=None)


def _check_numbers(cfg: DictConfig) -> None:
    for key in _POSITIVE + _NON_NEGATIVE:
        value = _number(cfg, key)
        if value is None and (key.startswith("callbacks.") or key in _OPTIONAL):
            continue  # that callback, or that option, is switched off
        if value == "auto" and key in _AUTO:
            continue
        lowest = 1 if key in _POSITIVE else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            kind = "a positive integer" if lowest else "an integer >= 0"
            kind += " or auto" if key in _AUTO else ""
            raise ConfigError(f"{key}: must be {kind}, got {value!r}")
    for key in ("optim.lr", "optim.backbone_lr"):
        value = _number(cfg, key)
        if not isinstance(value, int | float) or value <= 0:
            raise ConfigError(f"{key}: must be a positive number, got {value!r}")
    size = _number(cfg, "data.image_size")
    if size is None or len(size) != 2 or any(not isinstance(v, int) or v < 8 for v in size):
        raise ConfigError(f"data.image_size: must be [height, width], each >= 8; got {size}")
    mode = _number(cfg, "data.norm.mode")
    if mode not in _NORM_MODES:
        raise ConfigError(f"data.norm.mode: {mode!r} is not one of {list(_NORM_MODES)}")
    frames = _number(cfg, "data.val_frames_per_episode")
    if frames != "auto" and (not isinstance(frames, int) or frames < 1):
        raise ConfigError(
            f"data.val_frames_per_episode: a positive integer or auto, got {frames!r}"
        )
    balance = _number(cfg, "data.balance_by")
    if balance is not None and (not isinstance(balance, str) or not balance):
        raise ConfigError(
            f"data.balance_by: an episode attribute's name (e.g. task_name) or null, "
            f"got {balance!r}"
        )
    if balance is not None and _number(cfg, "data.episodes_per_block") is not None:
        raise ConfigError(
            "data.balance_by and data.episodes_per_block: one or the other (a balanced "
            "shuffle draws samples of every group, a block shuffle a few episodes at a time)"
        )
    name = str(cfg.get("name"))
    if not name or set(name) - _RUN_NAME_CHARACTERS:
        raise ConfigError(f"name: letters, digits, '.', '_' and '-' only; got {name!r}")


def _is_number(value: Any) -> bool:
    """An int or a float, not a bool (YAML's `true` is an int to isinstance)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _check_datasets(data: DictConfig, *, resolved: bool = True) -> None:
    """Each dataset's embodiment, layout, cameras, weight and loss weight.

    Before its episodes are resolved (`resolved=False`), a dataset whose embodiment is
    `auto` or not yet registered (episodes may declare it) is left for the check after.
    """
    from polymimic_data.embodiments import dataset_cameras, get_embodiment, registered_embodiments

    datasets = data.get("datasets") or {}
    if not datasets:
        raise ConfigError("data.datasets: list at least one dataset (name: {embodiment: ...})")
    for name, spec in datasets.items():
        where = f"data.datasets.{name}"
        if not resolved and str(spec.get("embodiment")).lower() not in registered_embodiments():
            continue
        try:
            embodiment = get_embodiment(str(spec.get("embodiment")))
        except KeyError:
            raise ConfigError(
                f"{where}.embodiment: {spec.get('embodiment')!r} is not one of "
                f"{registered_embodiments()}"
            ) from None
        if str(name).lower() != embodiment.name:
            raise ConfigError(
                f"data.datasets: name the dataset of embodiment {embodiment.name!r} after it, "
                f"not {name!r} (batches, statistics and the policy's stems are keyed by it)"
            )
        layout = spec.get("layout") or embodiment.default_layout
        if layout not in embodiment.layouts:
            raise ConfigError(
                f"{where}.layout: {layout!r} is not a layout of {embodiment.name}; "
                f"choose one of {list(embodiment.layouts)}"
            )
        if spec.get("cameras") == "auto" and not resolved:
            cameras = []  # those all its episodes hold, named once they are resolved
        else:
            try:
                cameras = list(dataset_cameras(spec))
            except ValueError as exc:
                raise ConfigError(f"{where}.{exc}") from None
        unknown = [c for c in cameras if c not in embodiment.cameras]
        if unknown:
            raise ConfigError(
                f"{where}.cameras: {unknown} are not cameras of {embodiment.name}; "
                f"choose from {list(embodiment.cameras)}"
            )
        weight = spec.get("weight", 1.0)
        if not _is_number(weight) or weight < 0:
            raise ConfigError(
                f"{where}.weight: must be a number, 0 or more (0: held out of training), "
                f"got {weight!r}"
            )
        loss_weight = spec.get("loss_weight", 1.0)
        if not _is_number(loss_weight) or not loss_weight > 0:
            raise ConfigError(
                f"{where}.loss_weight: must be a number above 0 (its loss's weight in each "
                f"step's mean over the embodiments; 1 by default), got {loss_weight!r}"
            )
    if all(spec.get("weight", 1.0) == 0 for spec in datasets.values()):
        raise ConfigError(
            "data.datasets: every weight is 0; at least one dataset must train (weight > 0)"
        )


_ROTATION_KINDS = ("quaternion", "euler", "rot6d")
_INTERPOLATION = re.compile(r"^\$\{([\w.]+)\}$")  # `${paths.paligemma}`: that key
_ENV = re.compile(r"^\$\{oc\.env:(\w+)")  # `${oc.env:NAME,...}`: that variable


def model_policy_type(cfg: DictConfig) -> type[Policy]:
    """The registered policy class the model config builds, from its `_target_` alone.

    Nothing is resolved or built, so the checks that read what a model declares about
    itself (`rotation_kinds`, `local_weights`) run before any weight is made or read.
    """
    from hydra.utils import get_class

    from polymimic_policies import policy_class, registered_policies

    target = str(OmegaConf.select(cfg, "model._target_", default=""))
    try:
        config_type = get_class(target)
    except Exception:
        config_type = None
    for cls in map(policy_class, registered_policies()):
        if cls.config_type is config_type:
            return cls
    raise ConfigError(
        f"model._target_: {target!r} is not the config of a registered policy; the model "
        f"configs build one of {registered_policies()} (e.g. polymimic_policies.HPTConfig)"
    )


def _fitting_layout(embodiment: Any, layout: Any, required: tuple[str, ...]) -> str:
    """The layout of `embodiment` whose rotations are all of `required`, same family first."""
    fitting = [
        candidate
        for candidate in embodiment.layouts
        if all(
            g.kind in required
            for g in embodiment.layout(candidate).groups
            if g.kind in _ROTATION_KINDS
        )
    ]
    # The fitting layout of the same family first: eva_cartesian_quat -> ..._rot6d.
    family = layout.name.rpartition("_")[0] + "_"
    fitting.sort(key=lambda candidate: not candidate.startswith(family))
    return fitting[0] if fitting else f"<a layout with {' or '.join(required)} rotations>"


def _check_model_layouts(cfg: DictConfig, policy_type: type[Policy]) -> None:
    """Each dataset's rotations are of a kind the model predicts (its `rotation_kinds`).

    Datasets of an embodiment not registered yet (declared by episodes) wait for the
    check after their episodes are resolved.
    """
    from polymimic_data.embodiments import get_embodiment, registered_embodiments

    required = policy_type.rotation_kinds
    if required is None:
        return
    for name, spec in (cfg.data.get("datasets") or {}).items():
        if str(spec.get("embodiment")).lower() not in registered_embodiments():
            continue
        embodiment = get_embodiment(str(spec.get("embodiment")))
        layout = embodiment.layout(spec.get("layout"))
        kinds = sorted({g.kind for g in layout.groups if g.kind in _ROTATION_KINDS} - set(required))
        if kinds:
            raise ConfigError(
                f"data.datasets.{name}.layout: {layout.name!r} has {kinds[0]} rotations, and "
                f"model {policy_type.__name__} predicts {' or '.join(required)} only; use "
                f"data.datasets.{name}.layout={_fitting_layout(embodiment, layout, required)}"
            )


def _node(container: Any, key: str) -> Any:
    for part in key.split("."):
        container = container.get(part) if isinstance(container, dict) else None
    return container


def _where_set(cfg: DictConfig, key: str) -> tuple[str, str | None] | None:
    """Where a user sets `key`, and the environment variable read there (if any).

    That is `key` itself, or the key it interpolates (`${paths.paligemma}`); None when a
    resolver makes the value (pi_tiny's tiny PaliGemma).
    """
    container = OmegaConf.to_container(cfg, resolve=False)
    raw = _node(container, key)
    if not isinstance(raw, str) or "${" not in raw:
        return key, None
    match = _INTERPOLATION.match(raw)
    if match is None:
        return None  # e.g. pi_tiny's `${polymimic.tiny_paligemma:...}` makes its own
    source = match[1]
    env = _ENV.match(str(_node(container, source)))
    return source, env[1] if env else None


def _check_local_weights(cfg: DictConfig, policy_type: type[Policy]) -> None:
    """Each local weights directory the model declares (`local_weights`) is there."""
    for field, weights in policy_type.local_weights.items():
        where_set = _where_set(cfg, f"model.{field}")
        if where_set is None:
            continue
        where, env = where_set
        value = OmegaConf.select(cfg, where, default=None)
        example = weights.example
        setting = f"set {env}={example} or {where}={example}" if env else f"set {where}={example}"
        if value is None:
            raise ConfigError(f"{where}: this model needs a local {weights.what}; {setting}")
        if not (Path(value) / weights.marker).is_file():
            raise ConfigError(
                f"{where}: {value} is not a {weights.name} directory (no {weights.marker} "
                f"there); point it at {weights.source}"
            )


WANDB_INSTALL_HINT = "pip install 'polymimic-train[wandb]' (in a checkout: uv sync --extra wandb)"
WANDB_MODES = ("online", "offline", "disabled")
_WANDB_LOGGERS = ("RunWandbLogger", "WandbLogger")
_WANDB_PROJECT_FORBIDDEN = set("/\\#?%:")


def _check_loggers(cfg: DictConfig) -> None:
    """A W&B logger has wandb installed, a known mode and a usable project name."""
    import importlib.util

    for key, logger in (cfg.get("logger") or {}).items():
        if not isinstance(logger, DictConfig):
            continue  # switched off (null)
        if str(logger.get("_target_", "")).rpartition(".")[2] not in _WANDB_LOGGERS:
            continue
        if importlib.util.find_spec("wandb") is None:
            raise ConfigError(f"logger.{key}: W&B logging needs wandb; {WANDB_INSTALL_HINT}")
        mode = logger.get("mode")
        if mode is not None and mode not in WANDB_MODES:
            raise ConfigError(
                f"logger.{key}.mode: {mode!r} is not one of {list(WANDB_MODES)} or null "
                "(null: $WANDB_MODE, else online with credentials, offline without)"
            )
        project = logger.get("project")
        if project is not None and (
            not isinstance(project, str)
            or not 0 < len(project) <= 128
            or set(project) & _WANDB_PROJECT_FORBIDDEN
        ):
            raise ConfigError(
                f"logger.{key}.project: 1 to 128 characters, none of / \\ # ? % :; got {project!r}"
            )


def _check_held_out(cfg: DictConfig) -> None:
    """A dataset of weight 0 under DDP: its stems get no gradient, which plain DDP refuses."""
    strategy = _number(cfg, "trainer.strategy")
    if not isinstance(strategy, DictConfig) or "DDP" not in str(strategy.get("_target_", "")):
        return
    if strategy.get("find_unused_parameters", False):
        return
    for name, spec in (cfg.data.get("datasets") or {}).items():
        if spec.get("weight", 1.0) == 0:
            raise ConfigError(
                f"data.datasets.{name}.weight: 0 (held out of training) leaves its stems "
                "without a gradient, which DDP refuses; choose "
                "trainer=ddp_find_unused_parameters_true"
            )


def _check_rerun(cfg: DictConfig) -> None:
    """callbacks.rerun on: rerun-sdk must be there (the `viz` extra)."""
    if (_number(cfg, "callbacks.rerun.every_n_validations") or 0) > 0:
        from polymimic_data.episodes import MissingViewerError, require_rerun

        try:
            require_rerun("callbacks.rerun", "polymimic-train[viz]")
        except MissingViewerError as exc:
            raise ConfigError(f"callbacks.rerun.every_n_validations: {exc}") from None


def check_config(
    cfg: DictConfig, *, initial_weights: bool = True, resolved: bool = True
) -> type[Policy]:
    """Every check that needs no data and no model: numbers, names, choices, loggers.

    Returns the policy class the model config builds: what it declares about itself is
    checked here (the rotations it predicts; with `initial_weights`, a run that builds
    the policy afresh rather than from a checkpoint, the local weights it reads).
    `resolved=False`: run before the episodes are listed, so datasets that name `auto`
    or an embodiment that episodes declare are left for `check_datasets` after.
    """
    _check_numbers(cfg)
    _check_datasets(cfg.data, resolved=resolved)
    _check_held_out(cfg)
    _check_loggers(cfg)
    _check_rerun(cfg)
    policy_type = model_policy_type(cfg)
    _check_model_layouts(cfg, policy_type)
    if initial_weights:
        _check_local_weights(cfg, policy_type)
    return policy_type


def check_datasets(cfg: DictConfig) -> None:
    """The dataset checks again once episodes are resolved (every embodiment named)."""
    _check_datasets(cfg.data)
    _check_model_layouts(cfg, model_policy_type(cfg))
