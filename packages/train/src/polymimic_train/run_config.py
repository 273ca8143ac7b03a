"""Checks of the composed train config, run before anything heavy loads.

Each check raises ConfigError with one line that names the field, what it holds and
what would work, so a misconfigured run ends in seconds, not after data preparation.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf


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
)
_NON_NEGATIVE = ("data.num_workers", "optim.warmup_steps", "data.video_episodes")
_NORM_MODES = ("zscore", "minmax", "quantile")
_RUN_NAME_CHARACTERS = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def _number(cfg: DictConfig, key: str) -> Any:
    return OmegaConf.select(cfg, key, default=None)


def _check_numbers(cfg: DictConfig) -> None:
    for key in _POSITIVE + _NON_NEGATIVE:
        value = _number(cfg, key)
        if value is None and key.startswith("callbacks."):
            continue  # that callback is switched off
        lowest = 1 if key in _POSITIVE else 0
        if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
            kind = "a positive integer" if lowest else "an integer >= 0"
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
    name = str(cfg.get("name"))
    if not name or set(name) - _RUN_NAME_CHARACTERS:
        raise ConfigError(f"name: letters, digits, '.', '_' and '-' only; got {name!r}")


def _check_datasets(data: DictConfig) -> None:
    from polymimic_data.embodiments import get_embodiment, registered_embodiments

    datasets = data.get("datasets") or {}
    if not datasets:
        raise ConfigError("data.datasets: list at least one dataset (name: {embodiment: ...})")
    for name, spec in datasets.items():
        where = f"data.datasets.{name}"
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
        cameras = list(spec.get("cameras", ["front_1"]))
        unknown = [c for c in cameras if c not in embodiment.cameras]
        if unknown:
            raise ConfigError(
                f"{where}.cameras: {unknown} are not cameras of {embodiment.name}; "
                f"choose from {list(embodiment.cameras)}"
            )
        weight = spec.get("weight", 1.0)
        if not isinstance(weight, int | float) or weight <= 0:
            raise ConfigError(f"{where}.weight: must be a positive number, got {weight!r}")


# Policies that model rotations in one representation only: the target's class -> kind.
# Pi predicts rotations as rot6d, as openpi does; its flow over quaternions or angles
# would cross the sign and wrap-around discontinuities those have.
_ROTATION_ONLY = {"PiPolicy": "rot6d"}
_ROTATION_KINDS = ("quaternion", "euler", "rot6d")


def _check_model_layouts(cfg: DictConfig) -> None:
    from polymimic_data.embodiments import get_embodiment

    target = str(OmegaConf.select(cfg, "model._target_", default=""))
    required = _ROTATION_ONLY.get(target.rpartition(".")[2])
    if required is None:
        return
    for name, spec in (cfg.data.get("datasets") or {}).items():
        embodiment = get_embodiment(str(spec.get("embodiment")))
        layout = embodiment.layout(spec.get("layout"))
        kinds = sorted({g.kind for g in layout.groups if g.kind in _ROTATION_KINDS} - {required})
        if not kinds:
            continue
        fitting = [
            candidate
            for candidate in embodiment.layouts
            if all(
                g.kind == required
                for g in embodiment.layout(candidate).groups
                if g.kind in _ROTATION_KINDS
            )
        ]
        # The fitting layout of the same family first: eva_cartesian_quat -> ..._rot6d.
        family = layout.name.rpartition("_")[0] + "_"
        fitting.sort(key=lambda candidate: not candidate.startswith(family))
        use = fitting[0] if fitting else f"<a layout with {required} rotations>"
        raise ConfigError(
            f"data.datasets.{name}.layout: {layout.name!r} has {kinds[0]} rotations, and "
            f"model {target.rpartition('.')[2]} predicts {required} only; use "
            f"data.datasets.{name}.layout={use}"
        )


def _check_local_weights(cfg: DictConfig) -> None:
    """A model reading a local PaliGemma (`paths.paligemma`) has one there."""
    model = OmegaConf.to_container(cfg.model, resolve=False)
    assert isinstance(model, dict)
    if model.get("paligemma_path") != "${paths.paligemma}":
        return  # no PaliGemma, or one the config makes itself (pi_tiny)
    where = cfg.paths.paligemma
    example = "/models/paligemma-3b-pt-224"
    if where is None:
        raise ConfigError(
            "paths.paligemma: this model needs a local PaliGemma in the transformers format "
            f"(config.json, weights, tokenizer); set POLYMIMIC_PALIGEMMA_DIR={example} or "
            f"paths.paligemma={example}"
        )
    if not (Path(where) / "config.json").is_file():
        raise ConfigError(
            f"paths.paligemma: {where} is not a PaliGemma directory (no config.json there); "
            "point it at a transformers-format PaliGemma, e.g. google/paligemma-3b-pt-224 "
            "downloaded once"
        )


def check_config(cfg: DictConfig) -> None:
    """Every check that needs no data and no model: numbers, names, choices."""
    _check_numbers(cfg)
    _check_datasets(cfg.data)
    _check_model_layouts(cfg)
    _check_local_weights(cfg)


def embodiment_specs(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the policy is told of each dataset's embodiment: plain numbers and names.

    From the config alone (layouts fix the widths), so the policy can be built, and its
    config checked, before any data is read.
    """
    from polymimic_data.embodiments import get_embodiment

    specs = {}
    for name, spec in data["datasets"].items():
        embodiment = get_embodiment(str(spec["embodiment"]))
        layout = embodiment.layout(spec.get("layout"))
        specs[name] = {
            "state_dim": layout.dim,
            "action_dim": layout.dim,
            "history": int(data["history"]),
            "horizon": int(data["horizon"]),
            "cameras": list(spec.get("cameras", ["front_1"])),
            "action_groups": [[group.name, group.width] for group in layout.groups],
        }
    return specs


