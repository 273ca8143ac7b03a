"""Scripted demonstrations recorded as real episodes, and replayed open-loop."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_sim import (
    RolloutSettings,
    distances_to_goal,
    evaluate,
    make_task,
    record,
    run_expert,
)
from polymimic_sim.recording import LINGER
from polymimic_sim.tasks.registry import FAMILIES, default_cameras

TASK, SIZE = "metaworld/reach-v3", (48, 64)


def test_recorded_episodes_validate_and_declare_what_they_are(reach_episodes: Path) -> None:
    script = Path(sys.executable).with_name("polymimic-data")
    result = subprocess.run(
        [str(script), "validate", str(reach_episodes)], capture_output=True, text=True
    )
    assert result.returncode == 0 and "ok: 2 episodes" in result.stdout, (
        result.stdout + result.stderr
    )
    episodes = resolve_episodes(reach_episodes)  # registers the declared embodiment
    assert [e.embodiment for e in episodes] == ["sim/metaworld_sawyer"] * 2
    attrs = EpisodeReader(episodes[0].path).attrs
    assert attrs["seed"] == 0 and attrs["fps"] == 80.0 and attrs["task_name"] == "reach"
    assert attrs["total_frames"] == attrs["strict_success_step"] + LINGER + 1


class ReplayPolicy:
    """Answers each request with the recorded actions from that tick on: open-loop replay."""

    def __init__(self, actions: np.ndarray, horizon: int = 20) -> None:
        self.actions, self.horizon, self.tick = actions, horizon, 0

    def get_server_metadata(self) -> dict[str, Any]:
        return {"chunk_length": self.horizon, "can_inpaint": False}

    def infer(self, observation: dict) -> dict:
        rows = np.arange(self.tick, self.tick + self.horizon).clip(max=len(self.actions) - 1)
        self.tick += self.horizon
        return {"actions": self.actions[rows]}

    def reset(self) -> None:
        self.tick = 0


class HoldPolicy(ReplayPolicy):
    """Holds the hand where it is: never reaches."""

    def infer(self, observation: dict) -> dict:
        return {"actions": np.repeat(observation["state"][None], self.horizon, axis=0)}


def test_replaying_a_demonstration_succeeds_and_holding_still_fails(reach_episodes: Path) -> None:
    (first, _) = resolve_episodes(reach_episodes)
    actions = EpisodeReader(first.path).read_numeric("action")
    task = make_task(TASK, image_size=SIZE)
    try:
        once = RolloutSettings(
            episodes=1, seed=0, executor_options={"n_action_steps": 20}, progress=False
        )
        replayed = evaluate(ReplayPolicy(actions), task, once)
        held = evaluate(HoldPolicy(actions), task, dataclasses.replace(once, max_steps=100))
    finally:
        task.close()
    assert replayed["successes"] == 1 and replayed["outcomes"][0]["steps"] <= len(actions)
    assert held["successes"] == 0 and held["outcomes"][0]["steps"] == 100


def test_recording_again_keeps_what_is_there(reach_episodes: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in reach_episodes.iterdir()}
    report = record(TASK, reach_episodes, episodes=2, image_size=SIZE, progress=False)
    assert len(report.kept) == 2 and report.written == []
    assert {p.name: p.stat().st_mtime_ns for p in reach_episodes.iterdir()} == before
    again = record(TASK, reach_episodes, episodes=2, image_size=SIZE, cameras=["corner2"],
                   progress=False)  # fmt: skip
    assert len(again.kept) == 2  # the cameras asked for are those they hold
    with pytest.raises(ValueError, match=r"seed000000.zarr: recorded with cameras \['corner2'\], "
                       r"not \['corner4_fov40'\]; .* record into another folder"):  # fmt: skip
        record(TASK, reach_episodes, episodes=3, image_size=SIZE, cameras=["corner4_fov40"],
               progress=False)  # fmt: skip
    assert {p.name: p.stat().st_mtime_ns for p in reach_episodes.iterdir()} == before


def test_a_narrowed_recording_resumed_without_its_cameras_is_refused(
    tmp_path: Path, reach_episodes: Path
) -> None:
    # In this process the task's embodiment is registered as declared with corner2 first: a
    # view is not part of what the robot is, so recording it through another is no conflict.
    (embodiment,) = {e.embodiment for e in resolve_episodes(reach_episodes)}
    narrowed = ["corner4_fov40"]
    record(TASK, tmp_path, episodes=1, image_size=SIZE, cameras=narrowed, progress=False)
    assert {e.embodiment for e in resolve_episodes(tmp_path)} == {embodiment}  # the same one
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"recorded with cameras \['corner4_fov40'\], not "
                       r"\['corner2'\] \(the task's default: name its cameras"):  # fmt: skip
        record(TASK, tmp_path, episodes=2, image_size=SIZE, progress=False)
    with pytest.raises(ValueError, match=r"not \['corner2'\] \(the task's default"):
        record(TASK, tmp_path, episodes=2, image_size=SIZE, cameras=[], progress=False)
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before  # none added
    again = record(TASK, tmp_path, episodes=1, image_size=SIZE, cameras=narrowed, progress=False)
    assert len(again.kept) == 1


@pytest.mark.parametrize("family", FAMILIES)
def test_a_tasks_default_cameras_are_those_it_renders_unasked(family: str) -> None:
    name = "metaworld/reach-v3" if family == "metaworld" else f"{family}/transfer_cube"
    task = make_task(name, image_size=SIZE)
    try:
        assert tuple(task.reset(0)["images"]) == default_cameras(name)  # the frames drawn
    finally:
        task.close()
    if family == "metaworld":
        assert default_cameras("metaworld/mt10") == default_cameras(name)  # a suite's: its tasks'
    assert default_cameras("pybullet/reach") is None


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("pybullet/reach", "not one of this package's simulators; use metaworld/<task>"),
        ("metaworld/mt10", "is a suite of 10 tasks: make each of suite_tasks"),
        ("metaworld/fly-v3", "MetaWorld has no such task with a scripted expert"),
        ("metaworld", "not one of this package's simulators"),
    ],
)
def test_a_bad_task_name_is_named(name: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make_task(name)


def test_a_missing_extra_names_it(monkeypatch) -> None:
    from polymimic_sim import MissingExtraError
    from polymimic_sim.cli import main

    monkeypatch.setitem(sys.modules, "metaworld", None)  # as if not installed
    with pytest.raises(MissingExtraError, match=r"install polymimic-sim\[metaworld\]"):
        make_task(TASK)
    assert main(["record", TASK, "/tmp/never-written"]) == 2
    assert not Path("/tmp/never-written").exists()


def test_rendering_keeps_the_users_backend_and_names_the_packages_when_none_works(
    monkeypatch,
) -> None:
    from polymimic_sim.tasks import rendering

    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert rendering.ensure_headless_rendering() == "osmesa"
    monkeypatch.delenv("MUJOCO_GL")
    monkeypatch.setattr(rendering, "_works", lambda backend: (False, f"{backend} failed"))
    with pytest.raises(
        rendering.RenderingError,
        match=r"egl: egl failed; osmesa: osmesa failed.*apt-get install libegl1",
    ):
        rendering.ensure_headless_rendering()


def test_recording_in_worker_processes_writes_what_one_process_writes(
    reach_episodes: Path, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An episode depends on its seed alone: two processes write the same episodes, every
    array and frame alike; one already there is kept, and the report is in seed order
    however the workers finished. The workers close their tasks cleanly at exit."""
    shutil.copytree(reach_episodes / "metaworld_reach-v3_seed000001.zarr",
                    tmp_path / "metaworld_reach-v3_seed000001.zarr")  # fmt: skip
    report = record(TASK, tmp_path, episodes=4, image_size=SIZE, progress=False, workers=2)
    assert list(report.succeeded) == [(TASK, seed) for seed in range(4)]
    assert [p.name[-11:-5] for p in report.written] == ["000000", "000002", "000003"]
    assert [p.name[-11:-5] for p in report.kept] == ["000001"]
    assert report.success_rate == 1.0
    assert "Exception ignored" not in capfd.readouterr().err
    for path in sorted(reach_episodes.iterdir()):  # seeds 0 and 1, made in this process
        ours, theirs = EpisodeReader(tmp_path / path.name), EpisodeReader(path)
        assert ours.attrs == theirs.attrs
        names = theirs.keys()
        numeric = [k for k in names if not k.startswith("images.") and k != "annotations"]
        assert numeric and ours.keys() == names
        for key in numeric:
            assert np.array_equal(ours.read_numeric(key), theirs.read_numeric(key)), key
        assert ours.read_jpeg("corner2", 7) == theirs.read_jpeg("corner2", 7)


