"""Observations as openpi's runtimes send them: cameras renamed, history kept, errors named."""

from __future__ import annotations

import numpy as np
import pytest

from polymimic_serve import LocalPolicy, ObservationError
from polymimic_serve.observations import ObservationReader, StateHistory, parse_camera_map

ALOHA = {"cam_high": "front_1"}


def test_the_camera_map_parses_and_names_what_it_cannot(tiny_policy) -> None:
    assert parse_camera_map(" cam_high=front_1, cam_low=left_wrist ") == {
        "cam_high": "front_1",
        "cam_low": "left_wrist",
    }
    assert parse_camera_map("") == {}
    with pytest.raises(ValueError, match="'cam_high' is not ROBOT_CAMERA=POLICY_CAMERA"):
        parse_camera_map("cam_high")
    with pytest.raises(ValueError, match=r"\['wrist'\] are not cameras of this policy"):
        ObservationReader(tiny_policy, {"cam_high": "wrist"})


def test_the_history_repeats_the_first_state_then_slides_and_restarts(
    tiny_policy, observation
) -> None:
    reader, history = ObservationReader(tiny_policy, ALOHA), StateHistory(2)
    first, second, third = (observation(seed) for seed in range(3))
    np.testing.assert_allclose(reader.read(first, history).state, [first["state"]] * 2, rtol=1e-6)
    np.testing.assert_allclose(
        reader.read(second, history).state, [first["state"], second["state"]], rtol=1e-6
    )
    restarted = reader.read({**third, "reset": True}, history).state
    np.testing.assert_allclose(restarted, [third["state"]] * 2, rtol=1e-6)
    whole = np.stack([second["state"], third["state"]])  # a client may send the history itself
    np.testing.assert_allclose(
        reader.read({**first, "state": whole}, history).state, whole, rtol=1e-6
    )


def test_frames_in_either_layout_at_any_size_reach_the_policy_at_its_size(
    tiny_policy, observation
) -> None:
    reader = ObservationReader(tiny_policy, ALOHA)
    chw = reader.read(observation(size=(480, 640)), StateHistory(2))
    hwc = reader.read(observation(size=(480, 640), chw=False), StateHistory(2))
    assert chw.images["front_1"].shape == hwc.images["front_1"].shape == (1, 3, 32, 40)
    # unmapped cameras a robot also sends are left alone; a camera under its own name is used
    extra = observation()
    frame = extra["images"].pop("cam_high")
    extra["images"] = {"front_1": frame, "cam_low": np.zeros((3, 4, 4), np.uint8)}
    assert reader.read(extra, StateHistory(2)).images["front_1"].shape == (1, 3, 32, 40)


