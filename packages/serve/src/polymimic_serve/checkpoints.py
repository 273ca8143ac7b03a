"""What a trained policy is on disk: a checkpoint of `train`, or an export.

Every checkpoint holds, under "polymimic", everything needed to use its weights, as plain
data (it loads with `torch.load(weights_only=True)`): the policy's registered name and
config, the embodiments' numbers and names, the layouts, the normalisation statistics and
the data settings the policy was trained with (image size, cameras, history, horizon,
frame rate). An export is the same without training state: `model.safetensors` (the
policy's and the normaliser's tensors) and `config.json` (the record and the step).

`checkpoint_record` writes the record (train calls it); `open_trained` opens either kind
and checks its record's shape before anything is built (`read_trained` reads the tensors
too); `write_export` writes an export whole or not at all. A file that cannot be read or
used raises CheckpointError: one line naming the file, what is wrong and what was expected.

A loader builds nothing from a record before `local_weights_inside` (every local path
the policy would read, e.g. Pi's `paligemma_path`, lies inside the checkpoint's folder or
an explicitly given weights folder) and `sized_policy` (the policy built on the meta
device, no memory, is no larger than `max_parameters`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import pickle
import re
import shutil
import tempfile
import threading
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from polymimic_data.geometry import ChannelGroup, Layout
from polymimic_data.samples import NormStats
from polymimic_policies import (
    Policy,
    UnregisteredPolicyError,
    policy_class,
    policy_from_record,
    policy_record,
    registered_policies,
)
from polymimic_serve.wire import brief

RECORD = "polymimic"
EXPORT_WEIGHTS, EXPORT_CONFIG = "model.safetensors", "config.json"
EXPORT_FORMAT = "polymimic-policy/1"
KEPT = ("policy.", "normalizer.")  # the state a trained policy needs; the rest is training

# What a loader accepts from a record before it allocates anything (see sized_policy).
DEFAULT_MAX_PARAMETERS = 5_000_000_000  # parameters and buffers: Pi on PaliGemma 3B is ~3.3e9
MAX_IMAGE_SIDE = 4096  # image_size: each side, in pixels
MAX_STEPS = 10_000  # history and horizon, in steps
MIN_MODULES, PARAMETERS_PER_MODULE = 10_000, 250_000  # the module bound: see sized_policy
NORM_MODES = ("zscore", "minmax", "quantile")
STAT_NAMES = ("mean", "std", "min", "max", "q01", "q99")

Trained = tuple[dict[str, Any], dict[str, torch.Tensor], int | None]  # record, state, step


class CheckpointError(ValueError):
    """A checkpoint or export that cannot be read or used, in one line.

    The line names the file, what is wrong and what was expected; it never repeats torch's
    advice to load with `weights_only=False` (a checkpoint of train never needs it).
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))


class CheckpointNotFoundError(CheckpointError, FileNotFoundError):
    """No checkpoint or export at the path given (a FileNotFoundError too)."""


class UnregisteredCheckpointPolicyError(CheckpointError, UnregisteredPolicyError):
    """A record naming no registered policy (an UnregisteredPolicyError too)."""


def checkpoint_record(
    *,
    policy: Policy,
    embodiments: Mapping[str, Mapping[str, Any]],
    layouts: Mapping[str, Layout],
    norm_stats: Mapping[str, NormStats],
    norm_mode: str,
    image_size: Sequence[int],
    fps: Mapping[str, float] | None = None,
) -> dict[str, Any]:
    """The plain-data description a checkpoint carries (see the module docstring).

    `fps`: the frame rate of each embodiment's episodes (what one action step lasts).
    """
    return {
        "policy": policy_record(policy),
        "embodiments": {name: dict(spec) for name, spec in embodiments.items()},
        "layouts": {name: layout.to_dict() for name, layout in layouts.items()},
        "norm": {"mode": norm_mode, "stats": {n: s.to_json() for n, s in norm_stats.items()}},
        "image_size": [int(v) for v in image_size],
        "fps": {name: float(rate) for name, rate in (fps or {}).items()},
    }


