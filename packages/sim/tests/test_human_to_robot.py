"""The human-to-robot pair: ALOHA driven by end-effector poses, and a person's hands doing
the same task, each recorded as episodes the loader reads in its declared layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from polymimic_data import EpisodeDataset, EpisodeReader, resolve_episodes
from polymimic_data.geometry import express_in
from polymimic_sim import UnknownTaskError, make_task, record, task_embodiment

SIZE = (48, 64)


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """One episode of each: the robot (aloha_ee) and the hands, from seed 0."""
    root = tmp_path_factory.mktemp("h2r")
    out = {}
    for family in ("aloha_ee", "hands"):
        report = record(f"{family}/transfer_cube", root / family, episodes=1, image_size=SIZE,
                        progress=False)  # fmt: skip
        assert report.success_rate == 1.0, family  # the expert does the task either way
        out[family] = root / family
    return out


def _validate(folder: Path) -> None:
    script = Path(sys.executable).with_name("polymimic-data")
    result = subprocess.run([str(script), "validate", str(folder)], capture_output=True, text=True)
    assert result.returncode == 0 and "ok: 1 episodes" in result.stdout, (
        result.stdout + result.stderr
    )


def _sample_in_view(dataset: EpisodeDataset, seen: np.ndarray) -> tuple[int, dict]:
    """The first sample (its frame, itself) whose frames and next two see both hands (a
    sample that meets the not-detected sentinel is replaced by another)."""
    index = next(
        i
        for i in range(len(dataset))
        if seen[dataset.locate(i)[1] : dataset.locate(i)[1] + 3].all()
    )
    return dataset.locate(index)[1], dataset[index]


def test_the_robot_episode_holds_eva_keys_and_loads_as_the_task_speaks(recorded) -> None:
    _validate(recorded["aloha_ee"])
    (episode,) = resolve_episodes(recorded["aloha_ee"])
    assert episode.embodiment == "sim/aloha_ee" == task_embodiment("aloha_ee/transfer_cube")
    reader = EpisodeReader(episode.path)
    keys = set(reader.keys())
    assert {"left.obs_ee_pose", "right.cmd_ee_pose", "left.cmd_gripper", "images.top"} <= keys
    assert reader.attrs["fps"] == 50.0
    dataset = EpisodeDataset([episode], embodiment="sim/aloha_ee", cameras=("top",), history=1,
                             horizon=4, image_size=SIZE)  # fmt: skip
    sample = dataset[0]
    task = make_task("aloha_ee/transfer_cube", image_size=SIZE)
    try:
        first = task.reset(0)
        expert = task.expert_action()
    finally:
        task.close()
    # the loader converts the stored quaternions to the rot6d vectors the task takes
    assert np.allclose(np.asarray(sample["state"])[0], first["state"], atol=1e-5)
    assert np.allclose(np.asarray(sample["actions"])[0], expert, atol=1e-5)


def test_an_action_goes_to_the_world_and_back() -> None:
    task = make_task("aloha_ee/transfer_cube", image_size=SIZE)
    try:
        task.reset(3)
        action = task.expert_action()
        assert action.shape == (20,)
        world = task.to_world(action)  # type: ignore[attr-defined]
        assert np.allclose(task.to_action(world), action, atol=1e-6)  # type: ignore[attr-defined]
        with pytest.raises(ValueError, match=r"\(20,\) finite"):
            task.step(np.full(20, np.nan))
        wild = action.copy()
        wild[:3] += 5.0  # five metres away, in the camera's frame: a controller's limits hold
        before = task.gripper_poses()[0, :3]  # type: ignore[attr-defined]
        for _ in range(5):
            task.step(wild)  # no PhysicsError
        moved = np.linalg.norm(task.gripper_poses()[0, :3] - before)  # type: ignore[attr-defined]
        assert 0.01 < moved < 5 * 0.03 + 0.02
    finally:
        task.close()


def test_aloha_ego_sees_from_the_persons_viewpoint_and_gives_poses_in_its_frame(
    tmp_path: Path,
) -> None:
    """eva's view: aloha_ego carries `front_1` on its head, at the hands' egocentric
    viewpoint (fixed, the arms drawn), its poses in that camera's frame."""
    from polymimic_sim.tasks.camera_frames import place_camera, world_to_camera

    report = record("aloha_ego/transfer_cube", tmp_path, episodes=1, image_size=SIZE,
                    progress=False)  # fmt: skip
    assert report.success_rate == 1.0  # the expert does the task through the head's frame
    _validate(tmp_path)
    (episode,) = resolve_episodes(tmp_path)
    assert episode.embodiment == "sim/aloha_ego" == task_embodiment("aloha_ego/transfer_cube")
    keys = set(EpisodeReader(episode.path).keys())
    assert "images.front_1" in keys and "images.top" not in keys and "left.cmd_ee_pose" in keys
    robot = make_task("aloha_ego/transfer_cube", image_size=SIZE)
    hands = make_task("hands/transfer_cube", image_size=SIZE)
    try:
        first = robot.reset(0)
        hands.reset(0)
        head = robot.head  # type: ignore[attr-defined]
        assert np.linalg.norm(head[:3] - hands.head[:3]) < 0.05  # type: ignore[attr-defined]
        in_head = world_to_camera(head, robot.gripper_poses())  # type: ignore[attr-defined]
        assert np.allclose(first["state"][:3], in_head[0, :3], atol=1e-5)
        assert np.allclose(first["state"][10:13], in_head[1, :3], atol=1e-5)
        loaded = EpisodeDataset([episode], embodiment="sim/aloha_ego", cameras=("front_1",),
                                history=1, horizon=4, image_size=SIZE)[0]  # fmt: skip
        assert np.allclose(np.asarray(loaded["state"])[0], first["state"], atol=1e-5)
        # the frame is the `angle` camera placed at the head, the arms drawn (not the hands')
        model, data = robot.env.physics.model.ptr, robot.env.physics.data.ptr  # type: ignore[attr-defined]
        place_camera(model, data, model.camera("angle").id, head)
        robot.renderer.update_scene(data, camera="angle")  # type: ignore[attr-defined]
        assert np.array_equal(robot.render()["front_1"], robot.renderer.render())  # type: ignore[attr-defined]
        assert np.abs(first["images"]["front_1"].astype(int) - hands.render()["front_1"]).mean() > 1
    finally:
        robot.close()
        hands.close()
    with pytest.raises(ValueError, match=r"'front_1' is the model's 'angle' camera moved"):
        make_task("aloha_ego/transfer_cube", image_size=SIZE, cameras=["front_1", "angle"])
    for task in ("aloha_ee/transfer_cube", "aloha/transfer_cube"):
        with pytest.raises(
            ValueError, match=r"the robots that carry it are aloha_ego/transfer_cube"
        ):
            make_task(task, image_size=SIZE, cameras=["front_1"])


