"""Observations as robot runtimes send them, checked and made ready for a trained policy.

openpi's runtimes send `{"state": (S,), "images": {camera: uint8 (3, H, W) or (H, W, 3)},
"prompt": str}` with their own camera names and at the camera's resolution. A reader
renames cameras (`camera_map`, e.g. ALOHA's cam_high to front_1), resizes frames to the
policy's size, and keeps the K-step state history the policy needs per client (filled by
repeating the first state, restarted on `reset: true`). polymimic's own keys: `reset`, and
`rtc: {"actions": (P, A), "delay": d}` to continue the previous chunk (real-time chunking).
Other keys are ignored. Every complaint is an ObservationError naming the key and what
was expected, bounded in length (a client's value is described, never repeated whole); a
bad observation changes no history, and one whose inference fails is undone
(`StateHistory.undo`). Images are bounded per frame (`max_image_side`, `max_image_pixels`)
before anything resizes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from polymimic_serve.trained_policy import Continuation, TrainedPolicy
from polymimic_serve.wire import brief

MAX_IMAGE_SIDE = 3840  # 4K UHD's width: a camera frame of any real robot fits
MAX_IMAGE_PIXELS = 3840 * 2160


class ObservationError(ValueError):
    """An observation this policy cannot act on; the message names the key."""


@dataclass
class Request:
    """One checked observation: what the policy runs on (see `stack`)."""

    images: dict[str, torch.Tensor]  # the policy's camera -> uint8 (1, 3, h, w) at its size
    state: np.ndarray  # (K, S) float32, the history
    prompt: str
    continuation: Continuation | None = None
    previous: np.ndarray | None = None  # the history before this observation (for undo)


def stack(requests: list[Request]) -> tuple[dict[str, Any], list[Continuation | None]]:
    """Requests as one batch for `TrainedPolicy.predict_batch`, and their continuations."""
    cameras = requests[0].images
    batch = {
        "images": {c: torch.cat([r.images[c] for r in requests]).numpy() for c in cameras},
        "state": np.stack([r.state for r in requests]),
        "prompt": [r.prompt for r in requests],
    }
    return batch, [r.continuation for r in requests]


def parse_camera_map(text: str | None) -> dict[str, str]:
    """`cam_high=front_1,cam_left_wrist=left_wrist` -> {robot camera: policy camera}."""
    mapping: dict[str, str] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(","))):
        source, sep, target = item.partition("=")
        if not sep or not source.strip() or not target.strip():
            raise ValueError(f"camera map: {item!r} is not ROBOT_CAMERA=POLICY_CAMERA")
        mapping[source.strip()] = target.strip()
    return mapping


@dataclass
class ObservationReader:
    """Checks observations for one trained policy and turns them into Requests."""

    policy: TrainedPolicy
    camera_map: Mapping[str, str] = field(default_factory=dict)
    state_key: str = "state"
    max_image_side: int = MAX_IMAGE_SIDE
    max_image_pixels: int = MAX_IMAGE_PIXELS

    def __post_init__(self) -> None:
        unknown = sorted(set(self.camera_map.values()) - set(self.policy.cameras))
        if unknown:
            raise ValueError(
                f"camera map: {unknown} are not cameras of this policy {self.policy.cameras}"
            )

    def metadata(self) -> dict[str, Any]:
        """What a client is told on connect (openpi sends a dict; runtimes read keys of it)."""
        policy = self.policy
        return {
            "policy": policy.record["policy"]["name"],
            "embodiment": policy.embodiment,
            "cameras": list(policy.cameras),
            "camera_map": dict(self.camera_map),
            "image_size": list(policy.image_size),
            "state_key": self.state_key,
            "state_dim": policy.layout.dim,
            "state_channels": policy.channels,  # state and actions share the layout
            "action_dim": policy.layout.dim,
            "action_channels": policy.channels,
            "history": policy.history,
            "chunk_length": policy.horizon,
            "fps": policy.fps,
            "step": policy.step,
            "can_inpaint": policy.can_inpaint,
        }

    def read(self, message: Any, history: StateHistory) -> Request:
        """The Request for `message`; the history advances only if all of it is good."""
        if not isinstance(message, Mapping):
            raise ObservationError(
                f"observation: a map of keys (state, images, prompt), got {type(message).__name__}"
            )
        reset = message.get("reset", False)
        if not isinstance(reset, bool | np.bool_):
            raise ObservationError(f"reset: true or false, got {brief(reset)}")
        state = self._state(message)
        images = self._images(message)
        prompt = message.get("prompt", "")
        if not isinstance(prompt, str):
            raise ObservationError(f"prompt: a string, got {brief(prompt)}")
        continuation = self._continuation(message.get("rtc"))
        previous = history.snapshot()
        states = history.push(state, restart=bool(reset))
        return Request(images, states, prompt, continuation, previous)

    def _state(self, message: Mapping[str, Any]) -> np.ndarray:
        key, dim, history = self.state_key, self.policy.layout.dim, self.policy.history
        if key not in message:
            raise ObservationError(f"{key}: missing; expected float ({dim},) in the data's units")
        want = f"a float array ({dim},) or ({history}, {dim})"
        array = float32_array(key, message[key], want)
        if array.shape not in ((dim,), (history, dim)):
            raise ObservationError(
                f"{key}: shape ({dim},) (or the whole history, ({history}, {dim})) for the "
                f"{self.policy.layout.name} layout, got {array.shape}"
            )
        return array

    def _images(self, message: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        sent = message.get("images", {})
        if not isinstance(sent, Mapping):
            raise ObservationError(f"images: a map of camera -> image, got {brief(sent)}")
        # a camera map may also name top-level keys (e.g. DROID's observation/wrist_image_left)
        found: dict[str, tuple[str, Any]] = {}
        for name, target in self.camera_map.items():
            if name in sent:
                found.setdefault(target, (f"images[{name!r}]", sent[name]))
            elif name in message:
                found.setdefault(target, (name, message[name]))
        for name in self.policy.cameras:
            if name in sent and name not in found:
                found[name] = (f"images[{name!r}]", sent[name])
        missing = [c for c in self.policy.cameras if c not in found]
        if missing:
            mapped = [k for k, v in self.camera_map.items() if v in missing]
            raise ObservationError(
                f"images: no image for the policy's camera {missing} "
                f"(sent {_names(sent)}; expected {mapped or missing}"
                f"{'' if self.camera_map else '; rename cameras with --camera-map'})"
            )
        return {camera: self._image(*found[camera], camera) for camera in self.policy.cameras}

    def _image(self, key: str, image: Any, camera: str) -> torch.Tensor:
        if (
            not isinstance(image, np.ndarray)
            or image.dtype != np.uint8
            or image.ndim != 3
            or 3 not in (image.shape[0], image.shape[-1])
            or min(image.shape) == 0
        ):
            raise ObservationError(f"{key}: uint8 (3, H, W) or (H, W, 3), got {brief(image)}")
        height, width = image.shape[1:] if image.shape[0] == 3 else image.shape[:2]
        if max(height, width) > self.max_image_side or height * width > self.max_image_pixels:
            raise ObservationError(
                f"{key}: a frame of {height}x{width}; this server takes frames up to "
                f"{self.max_image_side} pixels a side and {self.max_image_pixels} pixels in all "
                f"(the policy sees {self.policy.image_size[0]}x{self.policy.image_size[1]})"
            )
        return self.policy.image_tensor(camera, image)

    def _continuation(self, rtc: Any) -> Continuation | None:
        if rtc is None:
            return None
        if not isinstance(rtc, Mapping) or "actions" not in rtc or "delay" not in rtc:
            raise ObservationError(f"rtc: a map with actions (P, A) and delay, got {brief(rtc)}")
        if not self.policy.can_inpaint:
            raise ObservationError(
                f"rtc: this {self.policy.record['policy']['name']!r} policy cannot continue a "
                "chunk (real-time chunking needs a flow-matching policy)"
            )
        delay = rtc["delay"]
        if isinstance(delay, bool) or not isinstance(delay, int | np.integer):
            raise ObservationError(f"rtc.delay: an integer, got {brief(delay)}")
        width = self.policy.layout.dim
        actions = float32_array("rtc.actions", rtc["actions"], f"a float array (P, {width})")
        continuation = Continuation(actions, int(delay))
        try:
            continuation.check(self.policy.horizon, self.policy.layout.dim)
        except ValueError as exc:
            raise ObservationError(str(exc)) from exc
        return continuation


class StateHistory:
    """The last K states of one client, filled by repeating the first."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.states: np.ndarray | None = None

    def snapshot(self) -> np.ndarray | None:
        """The history as it is (for `undo`)."""
        return None if self.states is None else self.states.copy()

    def undo(self, request: Request) -> None:
        """Put the history back as it was before `request` was read (its inference failed)."""
        self.states = request.previous

    def push(self, state: np.ndarray, restart: bool = False) -> np.ndarray:
        """Add a state (S,) or set the whole history (K, S); returns the history (K, S)."""
        if state.ndim == 2:
            self.states = state.copy()
        elif restart or self.states is None:
            self.states = np.repeat(state[None], self.steps, axis=0)
        else:
            self.states = np.concatenate([self.states[1:], state[None]])
        return self.states.copy()

    def reset(self) -> None:
        """Forget the states (a new episode)."""
        self.states = None


def _names(keys: Any, shown: int = 8) -> str:
    """A client's keys for an error text: a few, each cut short."""
    names = sorted(k[:40] if isinstance(k, str) else brief(k) for k in keys)
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return f"{names[:shown]}{more}"


def float32_array(key: str, value: Any, want: str) -> np.ndarray:
    """`value` (an array or nested lists of numbers) as float32, every value finite in it.

    Checked after the conversion: a float64 above float32's range is inf to the model.
    """
    if isinstance(value, np.ndarray):
        array = value
    elif isinstance(value, list | tuple):
        try:
            array = np.array(value, dtype=np.float64)
        except (ValueError, TypeError, OverflowError):
            raise ObservationError(f"{key}: {want}, got a ragged or non-numeric list") from None
    else:
        raise ObservationError(f"{key}: {want}, got {brief(value)}")
    if array.dtype.kind not in "fiu":
        raise ObservationError(f"{key}: {want}, got {brief(array)}")
    with np.errstate(over="ignore"):
        converted = array.astype(np.float32)
    if not np.isfinite(converted).all():
        raise ObservationError(
            f"{key}: every value must be finite as float32 (the model's dtype; at most "
            f"{np.finfo(np.float32).max:.3g} in size)"
        )
    return converted
