"""A trained policy outside training: what a checkpoint carries, and `load_policy`.

Every checkpoint holds, under "polymimic", everything needed to use its weights, as plain
data (it loads with `torch.load(weights_only=True)`): the policy's registered name and config, the
embodiments' numbers and names, the layouts, the normalisation statistics and the data
settings the policy was trained with (image size, cameras, history, horizon).
`load_policy(path)` rebuilds the policy from that alone; `predict` takes one raw
observation and returns an unnormalised action chunk with its channel names.

`export_policy(checkpoint, out)` writes the same without training state: `model.safetensors`
(the policy's and the normaliser's tensors) and `config.json` (the record and the step),
which `load_policy(out)` loads too.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from polymimic_data.geometry import ChannelGroup, Layout
from polymimic_data.samples import Normalizer, NormStats
from polymimic_policies import Policy, policy_from_record, policy_record
from polymimic_train.runs.run_dirs import CHECKPOINTS

RECORD = "polymimic"
EXPORT_WEIGHTS, EXPORT_CONFIG = "model.safetensors", "config.json"
EXPORT_FORMAT = "polymimic-policy/1"
KEPT = ("policy.", "normalizer.")  # the state a trained policy needs; the rest is training


def checkpoint_record(
    *,
    policy: Policy,
    embodiments: Mapping[str, Mapping[str, Any]],
    layouts: Mapping[str, Layout],
    norm_stats: Mapping[str, NormStats],
    norm_mode: str,
    image_size: Sequence[int],
) -> dict[str, Any]:
    """The plain-data description a checkpoint carries (see the module docstring)."""
    return {
        "policy": policy_record(policy),
        "embodiments": {name: dict(spec) for name, spec in embodiments.items()},
        "layouts": {name: layout.to_dict() for name, layout in layouts.items()},
        "norm": {"mode": norm_mode, "stats": {n: s.to_json() for n, s in norm_stats.items()}},
        "image_size": [int(v) for v in image_size],
    }


def _layout(data: Mapping[str, Any]) -> Layout:
    groups = tuple(ChannelGroup(**g) for g in data["groups"])
    return Layout(str(data["name"]), groups)


class TrainedPolicy:
    """A policy with its normaliser, for one embodiment: raw observation in, actions out."""

    def __init__(
        self,
        policy: Policy,
        normalizer: Normalizer,
        record: Mapping[str, Any],
        embodiment: str,
        step: int | None = None,
    ) -> None:
        self.policy, self.normalizer, self.record = policy.eval(), normalizer.eval(), record
        self.embodiment, self.step = embodiment, step  # step: the training step of the weights
        spec = record["embodiments"][embodiment]
        self.cameras = list(spec["cameras"])
        self.history, self.horizon = int(spec["history"]), int(spec["horizon"])
        self.layout = _layout(record["layouts"][embodiment])
        self.image_size = tuple(record["image_size"])

    @property
    def channels(self) -> list[str]:
        """One name per action channel: `<group>.<index within the group>`."""
        return [f"{g.name}.{i}" for g in self.layout.groups for i in range(g.width)]

    @property
    def device(self) -> torch.device:
        return next(self.policy.parameters()).device

    def _images(self, images: Mapping[str, np.ndarray], batched: bool) -> dict[str, torch.Tensor]:
        if sorted(images) != sorted(self.cameras):
            raise ValueError(
                f"observation images: cameras {sorted(images)}, this policy needs {self.cameras}"
            )
        out = {}
        for camera, frames in images.items():
            array = np.asarray(frames)
            if (
                array.dtype != np.uint8
                or array.ndim != (4 if batched else 3)
                or array.shape[-1] != 3
            ):
                want = "(B, H, W, 3)" if batched else "(H, W, 3)"
                raise ValueError(
                    f"observation images[{camera!r}]: uint8 {want}, got {array.dtype} {array.shape}"
                )
            tensor = torch.from_numpy(array if batched else array[None]).permute(0, 3, 1, 2)
            if tuple(tensor.shape[-2:]) != self.image_size:  # as training resizes its frames
                tensor = (
                    F.interpolate(
                        tensor.float(), size=self.image_size, mode="bilinear", antialias=True
                    )
                    .round()
                    .clamp_(0, 255)
                    .to(torch.uint8)
                )
            out[f"images.{camera}"] = tensor.to(self.device)
        return out

    def _state(self, state: np.ndarray, batched: bool) -> torch.Tensor:
        array = np.asarray(state, dtype=np.float32)
        want = (self.history, self.layout.dim)
        if array.shape[-2:] != want or array.ndim != (3 if batched else 2):
            raise ValueError(
                f"observation state: ({'B, ' if batched else ''}{want[0]}, {want[1]}) in the "
                f"{self.layout.name} layout's units, got {array.shape}"
            )
        tensor = torch.from_numpy(array if batched else array[None]).to(self.device)
        return self.normalizer.normalize_state(self.embodiment, tensor)

    @torch.no_grad()
    def predict_batch(
        self, observations: Mapping[str, Any], noise: torch.Tensor | None = None, seed: int = 0
    ) -> dict[str, Any]:
        """Like `predict`, with a leading batch dimension on images, state and prompts."""
        return self._predict(observations, batched=True, noise=noise, seed=seed)

    @torch.no_grad()
    def predict(
        self, observation: Mapping[str, Any], noise: torch.Tensor | None = None, seed: int = 0
    ) -> dict[str, Any]:
        """One raw observation in, one unnormalised action chunk out.

        In: `{"images": {camera: uint8 (H, W, 3)}, "state": (K, S), "prompt": str}`, images
        at any resolution, state in the data's units. Out: `{"actions": float32 (T, A),
        "channels": [a name per channel]}`. Sampling starts from `noise` (1, T, A) if
        given, else from a generator seeded by `seed`: the same observation, the same chunk.
        """
        out = self._predict(observation, batched=False, noise=noise, seed=seed)
        return {"actions": out["actions"][0], "channels": out["channels"]}

    def _predict(
        self,
        observation: Mapping[str, Any],
        *,
        batched: bool,
        noise: torch.Tensor | None,
        seed: int,
    ) -> dict[str, Any]:
        unknown = set(observation) - {"images", "state", "prompt"}
        if unknown:
            raise ValueError(
                f"observation: unknown keys {sorted(unknown)}; use images, state, prompt"
            )
        state = self._state(observation["state"], batched)
        prompt = observation.get("prompt", [""] * len(state) if batched else "")
        batch = {
            "embodiment": self.embodiment,
            "state": state,
            "prompt": list(prompt) if batched else [prompt],
            **self._images(observation["images"], batched),
        }
        if noise is None:
            shape = (len(state), self.horizon, self.layout.dim)
            noise = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        chunk = self.policy.sample_actions(batch, noise=noise.to(self.device))
        actions = self.normalizer.denormalize_actions(self.embodiment, chunk)
        return {"actions": actions.float().cpu().numpy(), "channels": self.channels}


def _build(record: Mapping[str, Any]) -> tuple[Policy, Normalizer]:
    """The policy and normaliser a record describes.

    Only a registered policy class is built (policy_from_record refuses any other name
    before importing or calling anything), and it reads no initial weights of its own:
    the checkpoint's state dict is loaded into it next.
    """
    policy = policy_from_record(
        record["policy"], record["embodiments"], weights_from_checkpoint=True
    )
    layouts = {name: _layout(layout) for name, layout in record["layouts"].items()}
    stats = {name: NormStats.from_json(s) for name, s in record["norm"]["stats"].items()}
    return policy, Normalizer(stats, layouts, mode=record["norm"]["mode"])


def _read_checkpoint(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], int | None]:
    checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    record = checkpoint.get(RECORD) if isinstance(checkpoint, dict) else None
    if record is None:
        raise ValueError(f"{path}: not a polymimic checkpoint (it carries no {RECORD!r} record)")
    state = {k: v for k, v in checkpoint["state_dict"].items() if k.startswith(KEPT)}
    return record, state, checkpoint.get("global_step")


def _read_export(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], int | None]:
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


def _read(path: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor], int | None]:
    """A checkpoint file, or an export (its folder or either of its files)."""
    if path.is_dir():
        return _read_export(path)
    if path.name in (EXPORT_WEIGHTS, EXPORT_CONFIG):
        return _read_export(path.parent)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such checkpoint or export")
    return _read_checkpoint(path)


def load_policy(
    path: str | os.PathLike[str], device: str = "cpu", embodiment: str | None = None
) -> TrainedPolicy:
    """A checkpoint of `train` or an export, rebuilt from what it carries alone."""
    path = Path(path)
    record, state, step = _read(path)
    embodiments = sorted(record["embodiments"])
    if embodiment is None:
        if len(embodiments) > 1:
            raise ValueError(f"{path}: trained on {embodiments}; choose one with embodiment=")
        embodiment = str(embodiments[0])
    elif embodiment not in embodiments:
        raise ValueError(f"{path}: trained on {embodiments}, not {embodiment!r}")
    policy, normalizer = _build(record)
    policy.load_state_dict({k[7:]: v for k, v in state.items() if k.startswith("policy.")})
    normalizer.load_state_dict({k[11:]: v for k, v in state.items() if k.startswith("normalizer.")})
    return TrainedPolicy(policy.to(device), normalizer.to(device), record, embodiment, step)


def default_export_dir(checkpoint: Path, step: int | None) -> Path:
    """`<run dir>/export/step<N>` for a run's checkpoint, else `export/<name>` beside it."""
    resolved = checkpoint.resolve()
    in_run = resolved.parent.name == CHECKPOINTS
    base = resolved.parent.parent if in_run else resolved.parent
    return base / "export" / (f"step{step:06d}" if step is not None else resolved.stem)


def export_policy(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write `out/model.safetensors` and `out/config.json` from a checkpoint of `train`.

    `out` defaults to `default_export_dir`. The folder appears whole or not at all; an
    existing one is replaced only with `overwrite` (and then only once the new one is
    complete).
    """
    from safetensors.torch import save_file

    checkpoint = Path(checkpoint)
    record, state, step = _read_checkpoint(checkpoint)
    out = Path(out) if out is not None else default_export_dir(checkpoint, step)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise FileExistsError(f"{out}: exists and is not empty; choose another folder or overwrite")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        # safetensors wants contiguous tensors that share no storage.
        save_file({k: v.contiguous().clone() for k, v in state.items()}, staging / EXPORT_WEIGHTS)
        config = {
            "format": EXPORT_FORMAT,
            "step": step,
            "source": str(checkpoint.resolve()),
            "record": record,
        }
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