def test_aloha_ego_masked_draws_the_robot_as_the_hands_are_drawn() -> None:
    """EgoMimic's arm masking in the sim: from the same viewpoint and state, the masked robot's
    frame is the hands' frame (arms not drawn, grippers skin-coloured), the unmasked one's is
    not; it is its own embodiment, and the objects start where the hands' do."""
    from polymimic_sim import object_poses

    masked = make_task("aloha_ego_masked/transfer_cube", image_size=SIZE)
    drawn = make_task("aloha_ego/transfer_cube", image_size=SIZE)
    hands = make_task("hands/transfer_cube", image_size=SIZE)
    try:
        seen = masked.reset(3)["images"]["front_1"].astype(int)
        arms = drawn.reset(3)["images"]["front_1"].astype(int)
        hands.reset(3)
        hands.head = masked.head  # type: ignore[attr-defined]  # the head held still
        person = hands.render()["front_1"].astype(int)
        assert np.abs(seen - person).mean() < 0.5  # one picture
        assert np.abs(arms - person).mean() > 3  # the arms drawn: not the hands' picture
    finally:
        for task in (masked, drawn, hands):
            task.close()
    assert task_embodiment("aloha_ego_masked/transfer_cube") == "sim/aloha_ego_masked"
    assert masked.declaration()["name"] == "sim/aloha_ego_masked"  # type: ignore[attr-defined]
    cube = object_poses("hands/transfer_cube", 3)
    assert cube.shape == (1, 7) and np.array_equal(cube, object_poses("aloha_ee/transfer_cube", 3))
    assert object_poses("aloha/insertion", 3).shape == (2, 7)  # the peg, then the socket
    with pytest.raises(UnknownTaskError, match=r"object poses are known for ALOHA's tasks"):
        object_poses("metaworld/reach-v3", 3)