@pytest.mark.parametrize(
    ("name", "within", "stock_beyond"), [("reach-v3", 0.035, 0.042), ("pick-place-v3", 0.03, 0.035)]
)
def test_the_expert_brings_what_success_judges_to_the_goal_not_the_hand(
    name: str, within: float, stock_beyond: float
) -> None:
    """MetaWorld's expert steers the hand to the goal, while reach judges the fingertips'
    middle, 4.5 cm below the hand, within 5 cm (pick-place the puck they hold, within 7):
    uncorrected, a demonstration ends 4.5-4.9 cm off reach's goal, a few millimetres inside.
    The corrected expert ends well inside, with the hand above the goal, where a recording
    stops; its episodes say which expert recorded them."""
    task = make_task(f"metaworld/{name}", image_size=SIZE)
    stock = make_task(f"metaworld/{name}", image_size=SIZE, expert="stock")
    try:
        assert (task.expert_variant, stock.expert_variant) == ("fingertips_to_goal", "stock")
        for seed in (0, 1):
            ends = []
            for expert in (task, stock):  # each left `LINGER` ticks past its success
                assert run_expert(expert, seed).success_at is not None, (expert.name, seed)
                ends.append(distances_to_goal(expert))
            (judged, hand), (stock_judged, stock_hand) = ((e["judged"], e["hand"]) for e in ends)
            assert judged < within < stock_beyond < stock_judged, (seed, judged, stock_judged)
            assert hand > stock_hand, (seed, hand, stock_hand)
            for end in ends:  # the offset along each axis makes up the distance
                along = [end[f"judged_{axis}"] for axis in "xyz"]
                assert np.isclose(np.linalg.norm(along), end["judged"]), (seed, end)
            below = ends[1]["judged_z"]  # stock: the hand at the goal, what is judged under it
            assert below < -0.03, (seed, ends[1])
    finally:
        task.close()
        stock.close()


