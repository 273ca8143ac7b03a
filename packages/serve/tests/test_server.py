"""The policy server on loopback, spoken to as openpi's client and runtimes speak."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import msgpack
import numpy as np
import pytest
from websockets.exceptions import ConnectionClosedError, InvalidStatus
from websockets.sync.client import connect

from polymimic_serve import (
    LocalPolicy,
    PolicyClient,
    PolicyServer,
    RunningServer,
    load_policy,
    make_executor,
)
from polymimic_serve.trained_policy import NonFiniteActions
from polymimic_serve.wire import packb, unpackb

ALOHA = {"cam_high": "front_1"}


def serving(policy, **options) -> RunningServer:
    return RunningServer(PolicyServer(policy, camera_map=ALOHA, port=0, **options))


class OpenpiBroker:
    """openpi-client's ActionChunkBroker as its runtimes use it: row `step` of each array."""

    def __init__(self, policy: PolicyClient, action_horizon: int) -> None:
        self.policy, self.horizon, self.step, self.last = policy, action_horizon, 0, None

    def infer(self, observation: dict) -> dict:
        if self.last is None:
            self.last, self.step = self.policy.infer(observation), 0
        assert self.last is not None
        out = {k: v[self.step] if isinstance(v, np.ndarray) else v for k, v in self.last.items()}
        self.step += 1
        if self.step >= self.horizon:
            self.last = None
        return out


def test_a_runtime_reads_metadata_then_runs_200_ticks_through_a_broker(
    tiny_policy, observation
) -> None:
    with serving(tiny_policy) as running, PolicyClient(running.url) as client:
        meta = client.get_server_metadata()
        assert isinstance(meta, dict) and meta.get("reset_pose") is None  # ALOHA reads it so
        assert (meta["chunk_length"], meta["cameras"], meta["camera_map"]) == (
            8,
            ["front_1"],
            ALOHA,
        )
        broker = OpenpiBroker(client, action_horizon=5)
        actions = [broker.infer(observation(tick))["actions"] for tick in range(200)]
        assert np.stack(actions).shape == (200, 16) and np.isfinite(actions).all()
        reply = client.infer(observation(0))
        assert set(reply) == {"actions", "policy_timing", "server_timing"}
        assert (
            reply["server_timing"]["prev_total_ms"] > 0 and reply["policy_timing"]["infer_ms"] > 0
        )


def test_every_bad_input_gets_one_text_frame_and_the_connection_goes_on(
    tiny_policy, observation
) -> None:
    good = observation()
    bad = [
        packb({**good, "images": {"cam_low": good["images"]["cam_high"]}}),  # a missing camera
        packb({**good, "state": np.zeros((3, 7))}),  # a wrong state shape
        packb({**good, "images": {"cam_high": good["images"]["cam_high"].astype(np.int16)}}),
        b"\x93\xc1\xff garbage",  # no msgpack at all
        "a text frame",
        # each of these used to close the connection (1011) or answer hundreds of MB
        msgpack.packb({"reset": {b"__npgeneric__": True, b"data": b"", b"dtype": "|V99999999"}}),
        packb({"__ctrl__": {b"__npgeneric__": True, b"data": b"x" * 64, b"dtype": "|V64"}}),
        packb({**good, "state": [[1.0, 2.0], [3.0]]}),
        packb({**good, "rtc": {"actions": "abc", "delay": 1}}),
        packb({**good, "state": np.full(16, 1e300)}),  # finite float64, inf as float32
        b"\x91" * 5000 + b"\x01",  # nested 5000 deep
        packb({**good, "images": {"cam_high": np.zeros((3, 1_000_000, 1), np.uint8)}}),
    ]
    expected = [
        "images: no image for the policy's camera ['front_1']",
        "state: shape (16,)",
        "images['cam_high']: uint8 (3, H, W) or (H, W, 3), got int16",
        "not a msgpack message",
        "a binary msgpack frame, got a text frame",
        "dtype a short numpy dtype string",
        "unsupported dtype |V64",
        "state: a float array (16,) or (2, 16), got a ragged or non-numeric list",
        "rtc.actions: a float array (P, 16), got str 'abc'",
        "state: every value must be finite",
        "maps and lists nested deeper than 8",
        "a frame of 1000000x1",
    ]
    with serving(tiny_policy) as running:
        with connect(running.url, compression=None, max_size=None) as raw:
            unpackb(raw.recv())  # the metadata
            for message, words in zip(bad, expected, strict=True):
                raw.send(message)
                reply = raw.recv()
                assert isinstance(reply, str) and words in reply, reply
                assert len(reply) < 400
                raw.send(packb(good))  # and the next good observation is answered
                assert unpackb(raw.recv())["actions"].shape == (8, 16)
        with PolicyClient(running.url) as client:  # the client raises it as openpi's does
            with pytest.raises(RuntimeError, match="Error in inference server:\nstate: shape"):
                client.infer({**good, "state": np.zeros(2)})
            assert client.infer(good)["actions"].shape == (8, 16)


