"""Closed-loop rollouts: executors inside them, Wilson intervals, simulators that give up."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polymimic_serve import LocalPolicy, load_policy
from polymimic_sim import RolloutSettings, evaluate, make_task, rollout, wilson_interval
from polymimic_sim.cli import main
from polymimic_sim.tasks.task_types import Step

TASK, SIZE = "metaworld/reach-v3", (48, 64)


@pytest.mark.parametrize(
    ("successes", "trials", "expected"),
    [
        (45, 50, (0.7864, 0.9565)),
        (0, 10, (0.0, 0.2775)),
        (10, 10, (0.7225, 1.0)),
        (1, 2, (0.0945, 0.9055)),
    ],
)
def test_the_wilson_interval_matches_its_formula(successes, trials, expected) -> None:
    assert wilson_interval(successes, trials) == pytest.approx(expected, abs=1e-4)
    with pytest.raises(ValueError, match="trials: a positive number"):
        wilson_interval(0, 0)


def test_an_unknown_executor_is_refused_when_the_settings_are_made() -> None:
    with pytest.raises(ValueError, match=r"executor: 'ensemble' is not one of \['chunk', "):
        RolloutSettings(executor="ensemble")
    with pytest.raises(SystemExit) as refused:  # argparse's choices: before the checkpoint is read
        main(["evaluate", "no-such.ckpt", TASK, "--executor", "ensemble"])
    assert refused.value.code == 2


@pytest.mark.parametrize("executor", ["chunk", "temporal_ensemble", "rtc"])
def test_every_executor_runs_inside_rollouts(untrained_sawyer: Path, executor: str) -> None:
    policy = LocalPolicy(load_policy(untrained_sawyer))
    task = make_task(TASK, image_size=SIZE)
    options = {"delay": 1} | ({} if executor == "temporal_ensemble" else {"n_action_steps": 4})
    try:
        settings = RolloutSettings(
            episodes=2,
            seed=1000,
            executor=executor,
            executor_options=options,
            max_steps=12,
            progress=False,
        )
        summary = evaluate(policy, task, settings)
    finally:
        task.close()
    assert [o["seed"] for o in summary["outcomes"]] == [1000, 1001]
    assert all(o["steps"] <= 12 for o in summary["outcomes"]) and summary["env_steps_per_s"] > 0
    low, high = summary["success_rate_wilson95"]
    assert 0.0 <= low <= summary["success_rate"] <= high <= 1.0


def test_the_experts_steps_are_its_own_and_the_summary_names_it() -> None:
    """The expert a summary sets beside the policy is the task's (by name: its default),
    measured and kept apart per expert: reach's corrected one is not MetaWorld's stock one."""
    from polymimic_sim.rollouts.episodes import Outcome, expert_steps_to_success, summarise

    stock = make_task(TASK, image_size=SIZE, expert="stock")
    try:
        stock_steps = expert_steps_to_success(stock, [0, 1], 500)
    finally:
        stock.close()
    default_steps = expert_steps_to_success(TASK, [0, 1], 500)  # made by name: the default
    assert len(stock_steps) == len(default_steps) == 2 and stock_steps != default_steps
    solved = [Outcome(0, True, 40, 1.0, success_step=40)]
    by_name = summarise(TASK, "chunk", solved, 1.0, limit=500, registered_steps=500)
    named = summarise(TASK, "chunk", solved, 1.0, limit=500, registered_steps=500, expert="stock")
    assert (by_name["expert"], named["expert"]) == ("fingertips_to_goal", "stock")


def test_the_cli_writes_the_summary(untrained_sawyer: Path, tmp_path: Path, capsys) -> None:
    options = ["--executor", "rtc", "--n-action-steps", "4", "--delay", "1", "--via-server"]
    code = main(
        [
            "evaluate",
            str(untrained_sawyer),
            TASK,
            "--episodes",
            "1",
            "--out",
            str(tmp_path),
            *options,
        ]
    )
    assert code == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["executor"] == "rtc" and summary["episodes"] == 1 and summary["via_server"]
    assert "95% interval" in capsys.readouterr().out


class GivingUp:
    """A task whose simulator raises on the third step (as dm_control's PhysicsError)."""

    name, max_steps = "fake/unstable", 10

    def reset(self, seed: int) -> dict:
        self.steps = 0
        return {"state": np.zeros(4), "images": {}, "prompt": ""}

    def step(self, action: np.ndarray) -> Step:
        self.steps += 1
        if self.steps == 3:
            raise RuntimeError("unstable accelerations")
        return Step({"state": np.zeros(4), "images": {}, "prompt": ""}, 0.5, False, False, False)


class Zeros:
    def get_server_metadata(self) -> dict:
        return {"chunk_length": 4}

    def infer(self, observation: dict) -> dict:
        return {"actions": np.zeros((4, 4), np.float32)}

    def reset(self) -> None:
        pass


def test_a_simulator_that_gives_up_is_a_failure_not_a_crash() -> None:
    from polymimic_serve import make_executor

    outcome, _ = rollout(GivingUp(), make_executor("chunk", Zeros()), seed=0)  # type: ignore[arg-type]
    assert (outcome.success, outcome.steps, outcome.total_return) == (False, 3, 1.0)
    assert outcome.error == "RuntimeError: unstable accelerations"


def test_a_suite_is_its_tasks_in_order_and_its_summary_pools_them() -> None:
    from polymimic_sim.rollouts.closed_loop import summarise_suite
    from polymimic_sim.rollouts.episodes import Outcome, summarise
    from polymimic_sim.tasks.registry import suite_tasks

    names = suite_tasks("metaworld/mt10")
    assert len(names) == 10 and names[:3] == [
        f"metaworld/{t}-v3" for t in ("reach", "push", "pick-place")
    ]
    assert suite_tasks("metaworld/reach-v3") == ["metaworld/reach-v3"]

    def won(seed: int, steps: int, total: float, strict: bool = True) -> Outcome:
        return Outcome(seed, True, steps, total, success_step=steps, strict_success=strict,
                       strict_success_step=steps if strict else None)  # fmt: skip

    reach = [won(1, 10, 2.0), won(2, 30, 4.0, strict=False)]
    push = [Outcome(1, False, 50, 1.0), won(2, 20, 3.0)]
    parts = {
        name: summarise(name, "chunk", outcomes, seconds, limit=500, registered_steps=500)
        for name, outcomes, seconds in (
            ("metaworld/reach-v3", reach, 1.0),
            ("metaworld/push-v3", push, 3.0),
        )
    }
    for part in parts.values():
        part |= {"workers": 2, "videos": []}
    suite = summarise_suite("metaworld/mt10", parts)
    assert (suite["episodes"], suite["successes"], suite["success_rate"]) == (4, 3, 0.75)
    assert suite["success_rate_per_task"] == {"metaworld/reach-v3": 1.0, "metaworld/push-v3": 0.5}
    assert suite["success_rate_wilson95"] == list(wilson_interval(3, 4))
    assert suite["strict_success"]["successes"] == 2 and suite["strict_success_rate"] == 0.5
    assert suite["strict_success_rate_per_task"] == {
        "metaworld/reach-v3": 0.5,
        "metaworld/push-v3": 0.5,
    }
    assert suite["env_steps_per_s"] == 110 / 4.0 and suite["mean_return"] == 2.5


def test_a_summary_counts_strict_successes_and_successes_within_the_registered_limit() -> None:
    """Episodes run to 400 ticks: one strict success at 280 (standard at 256), one standard
    success at 320 whose strict one never came (the right gripper kept the cube), one
    failure. gym-aloha's 300-tick limit counts only the first; the expert took 290."""
    from polymimic_sim.rollouts.closed_loop import describe
    from polymimic_sim.rollouts.episodes import Outcome, summarise

    outcomes = [
        Outcome(7, True, 280, 9.0, success_step=256, strict_success=True, strict_success_step=280),
        Outcome(8, True, 400, 9.0, success_step=320),
        Outcome(9, False, 400, 1.0),
    ]
    summary = summarise("aloha/transfer_cube", "chunk", outcomes, 2.0, limit=400,
                        registered_steps=300, expert_steps=[290, 290])  # fmt: skip
    assert (summary["successes"], summary["strict_success"]["successes"]) == (2, 1)
    assert summary["strict_success"]["wilson95"] == list(wilson_interval(1, 3))
    assert {n: r["successes"] for n, r in summary["success_at_steps"].items()} == {
        "300": 1,
        "400": 2,
    }
    assert summary["mean_steps_to_success"] == 288
    assert summary["mean_steps_to_strict_success"] == 280
    assert summary["expert_mean_steps_to_success"] == 290
    assert summary["steps_to_success_vs_expert"] == 288 / 290
    assert "2/3 succeeded" in describe(summary) and "strict 1" in describe(summary)
    assert "1 within 300 steps" in describe(summary) and "(the expert 290)" in describe(summary)


def test_rollouts_in_real_time_measure_the_delay_a_slower_model_makes(
    untrained_sawyer: Path,
) -> None:
    trained = load_policy(untrained_sawyer)
    task = make_task(TASK, image_size=SIZE)

    class AtLeast30ms(LocalPolicy):  # a floor, so that a fast machine measures delays too
        def infer(self, observation: Mapping[str, Any]) -> dict[str, Any]:
            time.sleep(0.03)
            return super().infer(observation)

    def run(slowdown: float) -> dict:
        settings = RolloutSettings(
            episodes=2,
            seed=1000,
            executor="rtc",
            executor_options={"n_action_steps": 2},
            max_steps=60,
            progress=False,
            realtime=True,
            inference_slowdown=slowdown,
        )
        return evaluate(AtLeast30ms(trained), task, settings)

    try:
        fast, slow = run(1.0), run(4.0)
        with pytest.raises(ValueError, match="in real time the delay is measured"):
            RolloutSettings(episodes=1, executor_options={"delay": 2}, realtime=True)
    finally:
        task.close()
    for summary in (fast, slow):
        report = summary["realtime_report"]
        assert summary["realtime"] and report["ticks"] == summary["env_steps"] == 120
        assert report["chunks"] >= 1 and report["latency_ms_p50"] > 0
    assert fast["realtime_report"]["chunks"] >= 2 and fast["mean_boundary_jerk"] is not None
    # a model 4x slower is answered more ticks later; the loop went on meanwhile
    assert slow["realtime_report"]["delay_p50"] > fast["realtime_report"]["delay_p50"]
    assert slow["realtime_report"]["stale_ticks"] > fast["realtime_report"]["stale_ticks"]
    assert slow["realtime_report"]["chunks"] < fast["realtime_report"]["chunks"]


def test_the_jerk_at_chunk_boundaries_is_the_third_difference_across_them() -> None:
    from polymimic_sim.rollouts.episodes import boundary_jerk

    smooth = np.arange(20, dtype=float)[:, None] ** 2  # constant second difference: no jerk
    assert boundary_jerk(smooth, [10]) == 0.0
    jumped = smooth.copy()
    jumped[10:] += 1.0  # a new chunk starts one unit off at tick 10
    # the differences ending at 10, 11, 12 see the step: |1|, |-3 + 1|... = 1, 2, 1 -> 4/3
    assert boundary_jerk(jumped, [10]) == pytest.approx(4 / 3)
    assert boundary_jerk(jumped, []) is None


class Staged:
    """A task with ALOHA-style staged rewards: each seed climbs to stage `seed` then drops back."""

    name, max_steps = "fake/staged", 6

    def reset(self, seed: int) -> dict:
        self.stage, self.steps = seed, 0
        return {"state": np.zeros(4), "images": {}, "prompt": ""}

    def step(self, action: np.ndarray) -> Step:
        self.steps += 1
        reward = float(min(self.steps, self.stage)) if self.steps < 5 else 0.0
        observation = {"state": np.zeros(4), "images": {}, "prompt": ""}
        return Step(observation, reward, False, False, False)


def test_a_summary_says_how_many_episodes_stopped_at_each_stage() -> None:
    """The furthest stage is the highest reward of any tick, not the last one; an episode
    that ended before its first reward stopped at 0; MetaWorld's shaped rewards (10.0 at
    success) have no stages, even when every episode succeeded."""
    from polymimic_serve import make_executor
    from polymimic_sim.rollouts.closed_loop import describe
    from polymimic_sim.rollouts.episodes import Outcome, summarise

    outcomes = [rollout(Staged(), make_executor("chunk", Zeros()), seed=s)[0]  # type: ignore[arg-type]
                for s in (2, 3, 2, 0)]  # fmt: skip
    assert [o.max_reward for o in outcomes] == [2.0, 3.0, 2.0, 0.0]
    assert [o.total_return for o in outcomes][:2] == [1 + 2 + 2 + 2, 1 + 2 + 3 + 3]
    crashed = Outcome(9, False, 1, 0.0, error="PhysicsError")  # no tick completed
    summary = summarise("aloha/insertion", "chunk", [*outcomes, crashed], 1.0, limit=6,
                        registered_steps=6)  # fmt: skip
    assert summary["stages_reached"] == {"0": 2, "2": 2, "3": 1}
    assert "furthest stage 0: 2, 2: 2, 3: 1" in describe(summary)
    solved = [Outcome(s, True, 60, 300.0, success_step=60, max_reward=10.0) for s in range(3)]
    summary = summarise("metaworld/reach-v3", "chunk", solved, 1.0, limit=500,
                        registered_steps=500)  # fmt: skip
    assert summary["stages_reached"] is None and "stage" not in describe(summary)