# The record's shape, checked before anything is built from it.


def _bad(source: Path, where: str, value: Any, expected: str) -> CheckpointError:
    return CheckpointError(f"{source}: {where} is {brief(value)}; expected {expected}")


def _mapping(source: Path, where: str, value: Any, expected: str) -> dict[str, Any]:
    if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
        raise _bad(source, where, value, expected)
    return value


def _integer(source: Path, where: str, value: Any, low: int = 1, high: int | None = None) -> int:
    fits = isinstance(value, int) and not isinstance(value, bool)
    if not fits or value < low or (high is not None and value > high):
        bound = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"
        raise _bad(source, where, value, bound)
    return value


def _numbers(source: Path, where: str, value: Any, length: int) -> None:
    fits = isinstance(value, list | tuple) and len(value) == length
    if not fits or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in value):
        raise _bad(source, where, value, f"a list of {length} numbers (the layout's channels)")


def _layout(source: Path, where: str, value: Any) -> Layout:
    data = _mapping(source, where, value, "a layout: {name, groups: [{name, kind, start, stop}]}")
    groups = data.get("groups")
    if not isinstance(data.get("name"), str) or not isinstance(groups, list) or not groups:
        raise _bad(source, where, value, "a layout: {name, groups: [{name, kind, start, stop}]}")
    made = []
    for i, group in enumerate(groups):
        at = f"{where}.groups[{i}]"
        group = _mapping(source, at, group, "a channel group {name, kind, start, stop}")
        if sorted(group) != ["kind", "name", "start", "stop"]:
            raise _bad(source, at, group, "a channel group with exactly name, kind, start, stop")
        for key in ("start", "stop"):
            _integer(source, f"{at}.{key}", group[key], low=0)
        if not isinstance(group["name"], str) or not isinstance(group["kind"], str):
            raise _bad(source, at, group, "a channel group whose name and kind are strings")
        try:
            made.append(ChannelGroup(**group))
        except ValueError as exc:
            raise CheckpointError(f"{source}: {at}: {exc}") from None
    try:
        return Layout(data["name"], tuple(made))
    except ValueError as exc:
        raise CheckpointError(f"{source}: {where}: {exc}") from None


def _check_policy(source: Path, value: Any) -> None:
    """The policy's name is a registered one (before anything is imported or built)."""
    policy = _mapping(source, "record.policy", value, "{name: a registered policy, config}")
    name = policy.get("name")
    if not isinstance(name, str):
        raise UnregisteredCheckpointPolicyError(
            f"{source}: record.policy: no registered policy name (name {brief(name)}); "
            f"expected {{'name': one of {registered_policies()}, 'config': {{...}}}}"
        )
    try:
        policy_class(name)
    except UnregisteredPolicyError as exc:
        raise UnregisteredCheckpointPolicyError(f"{source}: record.policy: {exc}") from None
    _mapping(source, "record.policy.config", policy.get("config", {}), "a mapping of fields")


def _check_embodiment(source: Path, name: str, spec: Any, dims: Mapping[str, int]) -> None:
    where = f"record.embodiments.{name}"
    spec = _mapping(source, where, spec, "{state_dim, action_dim, history, horizon, cameras}")
    for key in ("state_dim", "action_dim"):
        _integer(source, f"{where}.{key}", spec.get(key))
    for key in ("history", "horizon"):
        _integer(source, f"{where}.{key}", spec.get(key), high=MAX_STEPS)
    cameras = spec.get("cameras")
    if not isinstance(cameras, list | tuple) or not all(isinstance(c, str) for c in cameras):
        raise _bad(source, f"{where}.cameras", cameras, "a list of camera names")
    if name not in dims:
        raise CheckpointError(
            f"{source}: record.layouts: no layout for embodiment {name!r}; expected one for "
            "each embodiment"
        )
    for key in ("state_dim", "action_dim"):
        if spec[key] != dims[name]:
            raise _bad(source, f"{where}.{key}", spec[key], f"{dims[name]} (its layout's width)")