def test_aloha_joints_ego_masked_sees_as_the_masked_robot_and_acts_by_its_joints(
    tmp_path: Path,
) -> None:
    """The joint-driven robot of the action-space experiment: its frame at a reset is the
    end-effector masked robot's (same head camera, same masking, same start), while its state,
    actions and declaration are `aloha`'s 14 joints; its expert's episode does the task and
    validates as its own embodiment."""
    joints = make_task("aloha_joints_ego_masked/transfer_cube", image_size=SIZE)
    masked = make_task("aloha_ego_masked/transfer_cube", image_size=SIZE)
    drawn = make_task("aloha_ego/transfer_cube", image_size=SIZE)
    try:
        first = joints.reset(3)
        seen = first["images"]["front_1"].astype(int)
        assert np.abs(seen - masked.reset(3)["images"]["front_1"].astype(int)).mean() < 0.5
        arms = drawn.reset(3)["images"]["front_1"].astype(int)  # one viewpoint, arms drawn
        assert np.abs(seen - arms).mean() > 3  # so the joint robot's arms are masked
        assert first["state"].shape == (14,)
        declared = joints.declaration()  # type: ignore[attr-defined]
        assert declared["name"] == "sim/aloha_joints_ego_masked"
        assert declared["cameras"] == ["front_1"] and declared["actions"] == ["action"]
        assert [g["kind"] for g in declared["groups"]] == ["joint", "gripper"] * 2
        step = joints.step(first["state"])  # a joint target, as aloha/<task> takes
        assert step.observation["state"].shape == (14,)
        with pytest.raises(ValueError, match=r"an action is \(14,\)"):
            joints.step(np.zeros(20))
    finally:
        for task in (joints, masked, drawn):
            task.close()
    name = "aloha_joints_ego_masked/transfer_cube"
    assert task_embodiment(name) == "sim/aloha_joints_ego_masked"
    report = record(name, tmp_path / "joints", episodes=1, image_size=SIZE, progress=False)
    assert report.success_rate == 1.0  # the joint replay of the expert does the task
    _validate(tmp_path / "joints")
    (episode,) = resolve_episodes(tmp_path / "joints")
    assert episode.embodiment == "sim/aloha_joints_ego_masked"
    assert {"observation.state", "action", "images.front_1"} <= set(
        EpisodeReader(episode.path).keys()
    )


def test_the_hands_episode_holds_what_human_data_holds(recorded) -> None:
    _validate(recorded["hands"])
    (episode,) = resolve_episodes(recorded["hands"])
    assert episode.embodiment == "sim/hands"
    reader = EpisodeReader(episode.path)
    keys = set(reader.keys())
    assert keys == {
        "left.obs_wrist_pose", "left.obs_keypoints", "right.obs_wrist_pose",
        "right.obs_keypoints", "obs_head_pose", "images.front_1", "annotations",
    }  # fmt: skip
    assert not any("joint" in k or "gripper" in k or "cmd" in k or "action" in k for k in keys)
    assert reader.attrs["fps"] == 30.0
    heads = np.asarray(reader.read_numeric("obs_head_pose"))
    assert np.ptp(heads[:, :3], axis=0).max() > 0.002  # the head moves
    wrist = np.asarray(reader.read_numeric("left.obs_wrist_pose"))
    right = np.asarray(reader.read_numeric("right.obs_wrist_pose"))
    seen = (wrist[:, 0] < 1e8) & (right[:, 0] < 1e8)  # a sample that sees a sentinel is replaced
    assert seen.mean() > 0.8  # mostly in view; a hand out of view is the sentinel
    # actions are the next frame's wrist pose, in the head's frame at the sample's frame
    dataset = EpisodeDataset([episode], embodiment="sim/hands", cameras=("front_1",), history=1,
                             horizon=2, image_size=SIZE)  # fmt: skip
    frame, sample = _sample_in_view(dataset, seen)
    expected = express_in(heads[frame], wrist[frame + 1][None])[0]
    assert np.asarray(sample["actions"]).shape == (2, 36)
    assert np.allclose(np.asarray(sample["actions"])[0, :3], expected[:3], atol=1e-4)