def test_the_expert_asked_for_records_each_episode_and_is_named_in_it(
    reach_episodes: Path, tmp_path: Path
) -> None:
    """In this process, in worker processes and from the command line: each episode names the
    expert that ran, and MetaWorld's stock one moves otherwise than the corrected default."""
    from polymimic_sim.cli import main

    record(TASK, tmp_path / "here", episodes=1, image_size=SIZE, progress=False, expert="stock")
    record(TASK, tmp_path / "workers", episodes=2, image_size=SIZE, progress=False,
           expert="stock", workers=2)  # fmt: skip
    argv = ["record", TASK, str(tmp_path / "cli"), "--episodes", "1", "--image-size", "48x64"]
    assert main([*argv, "--expert", "stock"]) == 0
    for folder in ("here", "workers", "cli"):
        episodes = sorted((tmp_path / folder).iterdir())
        assert episodes and {EpisodeReader(p).attrs["expert"] for p in episodes} == {"stock"}
    (first, _) = sorted(reach_episodes.iterdir())  # seed 0, the corrected expert's
    stock = EpisodeReader(tmp_path / "here" / first.name).read_numeric("action")
    corrected = EpisodeReader(first).read_numeric("action")
    assert len(stock) != len(corrected) or not np.allclose(stock, corrected)


