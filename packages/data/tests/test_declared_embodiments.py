"""Embodiments declared by episodes: registered once from their attributes, checked, and
known to the resolver and the loader without any code naming them."""

from __future__ import annotations

import re

import numpy as np
import pytest

from polymimic_data.embodiments.declared import DECLARATION, DeclarationError, declare
from polymimic_data.embodiments.registry import get_embodiment
from polymimic_data.episodes.resolver import resolve_episodes, scan_episodes
from polymimic_data.lerobot.importer import joint_groups, parse_episodes
from polymimic_data.samples.dataset import EpisodeDataset
from polymimic_data.store.episode_store import write_episode


def _declaration(name: str, width: int = 3, cameras=("top",)) -> dict:
    return {
        "name": name,
        "fps": 10.0,
        "cameras": list(cameras),
        "state": ["observation.state"],
        "actions": ["action"],
        "groups": [
            {"name": "joints", "kind": "joint", "width": width - 1},
            {"name": "gripper", "kind": "gripper", "width": 1},
        ],
    }


def _write(root, name: str, declaration: dict, frames: int = 12, seed: int = 0):
    rng = np.random.default_rng(seed)
    width = sum(g["width"] for g in declaration["groups"])
    state = rng.normal(size=(frames, width)).astype(np.float32)
    return write_episode(
        root / f"{name}.zarr",
        embodiment=declaration["name"],
        fps=declaration["fps"],
        arrays={"observation.state": state, "action": state + 1},
        metadata={DECLARATION: declaration},
    )


def test_episodes_declare_their_embodiment_to_the_resolver_and_the_loader(tmp_path) -> None:
    declaration = _declaration("test/arm_a", cameras=())
    for i in range(2):
        _write(tmp_path, f"ep{i}", declaration, seed=i)
    episodes = resolve_episodes(tmp_path, embodiment="test/arm_a")
    assert [e.total_frames for e in episodes] == [12, 12]
    spec = get_embodiment("test/arm_a")
    assert spec.numeric_keys == ("observation.state", "action")
    layout = spec.layout()
    assert [(g.name, g.kind, g.width) for g in layout.groups] == [
        ("joints", "joint", 2),
        ("gripper", "gripper", 1),
    ]
    assert layout.normalised_mask() == [True, True, True]  # joints are normalised
    dataset = EpisodeDataset(episodes, embodiment="test/arm_a", cameras=(), history=2, horizon=4)
    sample = dataset[5]
    state = np.asarray(sample["state"])
    actions = np.asarray(sample["actions"])
    assert state.shape == (2, 3) and actions.shape == (4, 3)
    assert np.allclose(actions[0] - 1, state[-1])  # action at a frame: the command given there


def test_the_same_declaration_twice_is_one_embodiment_a_different_one_is_refused(
    tmp_path,
) -> None:
    first = declare(_declaration("test/arm_b"))
    assert declare(_declaration("test/arm_b")) is first
    with pytest.raises(DeclarationError, match=r"test/arm_b.*differently.*--embodiment"):
        declare(_declaration("test/arm_b", width=4))
    with pytest.raises(DeclarationError, match=r"\(fps: registered 10.0, declared 20.0\)"):
        declare({**_declaration("test/arm_b"), "fps": 20.0})  # each difference named
    _write(tmp_path, "other", _declaration("test/arm_b", width=5))
    problems = scan_episodes(tmp_path).problems
    assert len(problems) == 1 and "other.zarr" in problems[0][0]
    assert "differently" in problems[0][1]


def test_a_view_is_not_an_embodiment_the_same_robot_through_two_cameras_is_one(
    tmp_path,
) -> None:
    _write(tmp_path, "a_both", _declaration("test/arm_views", cameras=("wrist", "top")))
    top = [_write(tmp_path, f"b_top{i}", _declaration("test/arm_views", cameras=("top",)), seed=i)
           for i in (1, 2)]  # fmt: skip
    episodes = resolve_episodes(tmp_path, embodiment="test/arm_views")  # one process, both
    assert [e.path for e in episodes][1:] == top  # those lacking wrist come after one holding it
    assert get_embodiment("test/arm_views").cameras == ("wrist", "top")  # all those declared
    assert declare(_declaration("test/arm_views", cameras=("top",))).cameras == ("wrist", "top")
    dataset = EpisodeDataset(episodes, embodiment="test/arm_views", cameras=("top",), horizon=4)
    assert dataset.cameras == ("top",)
    with pytest.raises(ValueError, match=re.escape(
        f"cameras ['wrist']: episode {top[0]} was recorded without ['wrist'] (it holds ['top']); "
        "1 more episode lacks some"
    )):  # fmt: skip
        EpisodeDataset(episodes, embodiment="test/arm_views", cameras=("wrist",), horizon=4)
    with pytest.raises(DeclarationError, match=re.escape(
        "(channel groups: registered [joints (joint, 2), gripper (gripper, 1)], declared "
        "[joints (joint, 3), gripper (gripper, 1)])"
    )):  # fmt: skip
        declare(_declaration("test/arm_views", width=4, cameras=("top",)))