def test_the_hands_camera_is_not_the_robots_and_the_arms_are_not_drawn() -> None:
    from polymimic_sim.tasks.camera_frames import project

    robot = make_task("aloha_ee/transfer_cube", image_size=SIZE)
    hands = make_task("hands/transfer_cube", image_size=SIZE)
    try:
        assert hands.cameras == ["front_1"] and "top" not in hands.cameras
        robot.reset(0)
        hands.reset(0)
        # the same state drawn both ways, from the hands' camera
        pose = hands.head  # type: ignore[attr-defined]
        from polymimic_sim.tasks.camera_frames import place_camera

        model, data = robot.env.physics.model.ptr, robot.env.physics.data.ptr  # type: ignore[attr-defined]
        camera = model.camera("angle").id
        place_camera(model, data, camera, pose)
        robot.renderer.update_scene(data, camera="angle")  # type: ignore[attr-defined]
        drawn_robot = robot.renderer.render().copy()  # type: ignore[attr-defined]
        drawn_hands = hands.render()["front_1"]
        parts = ("upper_forearm_link", "lower_forearm_link", "wrist_link")
        links = [f"vx300s_{side}/{part}" for side in ("left", "right") for part in parts]
        points = np.stack([data.body(link).xpos for link in links] + [[0.0, 0.6, 0.0]])
        pixels, inside = project(pose, model.cam_fovy[camera], SIZE, points)
        assert inside[:-1].sum() >= 2 and inside[-1], dict(zip(links, inside, strict=False))

        def differ(u: float, v: float) -> int:
            a, b = drawn_robot[int(v), int(u)], drawn_hands[int(v), int(u)]
            return int(np.abs(a.astype(int) - b.astype(int)).sum())

        arms = [differ(*pixels[i]) for i in np.flatnonzero(inside[:-1])]
        assert all(d > 30 for d in arms), arms  # an arm link drawn by the robot, not the hands
        assert differ(*pixels[-1]) < 10  # the table's middle: drawn alike
    finally:
        robot.close()
        hands.close()


def test_a_persons_timing_differs_per_episode() -> None:
    task = make_task("hands/transfer_cube", image_size=SIZE)
    try:
        lengths = []
        for seed in (0, 1):
            task.reset(seed)
            task.expert_action()
            left, _ = task._plan  # type: ignore[attr-defined]
            lengths.append(len(left))
        assert lengths[0] != lengths[1]
        assert all(400 * 0.8 <= n <= 400 * 1.2 + 1 for n in lengths), lengths
    finally:
        task.close()


def test_a_hand_out_of_view_is_not_detected() -> None:
    from polymimic_sim.tasks.hands_tasks import NOT_DETECTED

    task = make_task("hands/transfer_cube", image_size=SIZE)
    try:
        task.reset(0)
        wrists, keypoints = task.hands()  # type: ignore[attr-defined]
        seen = task._tracked(wrists[0], keypoints[0])  # type: ignore[attr-defined]
        assert np.abs(seen[:3] - wrists[0, :3]).max() < 0.05  # noisy, near the truth
        behind = wrists[0].copy()
        behind[1] = -1.0  # behind the person's head
        assert (task._tracked(behind, keypoints[0]) == NOT_DETECTED).all()  # type: ignore[attr-defined]
    finally:
        task.close()


def test_the_robot_in_the_hands_layout_is_read_as_hands_episodes_are(recorded) -> None:
    """aloha_as_hands' vector of world poses is the loader's state of a hands episode (and its
    action the next frame's): a policy trained on hands sees the robot in its own form."""
    from polymimic_sim.tasks.aloha_as_hands import hands_vector

    (episode,) = resolve_episodes(recorded["hands"])
    reader = EpisodeReader(episode.path)
    heads = np.asarray(reader.read_numeric("obs_head_pose"), np.float64)
    wrists = np.stack([reader.read_numeric(f"{s}.obs_wrist_pose") for s in ("left", "right")], 1)
    points = np.stack([reader.read_numeric(f"{s}.obs_keypoints") for s in ("left", "right")], 1)
    seen = np.asarray((wrists[:, :, 0] < 1e8).all(1))
    dataset = EpisodeDataset([episode], embodiment="sim/hands", cameras=("front_1",), history=1,
                             horizon=2, image_size=SIZE)  # fmt: skip
    frame, sample = _sample_in_view(dataset, seen)
    now = hands_vector(heads[frame], wrists[frame], points[frame].reshape(2, 3, 3))
    later = hands_vector(heads[frame], wrists[frame + 1], points[frame + 1].reshape(2, 3, 3))
    assert np.allclose(np.asarray(sample["state"])[0], now, atol=1e-4)
    assert np.allclose(np.asarray(sample["actions"])[0], later, atol=1e-4)