@pytest.mark.parametrize(
    ("name", "expert", "message"),
    [
        ("metaworld/push-v3", "fingertips_to_goal", r"'stock' \(MetaWorld's policy as written\) "
         r"or, for \['pick-place-v3', 'reach-v3'\], 'fingertips_to_goal'"),
        ("metaworld/reach-v3", "fingertips", "expert 'fingertips' for metaworld/reach-v3"),
        ("aloha/transfer_cube", "fingertips_to_goal", "its one expert is 'stock'"),
    ],
)  # fmt: skip
def test_an_expert_a_task_does_not_have_is_refused_before_any_work(
    name: str, expert: str, message: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=message):
        make_task(name, expert=expert)
    with pytest.raises(ValueError, match=message):
        record(name, tmp_path / "demos", episodes=1, expert=expert, progress=False)
    assert not (tmp_path / "demos").exists()


def test_a_recording_resumed_over_another_experts_episodes_is_refused(
    reach_episodes: Path, tmp_path: Path
) -> None:
    """An episode recorded before reach's expert was corrected names no expert (the stock
    one): resuming into its folder would train on a mix, and is refused before any work."""
    import zarr

    (first, _) = sorted(reach_episodes.iterdir())
    assert EpisodeReader(first).attrs["expert"] == "fingertips_to_goal"
    old = tmp_path / first.name
    shutil.copytree(first, old)
    group = zarr.open_group(old, mode="r+")
    attrs = dict(group.attrs)
    del attrs["expert"]  # as recorded before the attribute existed
    group.attrs.clear()
    group.attrs.update(attrs)
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    with pytest.raises(ValueError, match=r"seed000000.zarr: recorded by the 'stock' expert of "
                       r"metaworld/reach-v3, which records with the 'fingertips_to_goal' one "
                       r"now \(ask for 'stock' to resume them: --expert stock\); .* record "
                       r"into another folder"):  # fmt: skip
        record(TASK, tmp_path, episodes=2, image_size=SIZE, progress=False)
    with pytest.raises(ValueError, match=r"seed000000.zarr: recorded by the 'stock' expert"):
        record(TASK, tmp_path, episodes=1, seed=5, image_size=SIZE, progress=False)  # other seeds
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
    kept = record(TASK, tmp_path, episodes=1, image_size=SIZE, progress=False, expert="stock")
    assert kept.kept == [old] and kept.written == []  # resumed with the expert it holds


def test_recording_refuses_no_workers(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workers: a positive number, got 0"):
        record(TASK, tmp_path, episodes=1, workers=0)


def test_a_placement_the_task_refuses_is_drawn_again_and_one_it_accepts_is_kept() -> None:
    """Push's goal must start 15 cm from its object: seed 12's first draw is nearer, and with
    the placement given MetaWorld would draw it again forever (a recording hung there). The
    seed draws again; seed 11's first draw stands, so what seeds gave before still holds."""
    import signal

    def hung(*_: Any) -> None:
        raise TimeoutError("reset did not return")

    task = make_task("metaworld/push-v3", image_size=SIZE)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        space = task.sim._random_reset_space  # type: ignore[attr-defined]
        for seed, refused in ((11, False), (12, True)):
            first = np.random.default_rng(seed).uniform(space.low, space.high)
            assert (np.linalg.norm(first[:2] - first[3:5]) < 0.15) == refused
            task.reset(seed)
            placement = task.sim._last_rand_vec  # type: ignore[attr-defined]
            assert np.array_equal(placement, first) != refused
            assert np.linalg.norm(placement[:2] - placement[3:5]) >= 0.15
            assert task.sim.reset_model.__func__ is type(task.sim).reset_model  # type: ignore[attr-defined]
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        task.close()
