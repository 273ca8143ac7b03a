"""ALOHA's transfer-cube and insertion: the scripted expert, its episodes, their replay."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_sim import RolloutSettings, evaluate, make_task, record
from polymimic_sim.recording import LINGER
from polymimic_sim.tasks import aloha_tasks

SIZE = (48, 64)


@pytest.fixture(scope="module")
def cube_episodes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("aloha") / "transfer_cube"
    report = record("aloha/transfer_cube", dest, episodes=1, seed=3, image_size=SIZE,
                    progress=False)  # fmt: skip
    assert report.success_rate == 1.0 and len(report.written) == 1
    return dest


def test_a_recorded_transfer_validates_and_declares_the_two_arms(cube_episodes: Path) -> None:
    script = Path(sys.executable).with_name("polymimic-data")
    result = subprocess.run(
        [str(script), "validate", str(cube_episodes)], capture_output=True, text=True
    )
    assert result.returncode == 0 and "ok: 1 episodes" in result.stdout, (
        result.stdout + result.stderr
    )
    (episode,) = resolve_episodes(cube_episodes)
    assert episode.embodiment == "sim/aloha"
    reader = EpisodeReader(episode.path)
    attrs = reader.attrs
    assert (
        attrs["seed"] == 3 and attrs["fps"] == 50.0 and attrs["sim_task"] == "aloha/transfer_cube"
    )
    assert attrs["total_frames"] == attrs["strict_success_step"] + LINGER + 1
    assert reader.read_numeric("action").shape == (attrs["total_frames"], 14)
    assert reader.read_numeric("observation.state").shape == (attrs["total_frames"], 14)


class Replay:
    """The recorded actions from the request's tick on, ignoring what it sees: open loop."""

    def __init__(self, actions: np.ndarray, horizon: int = 50) -> None:
        self.actions, self.horizon, self.tick = actions, horizon, 0

    def get_server_metadata(self) -> dict:
        return {"chunk_length": self.horizon, "can_inpaint": False}

    def infer(self, observation: dict) -> dict:
        rows = np.arange(self.tick, self.tick + self.horizon).clip(max=len(self.actions) - 1)
        self.tick += self.horizon
        return {"actions": self.actions[rows]}

    def reset(self) -> None:
        self.tick = 0


class Zeros(Replay):
    """Every joint to zero, the grippers closed: never touches the cube."""

    def infer(self, observation: dict) -> dict:
        return {"actions": np.zeros((self.horizon, 14), np.float32)}


def test_replaying_the_recorded_actions_succeeds_and_zero_actions_fail(cube_episodes: Path) -> None:
    (episode,) = resolve_episodes(cube_episodes)
    actions = EpisodeReader(episode.path).read_numeric("action")
    task = make_task("aloha/transfer_cube", image_size=SIZE)
    try:
        once = RolloutSettings(episodes=1, seed=3, executor_options={"n_action_steps": 50},
                               progress=False)  # fmt: skip
        replayed = evaluate(Replay(actions), task, once)
        zeros = evaluate(Zeros(actions), task, dataclasses.replace(once, max_steps=60))
        # the same actions meet another cube from another seed: no longer a transfer
        elsewhere = evaluate(Replay(actions), task, dataclasses.replace(once, seed=11))
    finally:
        task.close()
    assert replayed["successes"] == 1 and replayed["outcomes"][0]["steps"] <= len(actions)
    assert zeros["successes"] == 0 and zeros["outcomes"][0]["steps"] == 60
    assert elsewhere["successes"] == 0


def test_a_seed_places_the_cube_as_gym_aloha_does() -> None:
    from gym_aloha.utils import sample_box_pose

    task = make_task("aloha/transfer_cube", image_size=SIZE)
    try:
        for seed in (0, 7):
            task.reset(seed)
            cube = task.env.physics.data.qpos[16:23]  # type: ignore[attr-defined]
            assert np.allclose(cube, sample_box_pose(seed))
    finally:
        task.close()


