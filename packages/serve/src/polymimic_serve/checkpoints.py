"""What a trained policy is on disk: a checkpoint of `train`, or an export.

Every checkpoint holds, under "polymimic", everything needed to use its weights, as plain
data (it loads with `torch.load(weights_only=True)`): the policy's registered name and
config, the embodiments' numbers and names, the layouts, the normalisation statistics and
the data settings the policy was trained with (image size, cameras, history, horizon,
frame rate). An export is the same without training state: `model.safetensors` (the
policy's and the normaliser's tensors) and `config.json` (the record and the step).

`checkpoint_record` writes the record (train calls it); `read_trained` reads either kind;
`write_export` writes an export whole or not at all.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from polymimic_data.geometry import Layout
from polymimic_data.samples import NormStats
from polymimic_policies import Policy, policy_record

RECORD = "polymimic"
EXPORT_WEIGHTS, EXPORT_CONFIG = "model.safetensors", "config.json"
EXPORT_FORMAT = "polymimic-policy/1"
KEPT = ("policy.", "normalizer.")  # the state a trained policy needs; the rest is training

Trained = tuple[dict[str, Any], dict[str, torch.Tensor], int | None]  # record, state, step


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


def read_checkpoint(path: Path) -> Trained:
    """The record, the policy's and normaliser's tensors and the step of a checkpoint file."""
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    record = checkpoint.get(RECORD) if isinstance(checkpoint, dict) else None
    if record is None:
        raise ValueError(f"{path}: not a polymimic checkpoint (it carries no {RECORD!r} record)")
    state = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith(KEPT)}
    return record, state, checkpoint.get("global_step")


def read_export(folder: Path) -> Trained:
    """The record, tensors and step of an export folder."""
    from safetensors.torch import load_file

    config_path, weights_path = folder / EXPORT_CONFIG, folder / EXPORT_WEIGHTS
    for needed in (config_path, weights_path):
        if not needed.is_file():
            raise ValueError(f"{folder}: not a polymimic export (no {needed.name})")
    config = json.loads(config_path.read_text())
    if config.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f"{config_path}: format {config.get('format')!r}, this version reads {EXPORT_FORMAT!r}"
        )
    return config["record"], load_file(weights_path), config.get("step")


def read_trained(path: Path) -> Trained:
    """A checkpoint file, or an export (its folder or either of its files)."""
    if path.is_dir():
        return read_export(path)
    if path.name in (EXPORT_WEIGHTS, EXPORT_CONFIG):
        return read_export(path.parent)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint or export")
    return read_checkpoint(path)


def write_export(
    record: Mapping[str, Any],
    state: Mapping[str, torch.Tensor],
    step: int | None,
    out: str | os.PathLike[str],
    *,
    source: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Write `out/model.safetensors` and `out/config.json`; returns `out`.

    The folder appears whole or not at all; an existing one is replaced only with
    `overwrite` (and then only once the new one is complete).
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