AUTO = "auto"


def declare_data_embodiments(data: Any, cache_dir: Path) -> None:
    """Register the embodiments declared by the episodes under `data.roots`, where needed.

    Episodes imported from LeRobot declare theirs. In place: `embodiment: auto` becomes the
    one embodiment those episodes declare, and `cameras: auto` all of its cameras.
    """
    from polymimic_data.embodiments import declare_from
    from polymimic_data.embodiments import get_embodiment, registered_embodiments
    from polymimic_data.episodes import job_cache_dir, resolve_episodes

    datasets = data.get("datasets") or {}
    known = set(registered_embodiments())
    wanted = [n for n, s in datasets.items() if str(s.get("embodiment")).lower() not in known]
    if not wanted or data.get("synthetic"):
        return
    roots = list(data.get("roots") or [])
    missing = [r for r in roots if not Path(r).is_dir()]
    if not roots or missing:
        raise ConfigError(
            f"data.roots: {missing or 'unset'}; datasets {wanted} name embodiments declared by "
            "episodes (e.g. from `polymimic-data import-lerobot`), so data.roots must hold them"
        )
    episodes = resolve_episodes(roots, cache_dir=job_cache_dir(cache_dir))
    declared = declare_from((str(e.path), e.attrs) for e in episodes)
    renamed = {}
    for name, spec in datasets.items():
        if name in wanted and str(spec.get("embodiment")).lower() == AUTO:
            if len(declared) != 1:
                raise ConfigError(
                    f"data.datasets.{name}.embodiment: auto needs the episodes under "
                    f"data.roots to declare exactly one embodiment; they declare {declared}. "
                    f"Name one: data.datasets.{name}.embodiment=<name>"
                )
            spec["embodiment"] = name = declared[0]  # a dataset is named by its embodiment
        if spec.get("cameras") == AUTO and str(spec["embodiment"]).lower() in set(
            registered_embodiments()
        ):  # (a name declared nowhere under the roots: _check_datasets says so)
            spec["cameras"] = list(get_embodiment(str(spec["embodiment"])).cameras)
        renamed[name] = spec
    data["datasets"] = renamed


def check_data_roots(data: Mapping[str, Any], cache_dir: Path) -> None:
    """Each dataset of real episodes finds some under `data.roots` (generated data always does)."""
    if data.get("synthetic"):
        return
    from polymimic_data.episodes import job_cache_dir, resolve_episodes

    roots = list(data.get("roots") or [])
    if not roots:
        raise ConfigError(
            "data.roots: set it to folders of episodes, e.g. 'data.roots=[/data/eva]'"
        )
    for root in roots:
        if not Path(root).is_dir():
            raise ConfigError(f"data.roots: {root} does not exist or is not a folder")
    for name, spec in data["datasets"].items():
        filters = {**(data.get("filters") or {}), **(spec.get("filters") or {})}
        filters["embodiment"] = spec["embodiment"]
        try:
            resolve_episodes(roots, filters=filters, cache_dir=job_cache_dir(cache_dir))
        except FileNotFoundError:
            raise ConfigError(
                f"data.datasets.{name}: no episodes of {spec['embodiment']} under data.roots "
                f"{roots} matching {filters}; `polymimic-data inspect ROOT` lists what is there"
            ) from None


def check_resume_fits(checkpoint: Path, policy: Any) -> None:
    """The checkpoint's policy weights have the shapes of the policy this config builds."""
    import torch

    state = torch.load(checkpoint, map_location="cpu", mmap=True, weights_only=False)
    saved = {k.removeprefix("policy."): v for k, v in state["state_dict"].items()}
    saved = {k: v for k, v in saved.items() if not k.startswith("normalizer.")}
    ours = policy.state_dict()
    differ = [k for k in ours if k in saved and tuple(saved[k].shape) != tuple(ours[k].shape)]
    missing = [k for k in ours if k not in saved]
    if differ or missing:
        example = (
            f"e.g. {differ[0]}: checkpoint {tuple(saved[differ[0]].shape)}, "
            f"this config {tuple(ours[differ[0]].shape)}"
            if differ
            else f"e.g. {missing[0]} is not in the checkpoint"
        )
        raise ConfigError(
            f"resume={checkpoint}: the checkpoint does not fit this model config "
            f"({len(differ)} tensors differ in shape, {len(missing)} missing; {example}); "
            "resume with the model, data and layout config it was trained with "
            "(its run directory's config.yaml)"
        )