def _check_norm(source: Path, norm: Any, dims: Mapping[str, int], embodiments: Any) -> None:
    norm = _mapping(source, "record.norm", norm, "{mode, stats}")
    if norm.get("mode") not in NORM_MODES:
        raise _bad(source, "record.norm.mode", norm.get("mode"), f"one of {list(NORM_MODES)}")
    stats = _mapping(source, "record.norm.stats", norm.get("stats"), "a mapping of statistics")
    for name in embodiments:
        if name not in stats:
            raise CheckpointError(
                f"{source}: record.norm.stats: no statistics for embodiment {name!r}; "
                "expected them for each embodiment"
            )
    for name, entry in stats.items():
        where = f"record.norm.stats.{name}"
        if name not in dims:
            raise CheckpointError(f"{source}: {where}: no layout {name!r} in record.layouts")
        entry = _mapping(source, where, entry, "{state, actions}")
        for part in ("state", "actions"):
            vector = _mapping(source, f"{where}.{part}", entry.get(part), str(list(STAT_NAMES)))
            for stat in STAT_NAMES:
                _numbers(source, f"{where}.{part}.{stat}", vector.get(stat), dims[name])


def check_record(record: Any, source: Path) -> dict[str, Any]:
    """The record, if its shape is what `checkpoint_record` writes; else CheckpointError.

    Checked: the policy's registered name; per embodiment its numbers (history and horizon
    at most MAX_STEPS), cameras, layout and normalisation statistics, all of the layout's
    width; the image size (two sides of 1..MAX_IMAGE_SIDE pixels); the frame rates. The
    policy's config is checked by its own config type when it is built.
    """
    keys = "policy, embodiments, layouts, norm, image_size (and fps)"
    record = _mapping(source, f"the {RECORD!r} record", record, f"a mapping of {keys}")
    required = ("policy", "embodiments", "layouts", "norm", "image_size")
    missing = [k for k in required if k not in record]
    if missing:
        raise CheckpointError(f"{source}: the record has no {', '.join(missing)}; expected {keys}")
    _check_policy(source, record["policy"])
    embodiments = _mapping(
        source, "record.embodiments", record["embodiments"], "a mapping of embodiment specs"
    )
    if not embodiments:
        raise _bad(source, "record.embodiments", embodiments, "at least one embodiment")
    layouts = _mapping(source, "record.layouts", record["layouts"], "a mapping of layouts")
    dims = {name: _layout(source, f"record.layouts.{name}", v).dim for name, v in layouts.items()}
    for name, spec in embodiments.items():
        _check_embodiment(source, name, spec, dims)
    _check_norm(source, record["norm"], dims, embodiments)
    size = record["image_size"]
    if not isinstance(size, list | tuple) or len(size) != 2:
        raise _bad(source, "record.image_size", size, f"[height, width], 1 to {MAX_IMAGE_SIDE}")
    for i, side in enumerate(size):
        _integer(source, f"record.image_size[{i}]", side, high=MAX_IMAGE_SIDE)
    fps = _mapping(source, "record.fps", record.get("fps", {}), "a mapping of frame rates")
    for name, rate in fps.items():
        fits = isinstance(rate, int | float) and not isinstance(rate, bool)
        if not fits or not math.isfinite(rate) or rate <= 0:
            raise _bad(source, f"record.fps.{name}", rate, "a positive number (steps per second)")
    return record


def _step(source: Path, value: Any) -> int | None:
    return None if value is None else _integer(source, "the step", value, low=0)


# Reading a checkpoint or an export.