def _gripper_tilt_degrees(torque_scale: float | None, monkeypatch: pytest.MonkeyPatch) -> float:
    """How far the left gripper's orientation strays from its mocap target after 50 steps."""
    if torque_scale is not None:
        monkeypatch.setattr(aloha_tasks, "WELD_TORQUE_SCALE", torque_scale)
    env = aloha_tasks.environment(
        "transfer_cube", True, [aloha_tasks.object_poses("transfer_cube", 0)]
    )
    env.reset()
    physics = env.physics
    hold = np.concatenate([physics.data.mocap_pos[0], physics.data.mocap_quat[0], [1],
                           physics.data.mocap_pos[1], physics.data.mocap_quat[1], [1]])  # fmt: skip
    for _ in range(50):
        env.step(hold)
    target = physics.data.mocap_quat[0]
    actual = physics.named.data.xquat["vx300s_left/gripper_link"]
    return float(np.degrees(2 * np.arccos(min(1.0, abs(float(np.dot(target, actual)))))))


def test_the_weld_torque_scale_keeps_the_grippers_oriented(monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = _gripper_tilt_degrees(None, monkeypatch)
    xml_default = _gripper_tilt_degrees(1.0, monkeypatch)  # MuJoCo 3's weld as the XML has it
    assert fixed < 2.0 < 5.0 < xml_default, (fixed, xml_default)


def test_the_scripted_insertion_succeeds_and_is_seeded() -> None:
    first, best = aloha_tasks.scripted_joint_trajectory("insertion", 0)
    again, _ = aloha_tasks.scripted_joint_trajectory("insertion", 0)
    other, _ = aloha_tasks.scripted_joint_trajectory("insertion", 1)
    assert best == 4.0 and first.shape == (aloha_tasks.MAX_STEPS, 14)
    assert np.array_equal(first, again) and not np.allclose(first, other)


def test_a_missing_aloha_extra_names_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from polymimic_sim import MissingExtraError

    monkeypatch.setitem(sys.modules, "gym_aloha", None)
    monkeypatch.setitem(sys.modules, "gym_aloha.constants", None)
    with pytest.raises(MissingExtraError, match=r"install polymimic-sim\[aloha\]"):
        make_task("aloha/transfer_cube")
    with pytest.raises(ValueError, match="gym-aloha has no such task; choose one of"):
        make_task("aloha/fold_towel")


def _expert_episode(task_name: str, seed: int, alter=None) -> dict:
    """The scripted expert's episode as a rollout counts it; `alter(action, tally)` changes
    each action first (from the standard success on, say)."""
    from polymimic_sim.rollouts.episodes import EpisodeTally

    task = make_task(task_name, image_size=SIZE)
    try:
        task.reset(seed)
        tally, outcome = EpisodeTally(seed, task.max_steps), None
        while outcome is None:
            action = task.expert_action()
            outcome = tally.add(task.step(alter(action, tally) if alter else action))
    finally:
        task.close()
    return dataclasses.asdict(outcome)


def _cube_dropped_after_the_touch(action: np.ndarray, tally) -> np.ndarray:
    if tally.success_step is None:
        return action
    action = action.copy()
    action[[9, 19]] = 1.0  # aloha_ee: per arm xyz, rot6d, opening: both grippers open
    return action


def _peg_pulled_out_after_the_pin(action: np.ndarray, tally) -> np.ndarray:
    if tally.success_step is None:
        return action
    action = action.copy()
    action[10] += 0.1  # the right gripper (the peg's) 10 cm to the right in the top camera
    return action


@pytest.mark.parametrize(
    ("task_name", "alter"),
    [("aloha_ee/transfer_cube", _cube_dropped_after_the_touch),
     ("aloha_ee/insertion", _peg_pulled_out_after_the_pin)],
)  # fmt: skip
def test_strict_success_needs_the_task_finished_and_held_where_the_standard_does_not(
    task_name: str, alter
) -> None:
    """The expert succeeds both ways, the strict success 0.5 s (25 ticks) after the standard
    one; a cube that the left gripper touches in the air and then drops, or a peg that
    touches the pin and is pulled out, is a standard success (gym-aloha's counts the first
    touch) and not a strict one."""
    expert = _expert_episode(task_name, 1000)
    assert expert["success"] and expert["strict_success"], expert
    assert expert["strict_success_step"] == expert["success_step"] + 24
    assert expert["steps"] == expert["strict_success_step"]  # the episode ends there
    loose = _expert_episode(task_name, 1000, alter)
    assert loose["success"] and not loose["strict_success"], loose
    assert loose["strict_success_step"] is None and loose["steps"] == aloha_tasks.MAX_STEPS
