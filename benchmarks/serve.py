"""The policy server against the policy itself, in one run: latency, throughput, smoothness.

    python benchmarks/serve.py                        # trains a short default run first
    python benchmarks/serve.py --checkpoint CKPT      # or serves a checkpoint or export

Prints one JSON line per figure (DESIGN.md). The policy is the default run's (`train`'s
hpt_small on synthetic eva episodes, trained `--steps` steps unless a checkpoint is given).

- Round trip over loopback, p50 and p99 of `--requests` requests, each an observation as a
  robot sends it (its camera at 480x640, channels first, state (S,)), against
  `TrainedPolicy.predict` on the same observations, the two interleaved request by request
  so the machine's noise falls on both: goal p50 ratio <= 1.15. Also with four cameras
  on the wire (ALOHA's), three of them unused by the policy: what the payload costs.
- Requests per second with 1, 4 and 16 concurrent clients, each request answered one at a
  time and with batching across clients (`--max-batch 16`).
- At chunk boundaries, the mean jump between consecutive executed actions with `rtc`
  against `chunk`, on the same policy and observations (an episode replayed), with an
  inference delay of `--delay` ticks: goal ratio < 1.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import torch
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from train_process import run_train

from polymimic_serve import (
    LocalPolicy,
    PolicyClient,
    PolicyServer,
    RunningServer,
    TrainedPolicy,
    load_policy,
    make_executor,
)

emit = figure_printer("serve")
CAMERA_MAP = {"cam_high": "front_1"}
SHORT_RUN = [
    "trainer.val_check_interval=1000000",
    "trainer.enable_progress_bar=false",
    "data.synthetic.episodes=24",
    "data.num_workers=1",
    "callbacks.trajectory_video.max_frames=4",
]


def train_default_run(tmp: Path, steps: int) -> Path:
    """`train` (the default run: hpt_small on synthetic eva) for `steps` steps; its last.ckpt."""
    seconds, result = run_train(tmp, f"trainer.max_steps={steps}", *SHORT_RUN)
    if result.returncode != 0:
        sys.exit(f"the default run failed:\n{result.stderr[-3000:]}")
    emit("default_run_train_s", seconds, "s", steps=steps)
    (last,) = (tmp / "runs").glob("*/*/checkpoints/last.ckpt")
    return last


def robot_observation(policy: TrainedPolicy, rng: np.random.Generator, cameras: int = 1) -> dict:
    """What a robot sends: each camera uint8 (3, 480, 640), the state (S,) as float64."""
    names = ["cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"][:cameras]
    return {
        "state": 0.1 * rng.normal(size=policy.layout.dim),
        "images": {n: rng.integers(0, 256, (3, 480, 640), dtype=np.uint8) for n in names},
    }


def as_predict_input(policy: TrainedPolicy, observation: dict, history: list) -> dict:
    """The same observation as `predict` takes it: the state history, HWC frames."""
    history.append(observation["state"])
    states = (history[-policy.history :] * policy.history)[-policy.history :]
    frame = observation["images"]["cam_high"].transpose(1, 2, 0)
    return {"state": np.stack(states), "images": {"front_1": frame}}


def latency(policy: TrainedPolicy, url: str, requests: int, cameras: int) -> None:
    rng = np.random.default_rng(0)
    observations = [robot_observation(policy, rng, cameras) for _ in range(8)]
    served, direct, history = [], [], []
    with PolicyClient(url) as client:
        for index in range(requests + 5):  # 5 to warm up, then interleaved
            observation = observations[index % len(observations)]
            inputs = as_predict_input(policy, observation, history)
            start = time.perf_counter()
            policy.predict(inputs)
            predict_ms = (time.perf_counter() - start) * 1e3
            start = time.perf_counter()
            client.infer(observation)
            server_ms = (time.perf_counter() - start) * 1e3
            if index >= 5:
                direct.append(predict_ms)
                served.append(server_ms)
    tag = {"cameras_on_wire": cameras, "requests": requests, "resolution": "480x640"}
    for name, values in (("predict", direct), ("round_trip", served)):
        emit(f"{name}_p50_ms", float(np.percentile(values, 50)), "ms", **tag)
        emit(f"{name}_p99_ms", float(np.percentile(values, 99)), "ms", **tag)
    ratio = float(np.percentile(served, 50) / np.percentile(direct, 50))
    emit("round_trip_over_predict_p50", ratio, "ratio", goal="<= 1.15", **tag)


def throughput(policy: TrainedPolicy, clients: int, max_batch: int, seconds: float) -> None:
    rng = np.random.default_rng(1)
    observation = robot_observation(policy, rng)
    server = PolicyServer(policy, camera_map=CAMERA_MAP, port=0, max_batch=max_batch)
    with RunningServer(server) as running:
        stop, counts = threading.Event(), [0] * clients
        ready = threading.Barrier(clients + 1)

        def client_loop(index: int) -> None:
            with PolicyClient(running.url) as client:
                client.infer(observation)  # warm
                ready.wait()
                while not stop.is_set():
                    client.infer(observation)
                    counts[index] += 1

        with ThreadPoolExecutor(clients) as pool:
            futures = [pool.submit(client_loop, i) for i in range(clients)]
            ready.wait()
            start = time.perf_counter()
            time.sleep(seconds)
            stop.set()
            for future in futures:
                future.result()
            elapsed = time.perf_counter() - start
        sizes = server.batcher.batch_sizes if server.batcher else [1]
    emit(
        "requests_per_s",
        sum(counts) / elapsed,
        "1/s",
        clients=clients,
        max_batch=max_batch,
        mean_batch=round(float(np.mean(sizes)), 2),
    )


def replayed_episode(policy: TrainedPolicy, episodes: Path | None, frames: int) -> list[dict]:
    """An episode's frames and states as a robot would send them (or a smooth stand-in)."""
    if episodes is None:
        rng = np.random.default_rng(2)
        image = rng.integers(0, 256, (3, 64, 80), dtype=np.uint8)
        base = 0.1 * rng.normal(size=policy.layout.dim)
        return [
            {"state": base + 0.05 * np.sin(t / 6), "images": {"cam_high": image}}
            for t in range(frames)
        ]
    from polymimic_data import EpisodeDataset, resolve_episodes

    found = resolve_episodes(episodes, embodiment=policy.embodiment)
    dataset = EpisodeDataset(
        found[:1], embodiment=policy.embodiment, cameras=policy.cameras,
        image_size=policy.image_size, history=1, horizon=policy.horizon,
        layout=policy.layout.name,
    )  # fmt: skip
    stream = []
    for index in range(min(frames, len(dataset))):
        sample = dataset[index]
        stream.append(
            {
                "state": sample["state"][-1].numpy(),
                "images": {"cam_high": sample[f"images.{policy.cameras[0]}"].numpy()},
            }
        )
    return stream