def test_a_malformed_declaration_names_what_is_missing() -> None:
    bad = _declaration("test/arm_c")
    del bad["actions"]
    with pytest.raises(DeclarationError, match=r"lacks \['actions'\]"):
        declare(bad, source="/data/ep.zarr")
    bad = _declaration("test/arm_c")
    bad["groups"][0]["kind"] = "elbow"
    with pytest.raises(DeclarationError, match="kind"):
        declare(bad)


def test_joint_groups_follow_the_channel_names() -> None:
    aloha = [f"{side}_{j}" for side in ("left", "right") for j in ("waist", "elbow", "gripper")]
    assert joint_groups(aloha) == [
        {"name": "left_joints", "kind": "joint", "width": 2},
        {"name": "left_gripper", "kind": "gripper", "width": 1},
        {"name": "right_joints", "kind": "joint", "width": 2},
        {"name": "right_gripper", "kind": "gripper", "width": 1},
    ]
    so100 = ["shoulder_pan.pos", "shoulder_lift.pos", "elbow_flex.pos", "gripper.pos"]
    groups = joint_groups(so100)  # one arm: the prefixes are joint names, not arms
    assert [(g["name"], g["width"]) for g in groups] == [("joints", 3), ("gripper.pos", 1)]
    assert [g["name"] for g in joint_groups(["a", "gripper", "b"])] == [
        "joints",
        "gripper",
        "joints_2",
    ]


def test_episode_lists_parse_as_ranges() -> None:
    assert parse_episodes("0,3-5,3") == [0, 3, 4, 5]
    with pytest.raises(ValueError, match="N or N-M"):
        parse_episodes("1,x")
    with pytest.raises(ValueError, match="backwards"):
        parse_episodes("5-2")


def _human_declaration(name: str) -> dict:
    """A person: wrist poses and keypoints in the world, the head's pose, actions the next poses."""
    hand = [(f"{s}.obs_wrist_pose", f"{s}.obs_keypoints") for s in ("left", "right")]
    keys = [key for pair in hand for key in pair]
    groups = [
        {"name": f"{side}_{part}", "kind": kind, "width": width}
        for side in ("left", "right")
        for part, kind, width in (("position", "position", 3), ("rotation", "rot6d", 6),
                                  ("keypoints", "keypoints", 6))
    ]  # fmt: skip
    return {
        "name": name,
        "family": "human",
        "fps": 30.0,
        "cameras": [],
        "state": keys,
        "actions": [[key, 1] for key in keys],
        "frame": "obs_head_pose",
        "rotation": "rot6d",
        "groups": groups,
    }


def test_a_declared_human_reads_next_poses_in_the_head_frame(tmp_path) -> None:
    from polymimic_data.geometry import express_in, points_in_frame, to_matrix

    frames = 10
    rng = np.random.default_rng(0)

    def poses() -> np.ndarray:  # xyz + a unit quaternion per frame
        quat = rng.normal(size=(frames, 4))
        return np.concatenate(
            [rng.normal(size=(frames, 3)), quat / np.linalg.norm(quat, axis=1, keepdims=True)], 1
        )

    arrays = {
        "obs_head_pose": poses(),
        **{f"{s}.obs_wrist_pose": poses() for s in ("left", "right")},
        **{f"{s}.obs_keypoints": rng.normal(size=(frames, 6)) for s in ("left", "right")},
    }
    declaration = _human_declaration("test/person")
    write_episode(
        tmp_path / "person.zarr",
        embodiment="test/person",
        fps=30.0,
        arrays={k: v.astype(np.float32) for k, v in arrays.items()},
        metadata={DECLARATION: declaration},
    )
    episodes = resolve_episodes(tmp_path, embodiment="test/person")
    spec = get_embodiment("test/person")
    assert spec.family == "human" and "obs_head_pose" in spec.numeric_keys
    dataset = EpisodeDataset(episodes, embodiment="test/person", cameras=(), history=1, horizon=3)
    sample = dataset[4]
    actions = np.asarray(sample["actions"])
    assert np.asarray(sample["state"]).shape == (1, 30) and actions.shape == (3, 30)
    head = arrays["obs_head_pose"][4].astype(np.float32)
    wrist = arrays["left.obs_wrist_pose"][5].astype(np.float32)  # action step 0: the next frame
    expected = express_in(head, wrist[None])[0]
    assert np.allclose(actions[0, :3], expected[:3], atol=1e-4)
    rotation = to_matrix(actions[0, 3:9], "rot6d")
    assert np.allclose(rotation, to_matrix(expected[3:7], "quaternion"), atol=1e-4)
    points = points_in_frame(wrist[None], arrays["left.obs_keypoints"][5].reshape(1, 2, 3))
    assert np.allclose(actions[0, 9:15], points.reshape(-1), atol=1e-4)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("actions", [["action", "1"]], r"actions: .*\[name, frame offset\]"),
        ("state", [["observation.state", 1, 2]], r"state: .*\[name, frame offset\]"),
        ("frame", 3, r"frame: the store key of a pose"),
        ("rotation", "axis_angle", r"rotation: one of"),
    ],
)
def test_a_malformed_entry_frame_or_rotation_is_named(field: str, value, message: str) -> None:
    bad = _declaration("test/arm_d") | {field: value}
    with pytest.raises(DeclarationError, match=message):
        declare(bad, source="/data/ep.zarr")
