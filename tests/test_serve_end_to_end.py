"""A trained policy acts: `train`, then `polymimic-serve` on its last.ckpt, driven for 200
ticks by a client written as openpi's runtimes write theirs.

The client connects, reads the metadata, sends ALOHA-style observations (state, four
cameras channels-first at 224x224, no prompt) and executes `actions` through openpi's
ActionChunkBroker logic; every bad input of the issue gets its text frame and the
connection goes on. The server is the installed console script, run as a user runs it.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from polymimic_serve import PolicyClient

ALOHA_CAMERAS = ("cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist")


@pytest.fixture(scope="module")
def server_url(trained_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory):
    """`polymimic-serve CHECKPOINT --port 0 --camera-map cam_high=front_1`, as installed."""
    script = Path(sys.executable).with_name("polymimic-serve")
    log = tmp_path_factory.mktemp("serve") / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [str(script), str(trained_checkpoint), "--port", "0", "--camera-map",
             "cam_high=front_1"],
            stdout=out, stderr=subprocess.STDOUT, env=os.environ | {"CUDA_VISIBLE_DEVICES": ""},
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not (found := re.search(r"on (ws://127\.0\.0\.1:\d+)", log.read_text())):
            assert process.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        yield found[1]
    finally:
        process.send_signal(signal.SIGINT)  # Ctrl-C: a clean stop
        assert process.wait(timeout=30) == 0, log.read_text()[-3000:]


def _aloha_observation(rng: np.random.Generator, state_dim: int) -> dict:
    return {
        "state": rng.normal(size=state_dim),  # float64, as ALOHA's runtime sends it
        "images": {c: rng.integers(0, 256, (3, 224, 224), dtype=np.uint8) for c in ALOHA_CAMERAS},
    }


def test_a_runtime_drives_the_served_checkpoint_for_200_ticks(server_url: str) -> None:
    client = PolicyClient(server_url)
    metadata = client.get_server_metadata()
    assert metadata["embodiment"] == "eva_bimanual" and metadata["cameras"] == ["front_1"]
    assert metadata["step"] == 4 and metadata["fps"] == 30.0 and metadata["history"] == 2
    horizon, action_dim = metadata["chunk_length"], metadata["action_dim"]
    rng = np.random.default_rng(0)
    chunk, step, executed, requests = None, 0, [], 0
    for _ in range(200):  # openpi's ActionChunkBroker, as its ALOHA example runs it
        observation = _aloha_observation(rng, metadata["state_dim"])
        if chunk is None:
            chunk, step, requests = client.infer(observation), 0, requests + 1
        executed.append(chunk["actions"][step])
        step += 1
        if step >= min(horizon, 10):
            chunk = None
    actions = np.stack(executed)
    assert actions.shape == (200, action_dim) and np.isfinite(actions).all()
    assert requests == 20
    client.close()


def test_each_bad_input_gets_its_text_frame_and_the_connection_goes_on(server_url: str) -> None:
    client = PolicyClient(server_url)
    state_dim = client.get_server_metadata()["state_dim"]
    good = _aloha_observation(np.random.default_rng(1), state_dim)
    cases = {
        "a missing camera": (
            {**good, "images": {k: v for k, v in good["images"].items() if k != "cam_high"}},
            "images: no image for the policy's camera ['front_1']",
        ),
        "a wrong state shape": ({**good, "state": np.zeros(14)}, "state: shape (16,)"),
        "a non-uint8 image": (
            {**good, "images": {**good["images"], "cam_high": np.zeros((3, 224, 224))}},
            "images['cam_high']: uint8 (3, H, W) or (H, W, 3), got float64",
        ),
    }
    for name, (observation, words) in cases.items():
        with pytest.raises(RuntimeError, match="Error in inference server") as refused:
            client.infer(observation)
        assert words in str(refused.value), name
        assert client.infer(good)["actions"].shape[1] == state_dim, name  # and on it goes
    client._connection.send(b"\xc1\xc1 not msgpack")  # garbage bytes
    reply = client._connection.recv()
    assert isinstance(reply, str) and "not a msgpack message" in reply
    assert client.infer(good)["actions"].shape[1] == state_dim
    client.close()