def test_four_cameras_at_480x640_are_not_capped(tiny_policy, observation) -> None:
    sent = observation(size=(480, 640))
    frame = sent["images"]["cam_high"]
    sent["images"] |= {
        name: frame.copy() for name in ("cam_low", "cam_left_wrist", "cam_right_wrist")
    }
    assert len(packb(sent)) > 3_600_000  # past websockets' 1 MiB default by far
    with serving(tiny_policy) as running, PolicyClient(running.url) as client:
        assert client.infer(sent)["actions"].shape == (8, 16)


def test_a_message_over_the_cap_is_closed_with_1009_before_it_is_held(
    tiny_policy, observation
) -> None:
    with serving(tiny_policy, max_message_bytes=1 << 20) as running:
        assert running.server.limits.max_message_bytes == 1 << 20
        with connect(running.url, compression=None, max_size=None) as raw:
            unpackb(raw.recv())
            raw.send(packb({**observation(), "pad": np.zeros(2 << 20, np.uint8)}))
            with pytest.raises(ConnectionClosedError) as closed:
                raw.recv()
            assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
        with PolicyClient(running.url) as client:  # the server goes on for everyone else
            assert client.infer(observation())["actions"].shape == (8, 16)
    # the default cap is room for four frames at 1080x1920 (the policy has one camera)
    with serving(tiny_policy) as running:
        assert running.server.limits.max_message_bytes == 4 * 1080 * 1920 * 3 + (1 << 20)


def test_an_observation_that_makes_the_model_non_finite_is_an_error_and_is_forgotten(
    regression_export: Path, observation
) -> None:
    """A finite float32 state of 1e30 overflows inside the model: all-NaN actions, which used
    to go out as a normal reply and stay in the history (the next reply NaN too)."""
    policy = load_policy(regression_export)
    first, bad, second = observation(0), observation(1), observation(2)
    bad["state"] = np.full(16, 1e30, np.float32)
    local = LocalPolicy(policy, ALOHA)
    with pytest.raises(NonFiniteActions, match="not finite"):  # predict itself refuses
        policy.predict(
            {
                "images": {"front_1": bad["images"]["cam_high"]},
                "state": np.stack([bad["state"]] * 2),
            }
        )
    with serving(policy) as running, PolicyClient(running.url) as client:
        client.infer(first)
        with pytest.raises(RuntimeError, match="actions are not finite"):
            client.infer(bad)
        after_bad = client.infer(second)["actions"]
    with serving(policy) as running, PolicyClient(running.url) as client:
        client.infer(first)
        expected = client.infer(second)["actions"]
    assert np.isfinite(after_bad).all()
    np.testing.assert_allclose(after_bad, expected, rtol=1e-5, atol=1e-6)
    # in process, LocalPolicy holds the same rules
    local.infer(first)
    with pytest.raises(ValueError, match="actions are not finite"):
        local.infer(bad)
    np.testing.assert_allclose(local.infer(second)["actions"], expected, rtol=1e-5, atol=1e-6)


def test_healthz_answers_200_and_a_wrong_key_401_before_any_model_work(
    tiny_policy, observation
) -> None:
    with serving(tiny_policy, api_key="sesame") as running:
        port = running.server.port
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as answer:
            assert answer.status == 200 and answer.read() == b"OK\n"
        for key in (None, "wrong"):
            with pytest.raises(InvalidStatus) as refused:
                PolicyClient(running.url, api_key=key)
            assert refused.value.response.status_code == 401
        assert running.server.batcher is not None and running.server.batcher.batch_sizes == []
        with PolicyClient(running.url, api_key="sesame") as client:
            assert client.infer(observation())["actions"].shape == (8, 16)


def test_two_authorization_headers_get_401_and_a_guessing_address_429(tiny_policy, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="polymimic_serve")

    def status(running: RunningServer, headers: list[tuple[str, str]]) -> int:
        try:
            with connect(running.url, additional_headers=headers):
                return 101
        except InvalidStatus as refused:
            return refused.response.status_code

    key = ("Authorization", "Api-Key sesame")
    with serving(tiny_policy, api_key="sesame") as running:
        assert status(running, [key, key]) == 401  # was a 500 with a traceback
        assert status(running, [key, ("Authorization", "Api-Key wrong")]) == 401
        assert status(running, [key]) == 101
        for _ in range(3):
            assert status(running, [("Authorization", "Api-Key guess")]) == 401
        assert status(running, [("Authorization", "Api-Key guess")]) == 429  # the 6th refusal
        assert status(running, [key]) == 429  # this address waits, right key or not
    refused = [r for r in caplog.records if r.getMessage().startswith("refused 127.0.0.1")]
    assert len(refused) == 1  # one line for the burst, not one per attempt


