"""What a policy is told of each dataset's embodiment: plain numbers and names.

A policy never takes an object of polymimic-data (DESIGN.md); these dicts are what it gets
instead, derived from the layouts alone, so it can be built, and its config checked, before
any data is read.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from polymimic_data.embodiments.registry import get_embodiment

DEFAULT_CAMERAS = ("front_1",)


def dataset_cameras(spec: Mapping[str, Any]) -> tuple[str, ...]:
    """The cameras a data config's dataset reads: its `cameras`, DEFAULT_CAMERAS if none.

    ValueError for a plain string (`cameras: corner4` would read as seven one-character
    cameras), for `auto` left unnamed (real episodes name it when they are resolved;
    synthetic data cannot), and for null.
    """
    cameras = spec.get("cameras", DEFAULT_CAMERAS)
    if cameras == "auto":
        raise ValueError(
            "cameras: 'auto' takes the cameras the episodes declare, and none were resolved "
            "from episodes here (synthetic data?); list them"
        )
    if cameras is None or isinstance(cameras, str):
        raise ValueError(f"cameras: a list of camera names, e.g. [front_1]; got {cameras!r}")
    return tuple(str(c) for c in cameras)


def embodiment_specs(
    datasets: Mapping[str, Mapping[str, Any]], *, history: int, horizon: int
) -> dict[str, dict[str, Any]]:
    """Per dataset (named after its embodiment), the policy's inputs.

    State and action widths, history, horizon, cameras and the action channel groups, in
    the form polymimic_policies' `EmbodimentSpec.of` takes.
    """
    specs = {}
    for name, spec in datasets.items():
        embodiment = get_embodiment(str(spec["embodiment"]))
        layout = embodiment.layout(spec.get("layout"))
        specs[name] = {
            "state_dim": layout.dim,
            "action_dim": layout.dim,
            "history": int(history),
            "horizon": int(horizon),
            "cameras": list(dataset_cameras(spec)),
            "action_groups": [[group.name, group.width] for group in layout.groups],
        }
    return specs


def policy_embodiments(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """`embodiment_specs` of a data config (`datasets`, `history`, `horizon`): the policy's."""
    return embodiment_specs(
        data["datasets"], history=int(data["history"]), horizon=int(data["horizon"])
    )


def action_rates(data: Mapping[str, Any]) -> dict[str, float]:
    """Per dataset of a data config, the action steps per second of its chunks.

    The rate to execute them at: the episodes' frame rate over the frames one action
    step spans (`action_window` frames over `horizon` steps, else `action_stride`). A
    dataset's own `action_window` overrides the data config's (a 30 Hz person and a 50 Hz
    robot whose chunks span the same seconds).
    """
    rates = {}
    for name, spec in data["datasets"].items():
        window = spec.get("action_window", data.get("action_window"))
        horizon = int(data["horizon"])
        frames_per_step = float(window) / horizon if window else int(data["action_stride"])
        rates[name] = get_embodiment(str(spec["embodiment"])).fps / frames_per_step
    return rates
