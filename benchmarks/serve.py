"""The policy server against the policy itself, in one run: latency, throughput, smoothness,
and memory under abuse.

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
  time (`max_batch` 1) and with the server's default batching across clients
  (`DEFAULT_MAX_BATCH`, labelled `default`).
- Memory under abuse, the server alone in a process of its own: its peak RSS (VmHWM)
  over its RSS after warm-up while one client sends, request after request, the largest
  message the server accepts (exactly `max_message_bytes`, most of it image: a frame at the
  reader's pixel bound on the policy's camera, and ALOHA's four 1080x1920 cameras),
  against the message's size: goal <= 2; meanwhile another client's p99 round trip
  against its p99 before: goal <= 2. Also a message one byte over the cap (the server
  closes with 1009, its RSS does not grow) and the same client pipelining
  `--pipelined` largest messages without waiting for replies (no goal: what one
  connection can make the server hold).
- At chunk boundaries, the mean jump between consecutive executed actions with `rtc`
  against `chunk`, on the same policy and observations (an episode replayed), with an
  inference delay of `--delay` ticks: goal ratio < 1.
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np
import torch
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from train_process import run_train
from websockets.exceptions import ConnectionClosed
from websockets.sync.client import connect

from polymimic_serve import (
    DEFAULT_MAX_BATCH,
    LocalPolicy,
    PolicyClient,
    PolicyServer,
    RunningServer,
    TrainedPolicy,
    load_policy,
    make_executor,
    packb,
)

emit = figure_printer("serve")
CAMERA_MAP = {"cam_high": "front_1"}
ALOHA_CAMERAS = ["cam_high", "cam_low", "cam_left_wrist", "cam_right_wrist"]
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
    names = ALOHA_CAMERAS[:cameras]
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
        batching="default" if max_batch == DEFAULT_MAX_BATCH else "one at a time",
        mean_batch=round(float(np.mean(sizes)), 2),
    )


MIB = 1 << 20
MESSAGES = {
    "pixel_bound": "one frame at the reader's pixel bound on the policy's camera",
    "four_1080p": "ALOHA's four cameras at 1080x1920, one of them the policy's",
}


def serve_in_process(checkpoint: Path, threads: int | None, pipe: Connection) -> None:
    """(A process of its own) serve `checkpoint` as the benchmark does; say where, then wait."""
    if threads is not None:
        torch.set_num_threads(threads)
    policy = load_policy(checkpoint)
    server = PolicyServer(policy, camera_map=CAMERA_MAP, port=0)
    with RunningServer(server) as running:
        pipe.send(
            {
                "url": running.url,
                "max_message_bytes": server.limits.max_message_bytes,
                "max_image_side": server.reader.max_image_side,
                "max_image_pixels": server.reader.max_image_pixels,
                "state_dim": policy.layout.dim,
                "max_batch": server.max_batch,
            }
        )
        pipe.recv()  # anything: stop


class ServerProcess:
    """`with ServerProcess(checkpoint, threads) as served:` a PolicyServer alone in a process,
    its `info` (url, caps) and its memory from /proc: `rss()`, and `peak()` since `reset_peak()`
    (VmHWM, reset through clear_refs; where that is refused, VmRSS sampled every 2 ms)."""

    def __init__(self, checkpoint: Path, threads: int | None) -> None:
        context = multiprocessing.get_context("spawn")
        self.pipe, there = context.Pipe()
        self.process = context.Process(
            target=serve_in_process, args=(checkpoint, threads, there), daemon=True
        )
        self.info: dict[str, Any] = {}
        self.sampled, self.sampling = 0, threading.Event()
        self.peak_from = "VmHWM"

    def __enter__(self) -> ServerProcess:
        self.process.start()
        try:
            if not self.pipe.poll(300):
                raise TimeoutError("the server process did not start within 300 s")
            self.info = self.pipe.recv()
        except BaseException:
            self.process.kill()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.sampling.clear()
        with contextlib.suppress(OSError):  # it may have gone already
            self.pipe.send("stop")
        self.process.join(30)
        if self.process.is_alive():
            self.process.kill()

    def _status(self, key: str) -> int:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1]) * 1024  # kB
        raise KeyError(key)

    def rss(self) -> int:
        return self._status("VmRSS")

    def reset_peak(self) -> None:
        try:
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        except OSError:
            self.peak_from = "VmRSS sampled every 2 ms"
            self.sampled = self.rss()
            if not self.sampling.is_set():
                self.sampling.set()
                threading.Thread(target=self._sample, daemon=True).start()

    def _sample(self) -> None:
        while self.sampling.is_set() and self.process.is_alive():
            self.sampled = max(self.sampled, self.rss())
            time.sleep(0.002)

    def peak(self) -> int:
        return self.sampled if self.sampling.is_set() else self._status("VmHWM")


def largest_message(info: dict[str, Any], kind: str, extra: int = 0) -> bytes:
    """An observation the server accepts, packed to exactly its cap (+ `extra` bytes).

    Most of it image (see MESSAGES); what the frames leave is an ignored key's bytes.
    """
    cap, rng = info["max_message_bytes"] + extra, np.random.default_rng(4)
    if kind == "pixel_bound":
        width = info["max_image_side"]
        height = min(width, info["max_image_pixels"] // width, (cap - MIB // 2) // (3 * width))
        shapes = {"cam_high": (3, height, width)}
    else:
        shapes = dict.fromkeys(ALOHA_CAMERAS, (3, 1080, 1920))
    observation = {
        "state": 0.1 * rng.normal(size=info["state_dim"]),
        "images": {n: rng.integers(0, 256, s, dtype=np.uint8) for n, s in shapes.items()},
        "padding": np.zeros(0, np.uint8),
    }
    for _ in range(8):  # the padding's own header grows with it: a few rounds settle it
        size = len(packb(observation))
        if size == cap:
            return packb(observation)
        length = len(observation["padding"]) + cap - size
        if length < 0:
            raise ValueError(f"{kind}: {size} bytes without padding, over the cap {cap}")
        observation["padding"] = np.zeros(length, np.uint8)
    raise RuntimeError(f"{kind}: could not pack exactly {cap} bytes")


def send_largest(
    url: str, info: dict[str, Any], kind: str, pipelined: int, stop: Any, pipe: Connection
) -> None:
    """(A process of its own) the largest message, again and again until `stop` (each reply
    awaited), or `pipelined` of them sent before any reply is read.

    Reports to `pipe`: ("first", the error text or None) on the first reply, then (answered,
    refused, [the first error's text], [ms per round trip, or for all], message bytes)."""
    message = largest_message(info, kind)
    times: list[float] = []
    errors: list[str] = []
    answered = 0

    def answer(reply: str | bytes) -> None:
        nonlocal answered
        if isinstance(reply, str):
            errors.append(reply)
        else:
            answered += 1

    with connect(url, compression=None, max_size=None, proxy=None, open_timeout=60) as ws:
        ws.recv()  # the metadata
        try:
            if pipelined:
                start = time.perf_counter()
                for _ in range(pipelined):
                    ws.send(message)
                for _ in range(pipelined):
                    answer(ws.recv())
                times.append((time.perf_counter() - start) * 1e3)
            while not pipelined and not stop.is_set():
                start = time.perf_counter()
                ws.send(message)
                answer(ws.recv())
                times.append((time.perf_counter() - start) * 1e3)
                if len(times) == 1:
                    pipe.send(("first", errors[0] if errors else None))
        except ConnectionClosed:
            errors.append(f"the server closed the connection: {ws.close_code} {ws.close_reason}")
            if not times and not pipelined:
                pipe.send(("first", errors[-1]))
    pipe.send((answered, len(errors), errors[:1], times or [float("nan")], len(message)))


def round_trips(client: PolicyClient, observations: list[dict], requests: int) -> np.ndarray:
    """(requests, 3) ms: each round trip, the server's time on it, its batch's inference."""
    times = []
    for index in range(requests):
        start = time.perf_counter()
        reply = client.infer(observations[index % len(observations)])
        times.append(
            [
                (time.perf_counter() - start) * 1e3,
                reply["server_timing"]["infer_ms"],
                reply["policy_timing"]["infer_ms"],
            ]
        )
    return np.array(times)


def abuse_largest(
    policy: TrainedPolicy, checkpoint: Path, args: argparse.Namespace, kind: str
) -> None:
    """Peak RSS while one client sends the largest message; another client's p99 meanwhile."""
    rng = np.random.default_rng(5)
    observations = [robot_observation(policy, rng) for _ in range(8)]
    context = multiprocessing.get_context("spawn")
    with ServerProcess(checkpoint, args.threads) as served, PolicyClient(served.info["url"]) as c:
        round_trips(c, observations, 20)  # warm-up
        unloaded = round_trips(c, observations, args.requests)
        baseline = served.rss()
        served.reset_peak()
        stop, (here, there) = context.Event(), context.Pipe()
        sender = context.Process(
            target=send_largest, args=(served.info["url"], served.info, kind, 0, stop, there)
        )
        sender.start()
        if not here.poll(300):
            sender.kill()
            raise RuntimeError("the abusing client got no reply within 300 s")
        _, first_error = here.recv()
        loaded = round_trips(c, observations, args.requests)
        stop.set()
        answered, refused, errors, times, size = here.recv()
        sender.join(60)
        peak, after = served.peak(), served.rss()
    tag = {"message": kind, "message_mb": round(size / MIB, 2), "baseline_mb": baseline // MIB}
    emit(
        "abuse_largest_answered", answered, "messages", **tag, refused=refused,
        first_reply="an error: " + first_error[:200] if first_error else "actions",
        round_trip_p50_ms=round(float(np.percentile(times, 50)), 1), what=MESSAGES[kind],
    )  # fmt: skip
    if errors:
        emit("abuse_largest_refused", refused, "messages", **tag, error=errors[0][:300])
    emit("abuse_peak_rss_over_baseline_mb", (peak - baseline) / MIB, "MiB", **tag,
         peak_from=served.peak_from)  # fmt: skip
    emit("abuse_rss_after_over_baseline_mb", (after - baseline) / MIB, "MiB", **tag)
    ratio = (peak - baseline) / size
    emit("abuse_peak_over_message", ratio, "ratio", **tag, goal="<= 2", met=bool(ratio <= 2))
    for load, values in (("none", unloaded), ("largest messages", loaded)):
        for q in (50, 99):
            in_server, inference = np.percentile(values[:, 1:], q, axis=0)
            emit(f"abuse_other_client_p{q}_ms", float(np.percentile(values[:, 0], q)), "ms",
                 message=kind, load=load, requests=len(values),
                 in_server_ms=round(float(in_server), 1),
                 batch_inference_ms=round(float(inference), 1))  # fmt: skip
    ratio = float(np.percentile(loaded[:, 0], 99) / np.percentile(unloaded[:, 0], 99))
    emit("abuse_other_client_p99_loaded_over_unloaded", ratio, "ratio", message=kind,
         goal="<= 2", met=bool(ratio <= 2))  # fmt: skip


def abuse_over_cap(checkpoint: Path, args: argparse.Namespace, observation: dict) -> None:
    """A message one byte over the cap: closed with 1009, never held (RSS does not grow)."""
    with ServerProcess(checkpoint, args.threads) as served:
        with PolicyClient(served.info["url"]) as client:
            for _ in range(20):
                client.infer(observation)  # warm-up
        message = largest_message(served.info, "pixel_bound", extra=1)
        baseline = served.rss()
        served.reset_peak()
        start = time.perf_counter()
        with connect(served.info["url"], compression=None, max_size=None, proxy=None) as ws:
            ws.recv()  # the metadata
            try:
                ws.send(message)
                ws.recv(timeout=60)
                outcome = "answered"
            except (ConnectionClosed, OSError) as exc:
                outcome = type(exc).__name__
            code, reason = ws.close_code, ws.close_reason
        closed_ms = (time.perf_counter() - start) * 1e3
        time.sleep(0.5)
        peak = served.peak()
        with PolicyClient(served.info["url"]) as client:
            client.infer(observation)  # still serving others
    emit("over_cap_close_code", code or 0, "code", goal="1009", met=code == 1009,
         message_bytes=len(message), cap=served.info["max_message_bytes"], outcome=outcome,
         reason=(reason or "")[:120], closed_after_ms=round(closed_ms, 1))  # fmt: skip
    emit("over_cap_peak_rss_over_baseline_mb", (peak - baseline) / MIB, "MiB",
         message_mb=round(len(message) / MIB, 2), goal="~0 (never held)",
         met=bool(peak - baseline < 0.1 * len(message)), peak_from=served.peak_from)  # fmt: skip


def abuse_pipelined(checkpoint: Path, args: argparse.Namespace, observation: dict) -> None:
    """One connection sending `--pipelined` largest messages before reading any reply."""
    context = multiprocessing.get_context("spawn")
    with ServerProcess(checkpoint, args.threads) as served:
        with PolicyClient(served.info["url"]) as client:
            for _ in range(20):
                client.infer(observation)  # warm-up
        baseline = served.rss()
        served.reset_peak()
        here, there = context.Pipe()
        sender = context.Process(
            target=send_largest,
            args=(served.info["url"], served.info, "pixel_bound", args.pipelined, None, there),
        )
        sender.start()
        if not here.poll(600):
            sender.kill()
            raise RuntimeError("the pipelining client got no replies within 600 s")
        answered, refused, errors, (total_ms,), size = here.recv()
        sender.join(60)
        peak = served.peak()
    emit("pipelined_peak_over_message", (peak - baseline) / size, "ratio",
         messages=args.pipelined, answered=answered, refused=refused,
         message_mb=round(size / MIB, 2), peak_over_baseline_mb=round((peak - baseline) / MIB),
         total_s=round(total_ms / 1e3, 1), **({"error": errors[0][:200]} if errors else {}),
         goal="none (what one connection can make the server hold)")  # fmt: skip


def abuse(policy: TrainedPolicy, checkpoint: Path, args: argparse.Namespace) -> None:
    for kind in MESSAGES:
        abuse_largest(policy, checkpoint, args, kind)
    observation = robot_observation(policy, np.random.default_rng(6))
    abuse_over_cap(checkpoint, args, observation)
    if args.pipelined:
        abuse_pipelined(checkpoint, args, observation)


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
    parser.add_argument(
        "--pipelined", type=int, default=20, help="largest messages one client sends unanswered"
    )
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
        for max_batch in (1, DEFAULT_MAX_BATCH):
            for clients in (1, 4, 16):
                throughput(policy, clients, max_batch, args.seconds)
        abuse(policy, checkpoint, args)
        stream = replayed_episode(policy, episodes, frames=120)
        source = "an episode replayed" if episodes else "a smooth synthetic stream"
        smoothness(policy, stream, delay=args.delay, steps=policy.horizon // 2, source=source)


if __name__ == "__main__":
    main()