def _torch_detail(exc: BaseException) -> str:
    """What torch.load said, in one line, without its advice (never `weights_only=False`)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(exc))
    found = re.search(r"WeightsUnpickler error:(.*)", text, flags=re.DOTALL)
    text = " ".join((found.group(1) if found else text).split())
    for advice in ("Please ", "Check the documentation", "This is an internal", "If you are"):
        text = text.split(advice)[0]
    text = text.strip().rstrip(".")[:200]
    if not text or "weights_only" in text:
        return type(exc).__name__
    return f"{type(exc).__name__}: {text}"


def _unreadable(path: Path, exc: Exception, head: bytes) -> CheckpointError:
    detail = _torch_detail(exc)
    if isinstance(exc, EOFError) or "archive" in detail:
        what = "is truncated or corrupt"
    elif not head.startswith(b"PK"):
        what = "is not in torch's zip format"
    elif isinstance(exc, pickle.UnpicklingError):
        what = "holds objects other than tensors and plain data"
    else:
        what = "is not a checkpoint"
    return CheckpointError(
        f"{path}: {what} ({detail}); expected a .ckpt written by train (only tensors and "
        "plain data, in torch's zip format) or an export folder"
    )


def _torch_load(path: Path) -> Any:
    head = b""
    try:
        with path.open("rb") as file:
            head = file.read(4)
        with warnings.catch_warnings():  # e.g. on the pickle protocol: the error says enough
            warnings.simplefilter("ignore")
            return torch.load(path, map_location="cpu", weights_only=True)
    except MemoryError:
        raise
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # torch raises many kinds for a file that is not its own
        raise _unreadable(path, exc, head) from None


def _tensors(source: Path, where: str, value: Any) -> dict[str, torch.Tensor]:
    state = _mapping(source, where, value, "a mapping of names to tensors")
    for key, tensor in state.items():
        if not isinstance(tensor, torch.Tensor):
            raise _bad(source, f"{where}[{key!r}]", tensor, "a tensor")
    return state


@dataclass(frozen=True)
class TrainedFiles:
    """A checkpoint or export, opened: its checked record and step; its tensors on demand.

    `source`: the file the record came from (the .ckpt, or the export's config.json);
    `folder`: the folder that holds it, symlinks resolved (the local paths a record names
    must lie inside it, or inside an explicitly given weights folder); `weights`: the file
    of the tensors.
    """

    source: Path
    folder: Path
    weights: Path
    record: dict[str, Any]
    step: int | None
    loaded: Mapping[str, torch.Tensor] | None = field(default=None, repr=False)

    def state(self) -> dict[str, torch.Tensor]:
        """The policy's and normaliser's tensors (an export's are read now)."""
        if self.loaded is not None:
            return {k: v for k, v in self.loaded.items() if k.startswith(KEPT)}
        from safetensors.torch import load_file

        try:
            state = load_file(self.weights)
        except MemoryError:
            raise
        except OSError as exc:
            raise CheckpointError(
                f"{self.weights}: cannot be read ({exc.strerror or exc})"
            ) from None
        except Exception as exc:  # safetensors' SafetensorError and the like
            text = " ".join(str(exc).split())[:200]
            raise CheckpointError(
                f"{self.weights}: not a safetensors file ({type(exc).__name__}: {text}); "
                f"expected the {EXPORT_WEIGHTS} an export holds"
            ) from None
        return {k: v for k, v in state.items() if k.startswith(KEPT)}


def _open_checkpoint(path: Path) -> TrainedFiles:
    checkpoint = _torch_load(path)
    if not isinstance(checkpoint, dict) or RECORD not in checkpoint:
        raise CheckpointError(
            f"{path}: not a polymimic checkpoint (it carries no {RECORD!r} record); expected "
            "a .ckpt written by train"
        )
    record = check_record(checkpoint[RECORD], path)
    state = _tensors(path, "state_dict", checkpoint.get("state_dict"))
    step = _step(path, checkpoint.get("global_step"))
    return TrainedFiles(path, path.resolve().parent, path, record, step, state)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_bytes())
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        problem = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        problem = "nested too deeply"
    except (UnicodeDecodeError, ValueError) as exc:
        problem = " ".join(str(exc).split())[:200]
    raise CheckpointError(
        f"{path}: not valid JSON ({problem}); expected the {EXPORT_CONFIG} an export holds"
    )


def _open_export(folder: Path) -> TrainedFiles:
    config_path, weights_path = folder / EXPORT_CONFIG, folder / EXPORT_WEIGHTS
    for needed in (config_path, weights_path):
        if not needed.is_file():
            raise CheckpointError(
                f"{folder}: not a polymimic export (no {needed.name}); expected a folder of "
                f"{EXPORT_CONFIG} and {EXPORT_WEIGHTS}"
            )
    config = _mapping(config_path, "the file", _read_json(config_path), "a JSON object")
    if config.get("format") != EXPORT_FORMAT:
        raise CheckpointError(
            f"{config_path}: format {brief(config.get('format'))}, this version reads "
            f"{EXPORT_FORMAT!r}"
        )
    if "record" not in config:
        raise CheckpointError(f"{config_path}: no 'record'; expected format, step and record")
    record = check_record(config["record"], config_path)
    step = _step(config_path, config.get("step"))
    return TrainedFiles(config_path, folder.resolve(), weights_path, record, step)


def open_trained(path: str | os.PathLike[str]) -> TrainedFiles:
    """A checkpoint file, or an export (its folder or either of its files), opened.

    The record is checked (`check_record`) before anything is built from it; an export's
    tensors are read only by `state()`. CheckpointError for anything that is not one.
    """
    path = Path(path)
    if path.is_dir():
        return _open_export(path)
    if path.name in (EXPORT_WEIGHTS, EXPORT_CONFIG):
        return _open_export(path.parent)
    if not path.is_file():
        raise CheckpointNotFoundError(f"{path}: no such checkpoint or export")
    return _open_checkpoint(path)


def read_checkpoint(path: Path) -> Trained:
    """The record, the policy's and normaliser's tensors and the step of a checkpoint file."""
    opened = _open_checkpoint(Path(path))
    return opened.record, opened.state(), opened.step


def read_export(folder: Path) -> Trained:
    """The record, tensors and step of an export folder."""
    opened = _open_export(Path(folder))
    return opened.record, opened.state(), opened.step


def read_trained(path: Path) -> Trained:
    """A checkpoint file, or an export (its folder or either of its files)."""
    opened = open_trained(path)
    return opened.record, opened.state(), opened.step


# Before a policy is built for real: its local paths, its size, its tensors' shapes.


def _inside(path: Path, folders: Sequence[Path]) -> bool:
    return any(path == f or path.is_relative_to(f) for f in folders)


def _resolve_inside(value: Any, base: Path, folders: Sequence[Path]) -> tuple[Path, Path | None]:
    """`value` as a path from `base`, resolved; and what escapes `folders` (None if nothing).

    The path itself, or an entry directly in it (a folder of files a policy reads).
    """
    if not isinstance(value, str) or not value or "\x00" in value:
        raise TypeError
    raw = Path(value)
    with contextlib.suppress(RuntimeError):  # ~user of no user: a path like any other
        raw = raw.expanduser()
    resolved = (raw if raw.is_absolute() else base / raw).resolve()
    if not _inside(resolved, folders):
        return resolved, resolved
    if resolved.is_dir():
        for entry in itertools.islice(resolved.iterdir(), 10_000):
            if not _inside(entry.resolve(), folders):
                return resolved, entry.resolve()
    return resolved, None


def local_weights_inside(
    opened: TrainedFiles, weights_dir: str | os.PathLike[str] | None = None
) -> dict[str, Any]:
    """The record's policy, each local path it names resolved inside the allowed folders.

    The paths are the config fields the policy class declares in `local_weights` (Pi's
    `paligemma_path`: its config.json and tokenizer are read when it is built, never its
    weights, which the checkpoint holds). A relative path is taken from the checkpoint's
    folder. After symlinks and `..` are resolved, the path and every entry directly in it
    must lie inside the checkpoint's folder or `weights_dir`; else CheckpointError naming
    the field and both folders. The paths come back resolved (absolute).
    """
    policy = opened.record["policy"]
    cls = policy_class(policy["name"])
    config = dict(policy.get("config", {}))
    folders = [opened.folder]
    if weights_dir is not None:
        given = Path(weights_dir).expanduser()
        if not given.is_dir():
            raise CheckpointError(f"weights_dir: {given} is not a folder")
        folders.append(given.resolve())
    allowed = f"the checkpoint's folder {opened.folder}" + (
        f" or the weights folder {folders[1]}" if weights_dir else " (no weights folder given)"
    )
    for name, weights in cls.local_weights.items():
        value = config.get(name)
        if value is None:
            continue
        where = f"{opened.source}: record.policy.config.{name}"
        try:
            resolved, escape = _resolve_inside(value, opened.folder, folders)
        except TypeError:
            raise CheckpointError(f"{where} is {brief(value)}; expected a path") from None
        except (OSError, RuntimeError) as exc:  # e.g. a symlink loop
            raise CheckpointError(f"{where}: {brief(value)} cannot be resolved ({exc})") from None
        if escape is not None:
            what = "resolves to" if escape == resolved else "holds an entry that resolves to"
            raise CheckpointError(
                f"{where}: {brief(value, 200)} {what} {escape}, outside {allowed}; a loaded policy "
                f"reads its {weights.name} folder only from inside those: put it there or "
                "pass the folder that holds it as weights_dir (--weights-dir)"
            )
        config[name] = str(resolved)
    return {**policy, "config": config}


class _TooLarge(Exception):
    pass


def sized_policy(
    policy: Mapping[str, Any],
    embodiments: Mapping[str, Any],
    *,
    max_parameters: int = DEFAULT_MAX_PARAMETERS,
    source: Path,
) -> nn.Module:
    """The policy a record describes, built on the meta device: no memory, no weights.

    CheckpointError if it cannot be built, or if its parameters and buffers number more
    than `max_parameters`. Building stops once more than max(MIN_MODULES, max_parameters /
    PARAMETERS_PER_MODULE) modules are made: a record of a million layers is refused in
    seconds, not built. `policy`: as `local_weights_inside` gives it.
    """
    max_modules = max(MIN_MODULES, max_parameters // PARAMETERS_PER_MODULE)
    owner, made = threading.get_ident(), [0]

    def on_module(module: nn.Module, name: str, child: nn.Module | None) -> None:
        if child is None or threading.get_ident() != owner:
            return
        made[0] += 1
        if made[0] > max_modules:
            raise _TooLarge(f"more than {max_modules:,} modules")

    handle = nn.modules.module.register_module_module_registration_hook(on_module)
    name = policy.get("name")
    try:
        with torch.device("meta"):
            shell = policy_from_record(policy, embodiments, weights_from_checkpoint=True)
    except _TooLarge as exc:
        raise _too_large(source, name, str(exc), max_parameters) from None
    except UnregisteredPolicyError as exc:
        raise UnregisteredCheckpointPolicyError(f"{source}: record.policy: {exc}") from None
    except MemoryError:
        raise
    except Exception as exc:  # the policy's own refusal of its config, or a crafted value
        text = " ".join(str(exc).split())[:300]
        raise CheckpointError(
            f"{source}: record.policy ({name!r}) cannot be built: {type(exc).__name__}: {text}"
        ) from None
    finally:
        handle.remove()
    module = shell if isinstance(shell, nn.Module) else None
    if module is None:
        raise CheckpointError(f"{source}: record.policy ({name!r}) is not a torch module")
    total = sum(t.numel() for t in itertools.chain(module.parameters(), module.buffers()))
    if total > max_parameters:
        raise _too_large(source, name, f"{total:,} parameters and buffers", max_parameters)
    return module


def _too_large(source: Path, name: Any, what: str, max_parameters: int) -> CheckpointError:
    return CheckpointError(
        f"{source}: the {name!r} policy the record describes has {what}, over what "
        f"max_parameters={max_parameters:,} allows; nothing was allocated (if the model is "
        "real, load it with a larger max_parameters, --max-parameters)"
    )


def check_state(
    expected: Mapping[str, torch.Tensor],
    state: Mapping[str, torch.Tensor],
    prefix: str,
    source: Path,
) -> None:
    """CheckpointError naming the first tensor missing, unexpected or of the wrong shape.

    `expected`: the state dict of the module the record describes (e.g. built on the meta
    device); `state`: the file's tensors under `prefix`, with the prefix taken off.
    """
    missing = [k for k in expected if k not in state]
    unexpected = [k for k in state if k not in expected]
    wrong = [k for k in expected if k in state and state[k].shape != expected[k].shape]
    more = lambda keys: f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""  # noqa: E731
    if missing:
        key = missing[0]
        raise CheckpointError(
            f"{source}: no tensor {prefix}{key}{more(missing)}; the policy the record "
            f"describes has it, of shape {tuple(expected[key].shape)}"
        )
    if wrong:
        key = wrong[0]
        raise CheckpointError(
            f"{source}: tensor {prefix}{key}{more(wrong)} has shape {tuple(state[key].shape)}; "
            f"the policy the record describes expects {tuple(expected[key].shape)}"
        )
    if unexpected:
        raise CheckpointError(
            f"{source}: tensor {prefix}{unexpected[0]}{more(unexpected)} is not one of the "
            "policy the record describes; expected exactly its tensors"
        )


# Files a local folder's weights are in: an export leaves them out (its own weights replace them).
WEIGHT_PATTERNS = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.pt", "*.pth", "*.gguf")


def _bundle_local_folders(record: Mapping[str, Any], staging: Path, base: Path) -> dict[str, Any]:
    """The record with every local folder its policy reads copied into `staging`, weights out.

    Pi's `paligemma_path` names PaliGemma's folder, whose config.json and tokenizer are read
    when the policy is built (never its weights, which the export holds): they are copied to
    `staging/paligemma` and the record names that folder relative to the export, so a robot
    computer serves the export alone. A relative path is taken from `base`. A folder that is
    not there is left named as it was (the loader then needs a weights folder), with a warning.
    """
    from fnmatch import fnmatch

    policy = record["policy"]
    config = dict(policy.get("config", {}))
    for name in policy_class(policy["name"]).local_weights:
        value = config.get(name)
        if not isinstance(value, str) or not value:
            continue
        folder = base / Path(value).expanduser()
        if not folder.is_dir():
            warnings.warn(
                f"record.policy.config.{name}: {folder} is not a folder here, so the export "
                "does not hold it; serve it with --weights-dir naming the folder that does",
                stacklevel=3,
            )
            continue
        kept = staging / name.removesuffix("_path")
        kept.mkdir()
        for entry in sorted(folder.iterdir()):
            if entry.is_file() and not any(fnmatch(entry.name, p) for p in WEIGHT_PATTERNS):
                shutil.copyfile(entry, kept / entry.name)  # a symlink's target, as a file
        config[name] = kept.name
    return {**record, "policy": {**policy, "config": config}}


def write_export(
    record: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    step: int | None,
    out: str | os.PathLike[str],
    *,
    source: str | None = None,
    overwrite: bool = False,
    base: str | os.PathLike[str] | None = None,
) -> Path:
    """Write `out/model.safetensors` and `out/config.json`; returns `out`.

    The export is self-contained: the files a policy reads from local folders when it is
    built (Pi's PaliGemma config and tokenizer, never base weights) are copied in, and the
    record names them inside it (a relative path in `record` is taken from `base`, the
    checkpoint's folder; the current folder by default). The folder appears whole or not at
    all; an existing one is replaced only with `overwrite` (and then only once the new one is
    complete).
    """
    from safetensors.torch import save_file

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out}: exists and is not empty; choose another folder or overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        # safetensors wants contiguous tensors that share no storage.
        kept = {k: v.contiguous().clone() for k, v in state.items() if k.startswith(KEPT)}
        save_file(kept, staging / EXPORT_WEIGHTS)
        record = _bundle_local_folders(record, staging, Path(base) if base else Path.cwd())
        config = {"format": EXPORT_FORMAT, "step": step, "source": source, "record": record}
        (staging / EXPORT_CONFIG).write_text(json.dumps(config, indent=2))
        staging.chmod(0o755)
        if out.exists():
            old = out.with_name(f".{out.name}.old-{os.getpid()}")
            os.replace(out, old)
            os.replace(staging, out)
            shutil.rmtree(old)
        else:
            os.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