def smoothness(
    policy: TrainedPolicy, stream: list[dict], delay: int, steps: int, source: str
) -> None:
    jumps = {}
    for name in ("chunk", "rtc"):
        local = LocalPolicy(policy, CAMERA_MAP, seed=0)  # the same noise for both
        executor = make_executor(name, local, n_action_steps=steps, delay=delay)
        actions = np.stack([executor.act(o) for o in stream])
        jumps[name] = float(
            np.mean([np.linalg.norm(actions[t] - actions[t - 1]) for t in executor.switches])
        )
        inside = np.linalg.norm(np.diff(actions, axis=0), axis=1)
        emit(f"{name}_boundary_jump", jumps[name], "data units", delay=delay, n_action_steps=steps)
        emit(f"{name}_median_step", float(np.median(inside)), "data units", delay=delay)
    ratio = jumps["rtc"] / jumps["chunk"]
    emit("rtc_over_chunk_boundary_jump", ratio, "ratio", goal="< 1", observations=source)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--checkpoint", type=Path, help="serve this instead of a fresh run")
    parser.add_argument("--steps", type=int, default=300, help="training steps of the run")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=5.0, help="per throughput figure")
    parser.add_argument("--delay", type=int, default=3, help="inference delay in ticks")
    parser.add_argument("--threads", type=int, help="torch's intra-op threads (default: its own)")
    args = parser.parse_args()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        checkpoint = args.checkpoint or train_default_run(tmp, args.steps)
        episodes = None if args.checkpoint else tmp / "data"
        policy = load_policy(checkpoint)
        emit(
            "policy", policy.step or 0, "step", cameras=policy.cameras, horizon=policy.horizon,
            torch_threads=torch.get_num_threads(),
        )  # fmt: skip
        with RunningServer(PolicyServer(policy, camera_map=CAMERA_MAP, port=0)) as running:
            for cameras in (1, 4):
                latency(policy, running.url, args.requests, cameras)
        for max_batch in (1, 16):
            for clients in (1, 4, 16):
                throughput(policy, clients, max_batch, args.seconds)
        stream = replayed_episode(policy, episodes, frames=120)
        source = "an episode replayed" if episodes else "a smooth synthetic stream"
        smoothness(policy, stream, delay=args.delay, steps=policy.horizon // 2, source=source)


if __name__ == "__main__":
    main()