def test_keepalive_pings_are_answered_while_a_slow_inference_runs(tiny_policy, observation) -> None:
    server = PolicyServer(tiny_policy, camera_map=ALOHA, port=0)
    run = server.runner.run

    def slow(requests):
        time.sleep(2.0)  # a first call that compiles, say: ten ping timeouts long
        return run(requests)

    server.runner.run = slow  # type: ignore[method-assign]
    with (
        RunningServer(server) as running,
        connect(running.url, max_size=None, ping_interval=0.1, ping_timeout=0.2) as raw,
    ):
        unpackb(raw.recv())
        raw.send(packb(observation()))
        assert unpackb(raw.recv())["actions"].shape == (8, 16)


def _episode(seed: int, ticks: int, observation) -> list[dict]:
    return [observation(seed * 1000 + tick) for tick in range(ticks)]


@pytest.mark.parametrize("max_batch", [1, 8])
def test_concurrent_clients_each_get_their_own_history(
    regression_export: Path, observation, max_batch
) -> None:
    """A regression head is deterministic: each client's replies are what it alone would get."""
    policy = load_policy(regression_export)
    episodes = [_episode(seed, 6, observation) for seed in range(8)]
    expected = []
    for episode in episodes:
        local = LocalPolicy(policy, ALOHA)
        expected.append([local.infer(o)["actions"] for o in episode])
    start = threading.Barrier(len(episodes))
    with serving(policy, max_batch=max_batch) as running:

        def run_client(episode: list[dict]) -> list[np.ndarray]:
            with PolicyClient(running.url) as client:
                start.wait()
                return [client.infer(o)["actions"] for o in episode]

        with ThreadPoolExecutor(len(episodes)) as pool:
            got = list(pool.map(run_client, episodes))
        sizes = running.server.batcher.batch_sizes  # type: ignore[union-attr]
    for mine, theirs in zip(got, expected, strict=True):
        np.testing.assert_allclose(np.stack(mine), np.stack(theirs), rtol=1e-4, atol=1e-5)
    assert max(sizes) <= max_batch and sum(sizes) == 8 * 6
    if max_batch > 1:
        assert max(sizes) > 1  # requests that waited together ran together


def test_a_new_episode_restarts_the_history(regression_export: Path, observation) -> None:
    policy = load_policy(regression_export)
    first = LocalPolicy(policy, ALOHA).infer(observation(7))["actions"]
    with serving(policy) as running, PolicyClient(running.url) as client:
        client.infer(observation(1))
        assert not np.allclose(client.infer(observation(7))["actions"], first)  # history: 1, 7
        client.reset()  # the next observation carries reset: true
        np.testing.assert_allclose(client.infer(observation(7))["actions"], first, rtol=1e-5)
        client.infer(observation(1))
        # openpi-client's episode_start: a control message, answered with a dict
        client._connection.send(packb({"__ctrl__": "episode_start", "__experiment__": "x"}))
        assert unpackb(client._connection.recv())["ok"] is True
        np.testing.assert_allclose(client.infer(observation(7))["actions"], first, rtol=1e-5)


@pytest.mark.parametrize("name", ["chunk", "temporal_ensemble", "rtc"])
def test_each_executor_drives_the_server(tiny_policy, observation, name: str) -> None:
    with serving(tiny_policy) as running, PolicyClient(running.url) as client:
        options = {} if name == "temporal_ensemble" else {"n_action_steps": 4}
        executor = make_executor(name, client, delay=2, **options)
        actions = np.stack([executor.act(observation(tick)) for tick in range(20)])
    assert actions.shape == (20, 16) and np.isfinite(actions).all()
    assert executor.requests == (20 if name == "temporal_ensemble" else 5)


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own niceness is Linux's")
def test_the_large_message_thread_yields_to_inference_and_only_it() -> None:
    from polymimic_serve.server import LARGE_READ_NICENESS, yield_to_inference

    def niceness() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    before = niceness()
    with ThreadPoolExecutor(1, initializer=yield_to_inference) as pool:
        inside = pool.submit(niceness).result()
    assert inside == min(before + LARGE_READ_NICENESS, 19)
    assert niceness() == before  # the event loop's thread and inference keep their priority
