"""Chunk executors in a simulated control loop with an injected inference delay."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
from torch import nn

from polymimic_data.samples import Normalizer, NormStats, VectorStats
from polymimic_policies import flow_step_velocity
from polymimic_serve import LocalPolicy, make_executor
from polymimic_serve.executors import EXECUTORS
from polymimic_serve.trained_policy import TrainedPolicy

EMBODIMENT = "eva_bimanual"

ALOHA = {"cam_high": "front_1"}


class ScriptedPolicy:
    """Chunk step i asked for at tick R is [100 R + i, R]: what ran shows where it came from."""

    def __init__(self, horizon: int = 8, can_inpaint: bool = True) -> None:
        self.horizon, self.can_inpaint = horizon, can_inpaint
        self.seen: list[dict[str, Any]] = []
        self.resets = 0

    def get_server_metadata(self) -> dict[str, Any]:
        return {"chunk_length": self.horizon, "can_inpaint": self.can_inpaint, "policy": "x"}

    def infer(self, observation: dict[str, Any]) -> dict[str, Any]:
        self.seen.append(observation)
        tick = observation["tick"]
        steps = np.arange(self.horizon, dtype=np.float32)
        return {"actions": np.stack([100 * tick + steps, np.full(self.horizon, tick)], 1)}

    def reset(self) -> None:
        self.resets += 1


def _run(executor, ticks: int) -> np.ndarray:
    return np.stack([executor.act({"tick": t}) for t in range(ticks)])


def test_chunk_without_delay_is_openpis_broker() -> None:
    actions = _run(make_executor("chunk", ScriptedPolicy(), n_action_steps=5), 23)
    for t, (value, asked) in enumerate(actions):
        assert asked == 5 * (t // 5) and value == 100 * asked + t % 5  # step t % 5 of its chunk


@pytest.mark.parametrize("name", ["chunk", "rtc"])
def test_with_a_delay_the_old_chunk_runs_on_until_the_new_one_arrives(name: str) -> None:
    policy = ScriptedPolicy(horizon=8)
    executor = make_executor(name, policy, n_action_steps=4, delay=2)
    actions = _run(executor, 30)
    for t, (value, asked) in enumerate(actions):
        chunk = max(0, (t - 2) // 4)  # asked at 4k, takes over at 4k + 2
        assert asked == 4 * chunk and value == 100 * asked + (t - 4 * chunk), t
    assert executor.switches == list(range(6, 30, 4))
    sent = [o.get("rtc") for o in policy.seen]
    if name == "chunk":
        assert sent == [None] * len(sent)
    else:  # each request carries the current chunk's steps from that tick on, and the delay
        assert sent[0] is None
        for observation, rtc in zip(policy.seen[1:], sent[1:], strict=True):
            tick = observation["tick"]
            asked = 4 * ((tick - 4) // 4)
            np.testing.assert_array_equal(rtc["actions"][:, 0], 100 * asked + np.arange(4, 8))
            assert rtc["delay"] == 2


def test_rtc_freezes_the_held_last_step_when_the_chunk_runs_out_before_the_answer() -> None:
    # In real time a request may expect more delay than the current chunk has steps left: the
    # robot then holds the chunk's last action, and that is what the new chunk must continue.
    policy = ScriptedPolicy(horizon=8)
    executor = make_executor("rtc", policy, n_action_steps=4)
    executor.accept(executor.check(policy.infer({"tick": 0})), asked_at=0, ready_at=0)
    sent = executor.ask({"tick": 6}, tick=6, delay=5)  # 2 steps left, 5 ticks to wait
    rtc = sent["rtc"]
    assert rtc["delay"] == 5 and executor.requests == 1
    np.testing.assert_array_equal(rtc["actions"][:, 0], [6, 7, 7, 7, 7])
    ran = [executor.action(t)[0] for t in range(6, 11)]  # what the robot runs meanwhile
    assert ran == [6, 7, 7, 7, 7] and executor.starved == 3


def test_temporal_ensembling_averages_every_prediction_for_the_tick_oldest_heaviest() -> None:
    coefficient, horizon = 0.5, 4
    actions = _run(
        make_executor("temporal_ensemble", ScriptedPolicy(horizon), coefficient=coefficient), 9
    )
    for t in range(9):
        asked = np.arange(max(0, t - horizon + 1), t + 1)  # oldest first
        weights = np.exp(-coefficient * np.arange(len(asked)))
        values = 100 * asked + (t - asked)
        assert actions[t, 0] == pytest.approx(weights @ values / weights.sum())


def test_temporal_ensembling_with_a_delay_uses_only_predictions_that_have_arrived() -> None:
    actions = _run(
        make_executor("temporal_ensemble", ScriptedPolicy(4), coefficient=0.0, delay=2), 8
    )
    for t in range(8):
        asked = [r for r in range(max(0, t - 3), t + 1) if r == 0 or r + 2 <= t]
        assert actions[t, 0] == pytest.approx(np.mean([100 * r + t - r for r in asked]))


def test_reset_restarts_the_episode_with_a_fresh_chunk() -> None:
    policy = ScriptedPolicy()
    executor = make_executor("chunk", policy, n_action_steps=4)
    _run(executor, 3)
    executor.reset()
    assert policy.resets == 1 and executor.act({"tick": 50})[1] == 50  # asked again at once


@pytest.mark.parametrize(
    ("name", "options", "message"),
    [
        ("chunk", {"delay": 8}, r"delay: 0..7 ticks"),
        (
            "chunk",
            {"n_action_steps": 7, "delay": 2},
            r"n_action_steps: 1..6 \(the chunk's 8 steps less the delay 2\), got 7",
        ),
        ("chunk", {"n_action_steps": 0}, "n_action_steps: 1..8"),
        ("temporal_ensemble", {"coefficient": float("nan")}, "coefficient: a finite number"),
        ("replay", {}, r"executor: 'replay' is not one of \['chunk', 'rtc', 'temporal_ensemble'\]"),
    ],
)
def test_settings_that_cannot_work_are_named(name: str, options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_executor(name, ScriptedPolicy(), **options)


def test_rtc_refuses_a_policy_that_cannot_inpaint() -> None:
    with pytest.raises(ValueError, match="rtc: the 'x' policy cannot continue a chunk"):
        make_executor("rtc", ScriptedPolicy(can_inpaint=False))


def _observations(observation, ticks: int) -> list[dict]:
    """One fixed stream for every executor: the same policy and observations."""
    stream = []
    for tick in range(ticks):
        sent = observation(tick % 3)
        sent["state"] = (0.5 + 0.05 * np.sin(tick / 5) * np.ones(16)).astype(np.float32)
        stream.append(sent)
    return stream


@pytest.mark.parametrize("name", sorted(EXECUTORS))
def test_every_executor_acts_well_formed_on_every_tick(tiny_policy, observation, name: str) -> None:
    options = {} if name == "temporal_ensemble" else {"n_action_steps": 4}
    executor = make_executor(name, LocalPolicy(tiny_policy, ALOHA), delay=2, **options)
    for sent in _observations(observation, 30):
        action = executor.act(sent)
        assert action.shape == (16,) and action.dtype == np.float32 and np.isfinite(action).all()


def test_rtc_without_delay_or_overlap_is_chunk_exactly(tiny_policy, observation) -> None:
    stream = _observations(observation, 24)
    runs = {}
    for name in ("chunk", "rtc"):
        executor = make_executor(name, LocalPolicy(tiny_policy, ALOHA, seed=1), n_action_steps=8)
        runs[name] = np.stack([executor.act(o) for o in stream])
    np.testing.assert_array_equal(runs["rtc"], runs["chunk"])


def boundary_jump(actions: np.ndarray, switches: list[int]) -> float:
    """Mean distance between consecutive executed actions where a new chunk took over."""
    return float(np.mean([np.linalg.norm(actions[t] - actions[t - 1]) for t in switches]))


class HoldPolicy(nn.Module):
    """A flow policy with the exact velocity field of chunks that hold one random pose.

    Each chunk is c * ones(T) per channel with c ~ N(0, spread^2): smooth within a chunk,
    a fresh draw at every request, so chunks joined naively jump and continued ones need
    not. The velocity is E[noise - actions | x_t] of that distribution, in closed form
    (both Gaussian); sampling is the shared Euler loop with real-time chunking's guidance.
    """

    name = "hold"

    def __init__(self, horizon: int, width: int, spread: float = 1.0, steps: int = 10) -> None:
        super().__init__()
        self.horizon, self.width, self.spread, self.steps = horizon, width, spread, steps
        self.anchor = nn.Parameter(torch.zeros(()))  # a device to be on

    def velocity(self, x: torch.Tensor, t: float) -> torch.Tensor:
        ones = torch.ones(self.horizon, self.horizon, dtype=x.dtype)
        eye = torch.eye(self.horizon, dtype=x.dtype)
        s2 = self.spread**2
        cov_x = t**2 * eye + (1 - t) ** 2 * s2 * ones
        cov_ux = t * eye - (1 - t) * s2 * ones
        return torch.einsum("ij,bja->bia", cov_ux @ torch.linalg.inv(cov_x), x)

    def sample_actions(self, batch, generator=None, noise=None, prefix=None) -> torch.Tensor:
        x = noise.float()
        dt = 1.0 / self.steps
        for i in range(self.steps):
            t = 1.0 - i * dt
            x = x - dt * flow_step_velocity(lambda x, t=t: self.velocity(x, t), x, t, prefix)
        return x

    def can_inpaint(self, embodiment: str) -> bool:
        return True


def _hold_policy(tiny_policy) -> TrainedPolicy:
    """The eva layout and cameras of the tiny policy, with HoldPolicy's chunks (in units of 1)."""
    dim, horizon = tiny_policy.layout.dim, tiny_policy.horizon
    unit = VectorStats(*(np.full(dim, v, np.float64) for v in (0.0, 1.0, -3.0, 3.0, -2.3, 2.3)))
    normalizer = Normalizer({EMBODIMENT: NormStats(unit, unit)}, {EMBODIMENT: tiny_policy.layout})
    record = {**tiny_policy.record, "policy": {"name": "hold", "config": {}}}
    return TrainedPolicy(HoldPolicy(horizon, dim), normalizer, record, EMBODIMENT)


def test_rtc_joins_chunks_more_smoothly_than_chunk(tiny_policy, observation) -> None:
    stream = _observations(observation, 60)
    policy, jumps = _hold_policy(tiny_policy), {}
    for name in ("chunk", "rtc"):
        local = LocalPolicy(policy, ALOHA, seed=1)  # the same noise for both
        executor = make_executor(name, local, n_action_steps=4, delay=2)
        actions = np.stack([executor.act(o) for o in stream])
        inside = np.linalg.norm(np.diff(actions, axis=0), axis=1)
        jumps[name] = boundary_jump(actions, executor.switches)
        assert np.median(inside) < 0.1 * jumps["chunk"]  # smooth chunks: the boundaries jump
    assert jumps["rtc"] < 0.2 * jumps["chunk"], jumps