def test_the_robot_expert_succeeds_through_the_hands_layout() -> None:
    """The robot's scripted expert, turned into the hands' actions (the opening as fingertips)
    and back, does the task: the mapping loses nothing a policy would need."""
    from polymimic_sim.tasks.aloha_as_hands import GRASP, HAND_WIDTH

    task = make_task("aloha_as_hands/transfer_cube", image_size=SIZE)
    try:
        assert task.embodiment == "sim/hands" == task_embodiment("aloha_as_hands/transfer_cube")
        observation = task.reset(1000)
        assert observation["state"].shape == (2 * HAND_WIDTH,)
        assert task.cameras == ["front_1"]
        fingertips = task.fingertips[0]  # type: ignore[attr-defined]
        for opening in (GRASP + 0.01, 0.9, 1.0):  # the gripper's geometry inverted, a grasp closes
            assert fingertips.opening(fingertips.keypoints(opening)) == pytest.approx(opening)
        assert fingertips.opening(fingertips.keypoints(GRASP - 0.1)) == 0.0
        success = strict = False
        steps = 0
        while steps < task.max_steps:
            step = task.step(task.expert_action())
            steps += 1
            success, strict = success or step.success, strict or step.strict_success
            if strict or step.done:
                break
        assert success and strict, (steps, success, strict)
        assert steps < task.max_steps == 240  # the robot's 400 ticks at the hands' 30 Hz
    finally:
        task.close()


def test_the_robot_in_the_hands_layout_records_nothing(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"records nothing: record hands/transfer_cube"):
        record("aloha_as_hands/transfer_cube", tmp_path / "x", episodes=1, image_size=SIZE,
               progress=False)  # fmt: skip
    assert not (tmp_path / "x").exists()


def test_a_persons_recorded_motions_replayed_through_the_hands_layout_grip_the_cube(
    recorded,
) -> None:
    """The hands episode's own observed wrists and fingertips (noise and all), replayed as the
    robot's actions frame by frame: the gripper goes where the hand went (through its weld's
    offset) and a hand shown holding the cube closes the gripper on it, lifting it."""
    from polymimic_sim.tasks.aloha_as_hands import hands_vector

    (episode,) = resolve_episodes(recorded["hands"])
    reader = EpisodeReader(episode.path)
    wrists = np.stack([reader.read_numeric(f"{s}.obs_wrist_pose") for s in ("left", "right")], 1)
    points = np.stack([reader.read_numeric(f"{s}.obs_keypoints") for s in ("left", "right")], 1)
    task = make_task("aloha_as_hands/transfer_cube", image_size=SIZE)
    try:
        task.reset(int(reader.attrs["seed"]))
        head = task.head  # type: ignore[attr-defined]  # the robot's still head
        fingertips = task.fingertips  # type: ignore[attr-defined]
        action, best, gripped = None, 0.0, False
        for frame in range(1, len(wrists)):
            if (np.abs(wrists[frame, :, 0]) < 1e8).all():  # a hand out of view: hold the last
                action = hands_vector(head, wrists[frame], points[frame].reshape(2, 3, 3))
            if action is None:
                continue
            step = task.step(action)
            best = max(best, step.reward)
            hands = action.reshape(2, -1)
            closed = [fingertips[i].opening(hands[i, 9:]) == 0.0 for i in range(2)]
            gripped = gripped or (step.reward >= 2 and closed[1])  # lifted, the right closed
            if step.done:
                break
        assert best >= 2 and gripped, (best, gripped)  # 2: the cube lifted off the table
    finally:
        task.close()
