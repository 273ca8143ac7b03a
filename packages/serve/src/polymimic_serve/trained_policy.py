"""A trained policy outside training: `load_policy` and `TrainedPolicy.predict`.

`load_policy(path)` rebuilds the policy from what a checkpoint or an export carries alone
(see checkpoints); `predict` takes one raw observation and returns an unnormalised action
chunk with its channel names, optionally continuing the previous chunk (real-time
chunking, for the policies that can inpaint).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from polymimic_data.geometry import ChannelGroup, Layout
from polymimic_data.samples import Normalizer, NormStats, resize_uint8
from polymimic_policies import ActionPrefix, Policy, policy_from_record, prefix_weights
from polymimic_serve.checkpoints import (
    DEFAULT_MAX_PARAMETERS,
    CheckpointError,
    check_state,
    local_weights_inside,
    open_trained,
    sized_policy,
)


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
        return {
            f"images.{camera}": self.image_tensor(camera, frames, batched).to(self.device)
            for camera, frames in images.items()
        }

    def image_tensor(self, camera: str, frames: Any, batched: bool = False) -> torch.Tensor:
        """uint8 (B, 3, H, W) at the policy's image size, from HWC or CHW frames of any size.

        Resized as training resizes its frames (bilinear, antialiased, rounded).
        """
        array = np.asarray(frames)
        channels_last = array.shape[-1:] == (3,)
        if (
            array.dtype != np.uint8
            or array.ndim != (4 if batched else 3)
            or not (channels_last or array.shape[-3:-2] == (3,))
        ):
            want = "(B, H, W, 3) or (B, 3, H, W)" if batched else "(H, W, 3) or (3, H, W)"
            raise ValueError(
                f"observation images[{camera!r}]: uint8 {want}, got {array.dtype} {array.shape}"
            )
        resize = tuple(array.shape[-3:-1] if channels_last else array.shape[-2:]) != tuple(
            self.image_size
        )
        if not array.flags.writeable and not resize:  # e.g. unpacked from a message
            array = array.copy()  # torch wants its own; resizing below makes a new tensor
        with warnings.catch_warnings():  # read-only: only read, by the resize
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensor = torch.from_numpy(array if batched else array[None])
        if channels_last:
            tensor = tensor.permute(0, 3, 1, 2)
        if resize:
            # one channel at a time in float: a third of the memory, the same numbers
            tensor = resize_uint8(tensor, self.image_size, by_channel=True)
        return tensor.contiguous()

    def _state(self, state: np.ndarray, batched: bool) -> dict[str, torch.Tensor]:
        """The state normalised, with its latest step as an action (`action_anchor`)."""
        with np.errstate(over="ignore"):
            array = np.asarray(state, dtype=np.float32)
        want = (self.history, self.layout.dim)
        if array.shape[-2:] != want or array.ndim != (3 if batched else 2):
            raise ValueError(
                f"observation state: ({'B, ' if batched else ''}{want[0]}, {want[1]}) in the "
                f"{self.layout.name} layout's units, got {array.shape}"
            )
        if not np.isfinite(array).all():
            raise ValueError(
                "observation state: every value must be finite as float32 (the model's dtype)"
            )
        tensor = torch.from_numpy(array if batched else array[None]).to(self.device)
        return self.normalizer.normalize_observation(self.embodiment, tensor)

    @property
    def can_inpaint(self) -> bool:
        """Whether `predict` can continue a previous chunk (real-time chunking)."""
        return self.policy.can_inpaint(self.embodiment)

    @property
    def fps(self) -> float | None:
        """The frame rate of the episodes it was trained on (one action step each), if known."""
        rate = self.record.get("fps", {}).get(self.embodiment)
        return float(rate) if rate is not None else None

    @torch.no_grad()
    def predict_batch(
        self,
        observations: Mapping[str, Any],
        noise: torch.Tensor | None = None,
        seed: int = 0,
        continuations: Sequence[Continuation | None] | None = None,
    ) -> dict[str, Any]:
        """Like `predict`, with a leading batch dimension on images, state and prompts.

        `continuations`: one per row (None: that row continues nothing). Raises
        NonFiniteActions (naming the rows) if any row's actions are not finite; its
        `finite` mask and `actions` let a server answer the other rows.
        """
        out = self._predict(
            observations, batched=True, noise=noise, seed=seed, continuations=continuations
        )
        finite = np.isfinite(out["actions"]).all(axis=(1, 2))
        if not finite.all():
            raise NonFiniteActions(out["actions"], finite)
        return out

    @torch.no_grad()
    def predict(
        self,
        observation: Mapping[str, Any],
        noise: torch.Tensor | None = None,
        seed: int = 0,
        continuation: Continuation | None = None,
    ) -> dict[str, Any]:
        """One raw observation in, one unnormalised action chunk out.

        In: `{"images": {camera: uint8 (H, W, 3) or (3, H, W)}, "state": (K, S), "prompt":
        str}`, images at any resolution, state in the data's units. Out: `{"actions":
        float32 (T, A), "channels": [a name per channel]}`. Sampling starts from `noise`
        (1, T, A) if given, else from a generator seeded by `seed`: the same observation,
        the same chunk. With `continuation` the chunk continues the previous one.
        """
        out = self._predict(
            observation,
            batched=False,
            noise=noise,
            seed=seed,
            continuations=None if continuation is None else [continuation],
        )
        if not np.isfinite(out["actions"]).all():
            raise NonFiniteActions(out["actions"], np.zeros(1, bool))
        return {"actions": out["actions"][0], "channels": out["channels"]}

    def _prefix(
        self, continuations: Sequence[Continuation | None] | None, size: int
    ) -> ActionPrefix | None:
        """The normalised prefix of the rows that continue a chunk (None if none does)."""
        if continuations is None or all(c is None for c in continuations):
            return None
        if len(continuations) != size:
            raise ValueError(
                f"continuations: one per observation ({size}), got {len(continuations)}"
            )
        if not self.can_inpaint:
            name = self.record["policy"]["name"]
            raise ValueError(
                f"this {name!r} policy cannot continue a chunk (real-time chunking needs a "
                "flow-matching policy: HPT with head: flow, or Pi); use the chunk or "
                "temporal_ensemble executor"
            )
        width = self.layout.dim
        actions = torch.zeros(size, self.horizon, width)
        weights = torch.zeros(size, self.horizon)
        for row, continuation in enumerate(continuations):
            if continuation is None:
                continue
            steps = continuation.check(self.horizon, width)
            if steps:
                previous = torch.from_numpy(continuation.actions).float()[None].to(self.device)
                actions[row, :steps] = self.normalizer.normalize_actions(self.embodiment, previous)[
                    0
                ].cpu()
            weights[row] = prefix_weights(continuation.delay, steps, self.horizon)
        return ActionPrefix(actions.to(self.device), weights.to(self.device))

    def _predict(
        self,
        observation: Mapping[str, Any],
        *,
        batched: bool,
        noise: torch.Tensor | None,
        seed: int,
        continuations: Sequence[Continuation | None] | None,
    ) -> dict[str, Any]:
        unknown = set(observation) - {"images", "state", "prompt"}
        if unknown:
            raise ValueError(
                f"observation: unknown keys {sorted(unknown)}; use images, state, prompt"
            )
        normalised = self._state(observation["state"], batched)
        size = len(normalised["state"])
        prompt = observation.get("prompt", [""] * size if batched else "")
        batch = {
            "embodiment": self.embodiment,
            **normalised,
            "prompt": list(prompt) if batched else [prompt],
            **self._images(observation["images"], batched),
        }
        if noise is None:
            shape = (size, self.horizon, self.layout.dim)
            noise = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        prefix = self._prefix(continuations, size)
        chunk = self.policy.sample_actions(batch, noise=noise.to(self.device), prefix=prefix)
        actions = self.normalizer.denormalize_actions(self.embodiment, chunk)
        return {"actions": actions.float().cpu().numpy(), "channels": self.channels}


class NonFiniteActions(ValueError):
    """The policy's actions for some observations are not all finite: never sent to a robot.

    A state far outside what the policy was trained on (finite, yet past what the model's
    arithmetic holds) does this. `actions` (B, T, A) and `finite` (B,) say which rows are good.
    """

    def __init__(self, actions: np.ndarray, finite: np.ndarray) -> None:
        self.actions, self.finite = actions, finite
        rows = [int(i) for i in np.flatnonzero(~finite)]
        super().__init__(
            f"the policy's actions are not finite for observation(s) {rows[:8]} of "
            f"{len(finite)}: not sent; is the state in the data's units and range?"
        )


@dataclass(frozen=True)
class Continuation:
    """The previous chunk's steps a new chunk continues (real-time chunking).

    `actions` (P, A) in the data's units, row 0 aligned with the new chunk's first step
    (the previous chunk's steps from the one the robot was at when it asked); `delay`: how
    many of them will have run by the time the new chunk arrives (those are frozen, the
    rest of the P are followed with decaying weight, see polymimic_policies'
    real_time_chunking).
    """

    actions: np.ndarray
    delay: int

    def check(self, horizon: int, width: int) -> int:
        """The number of steps P; ValueError naming what does not fit."""
        with np.errstate(over="ignore"):
            actions = np.asarray(self.actions, dtype=np.float32)
        if actions.ndim != 2 or actions.shape[1] != width or actions.shape[0] > horizon:
            raise ValueError(
                f"rtc.actions: float (P, {width}) with P <= {horizon} (the chunk's horizon), "
                f"got {actions.dtype} {actions.shape}"
            )
        if not np.isfinite(actions).all():
            raise ValueError("rtc.actions: every value must be finite")
        if not 0 <= int(self.delay) <= horizon:
            raise ValueError(f"rtc.delay: an integer in 0..{horizon}, got {self.delay!r}")
        return int(actions.shape[0])


def _build(
    record: Mapping[str, Any], policy: Mapping[str, Any] | None = None
) -> tuple[Policy, Normalizer]:
    """The policy and normaliser a record describes.

    Only a registered policy class is built (policy_from_record refuses any other name
    before importing or calling anything), and it reads no initial weights of its own:
    the checkpoint's state dict is loaded into it next. `policy`: the record's policy with
    its local paths resolved (checkpoints.local_weights_inside), else the record's own.
    load_policy calls it only on a checked record, once its size is known (see there).
    """
    built = policy_from_record(
        record["policy"] if policy is None else policy,
        record["embodiments"],
        weights_from_checkpoint=True,
    )
    layouts = {name: _layout(layout) for name, layout in record["layouts"].items()}
    stats = {name: NormStats.from_json(s) for name, s in record["norm"]["stats"].items()}
    return built, Normalizer(stats, layouts, mode=record["norm"]["mode"])


def load_policy(
    path: str | os.PathLike[str],
    device: str = "cpu",
    embodiment: str | None = None,
    *,
    max_parameters: int = DEFAULT_MAX_PARAMETERS,
    weights_dir: str | os.PathLike[str] | None = None,
    prefer: str | None = None,
) -> TrainedPolicy:
    """A checkpoint of `train` or an export, rebuilt from what it carries alone.

    Nothing is allocated before the file is checked (see checkpoints): the record's shape
    and image size (`check_record`); every local path the policy reads (Pi's PaliGemma
    config and tokenizer; never weights) inside the checkpoint's folder or `weights_dir`
    (`local_weights_inside`); the policy's size, counted on the meta device, at most
    `max_parameters` parameters and buffers (`sized_policy`; raise it for a real giant);
    the file's tensors exactly the policy's, shape for shape. Anything wrong with the file
    raises CheckpointError (a ValueError): one line naming the file, what is wrong and what
    was expected. An embodiment it was not trained on raises ValueError. Without an
    `embodiment`, a policy trained on one acts as it, and one trained on several as
    `prefer` (e.g. the simulated task's robot) when it holds it.
    """
    path = Path(path)
    opened = open_trained(path)
    record, source = opened.record, opened.source
    embodiments = sorted(record["embodiments"])
    if embodiment is None and prefer in embodiments:
        embodiment = prefer
    if embodiment is None:
        if len(embodiments) > 1:
            raise ValueError(f"{path}: trained on {embodiments}; choose one with embodiment=")
        embodiment = str(embodiments[0])
    elif embodiment not in embodiments:
        raise ValueError(f"{path}: trained on {embodiments}, not {embodiment!r}")
    policy_record = local_weights_inside(opened, weights_dir)
    shell = sized_policy(
        policy_record, record["embodiments"], max_parameters=max_parameters, source=source
    )
    expected = shell.state_dict()  # on the meta device: shapes, no memory
    del shell
    state = opened.state()
    parts = {
        prefix: {k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)}
        for prefix in ("policy.", "normalizer.")
    }
    check_state(expected, parts["policy."], "policy.", opened.weights)
    policy, normalizer = _build(record, policy_record)
    check_state(normalizer.state_dict(), parts["normalizer."], "normalizer.", opened.weights)
    try:
        policy.load_state_dict(parts["policy."])
        normalizer.load_state_dict(parts["normalizer."])
    except RuntimeError as exc:  # e.g. a dtype that does not cast
        text = " ".join(str(exc).split())[:300]
        raise CheckpointError(f"{opened.weights}: its tensors do not load: {text}") from None
    return TrainedPolicy(policy.to(device), normalizer.to(device), record, embodiment, opened.step)