def test_a_camera_map_may_name_top_level_keys_as_droid_sends_them(tiny_policy, observation) -> None:
    reader = ObservationReader(
        tiny_policy, {"observation/exterior_image_1_left": "front_1"}, "observation/joint_position"
    )
    sent = observation(chw=False)
    droid = {
        "observation/exterior_image_1_left": sent["images"]["cam_high"],
        "observation/joint_position": sent["state"],
        "prompt": "fold",
    }
    request = reader.read(droid, StateHistory(2))
    assert request.prompt == "fold" and request.state.shape == (2, 16)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda o: {k: v for k, v in o.items() if k != "state"},
            r"state: missing; expected float \(16,\)",
        ),
        (
            lambda o: o | {"state": np.zeros(14)},
            r"state: shape \(16,\) \(or the whole history, \(2, 16\)\) for the "
            r"eva_cartesian_quat layout, got \(14,\)",
        ),
        (lambda o: o | {"state": "zero"}, r"state: a float array \(16,\) or \(2, 16\), got str"),
        (lambda o: o | {"state": np.full(16, np.inf)}, "state: every value must be finite"),
        (
            lambda o: o | {"images": {}},
            r"images: no image for the policy's camera \['front_1'\] "
            r"\(sent \[\]; expected \['cam_high'\]\)",
        ),
        (
            lambda o: o | {"images": {"cam_high": o["images"]["cam_high"].astype(np.float32)}},
            r"images\[.cam_high.\]: uint8 \(3, H, W\) or \(H, W, 3\), "
            r"got float32 array \(3, 48, 64\)",
        ),
        (
            lambda o: o | {"images": {"cam_high": np.zeros((48, 64), np.uint8)}},
            r"images\['cam_high'\]: uint8 .* got uint8 array \(48, 64\)",
        ),
        (lambda o: o | {"images": [1, 2]}, "images: a map of camera -> image, got a list of 2"),
        (lambda o: o | {"prompt": 3}, "prompt: a string, got int"),
        (lambda o: o | {"reset": "yes"}, "reset: true or false"),
        (
            lambda o: o | {"rtc": {"actions": np.zeros((4, 16))}},
            r"rtc: a map with actions \(P, A\) and delay",
        ),
        (
            lambda o: o | {"rtc": {"actions": np.zeros((4, 16)), "delay": 1.5}},
            "rtc.delay: an integer, got float 1.5",
        ),
        (
            lambda o: o | {"rtc": {"actions": np.zeros((4, 3)), "delay": 1}},
            r"rtc.actions: float \(P, 16\)",
        ),
        (lambda o: [o], "observation: a map of keys"),
        # each of these used to escape as a ValueError/TypeError/OverflowError (close 1011)
        (lambda o: o | {"state": [[1.0, 2.0], [3.0]]}, "state: .* got a ragged or non-numeric"),
        (lambda o: o | {"state": [[[[[0.0]]]]]}, r"state: shape .*got \(1, 1, 1, 1, 1\)"),
        (lambda o: o | {"state": np.full(16, 1e300)}, "state: every value must be finite"),
        (lambda o: o | {"rtc": {"actions": "abc", "delay": 1}}, r"rtc.actions: .*got str 'abc'"),
        (lambda o: o | {"rtc": {"actions": {"a": 1}, "delay": 1}}, "rtc.actions: .*a dict of 1"),
        (
            lambda o: o | {"rtc": {"actions": [[1.0], [1.0, 2.0]], "delay": 1}},
            "rtc.actions: .*ragged",
        ),
        (
            lambda o: o | {"reset": "y" * 100_000},
            r"reset: true or false, got str 'yyy.*characters\)$",
        ),
        (
            lambda o: o | {"images": {"cam_high": np.zeros((3, 1_000_000, 1), np.uint8)}},
            r"images\['cam_high'\]: a frame of 1000000x1; .* up to 3840",
        ),
        (
            lambda o: o | {"images": {"cam_high": np.zeros((3, 3000, 3000), np.uint8)}},
            r"images\['cam_high'\]: .*pixels",
        ),
    ],
)
def test_a_bad_observation_is_named_and_leaves_the_history_as_it_was(
    tiny_policy, observation, change, message
) -> None:
    reader, history = ObservationReader(tiny_policy, ALOHA), StateHistory(2)
    reader.read(observation(0), history)
    before = history.states.copy()
    with pytest.raises(ObservationError, match=message) as caught:
        reader.read(change(observation(1)), history)
    np.testing.assert_array_equal(history.states, before)
    assert len(str(caught.value)) < 400  # nothing a client sent is quoted whole


def test_rtc_is_refused_for_a_policy_that_cannot_inpaint(regression_export, observation) -> None:
    from polymimic_serve import load_policy

    local = LocalPolicy(load_policy(regression_export), ALOHA)
    assert local.get_server_metadata()["can_inpaint"] is False
    with pytest.raises(ObservationError, match="'hpt' policy cannot continue a chunk"):
        local.infer(observation(rtc={"actions": np.zeros((4, 16)), "delay": 1}))


def test_a_local_policy_answers_as_the_server_does(tiny_policy, observation) -> None:
    local = LocalPolicy(tiny_policy, ALOHA, seed=3)
    meta = local.get_server_metadata()
    assert (meta["chunk_length"], meta["action_dim"], meta["fps"], meta["step"]) == (
        8,
        16,
        30.0,
        0,
    )
    reply = local.infer(observation())
    assert reply["actions"].shape == (8, 16) and reply["actions"].dtype == np.float32
    assert reply["policy_timing"]["infer_ms"] > 0
