"""`polymimic-serve CHECKPOINT_OR_EXPORT`: serve a trained policy to robot runtimes."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import os
import signal
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING

from polymimic_serve import __version__

if TYPE_CHECKING:
    from polymimic_serve.server import PolicyServer

logger = logging.getLogger("polymimic_serve")


def _count(text: str) -> int:
    """A positive count, written as an integer or as 5e9."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value >= 1 and value == int(value)):
        raise argparse.ArgumentTypeError(f"a positive integer such as 5e9, got {text!r}")
    return int(value)


def _parser() -> argparse.ArgumentParser:
    from polymimic_serve.checkpoints import DEFAULT_MAX_PARAMETERS
    from polymimic_serve.server import DEFAULT_MAX_BATCH

    parser = argparse.ArgumentParser(
        prog="polymimic-serve",
        description="Serve a trained policy on openpi's websocket protocol (msgpack-numpy, "
        "metadata on connect): openpi's robot runtimes and openpi-client drive it unchanged.",
        epilog="example: polymimic-serve runs/hpt_small-synthetic_eva/<run>/checkpoints/last.ckpt "
        "--camera-map cam_high=front_1",
    )
    parser.add_argument("checkpoint", help="a checkpoint of `train` (.ckpt) or an export folder")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8000, help="port (default 8000; 0: any free)")
    parser.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N (default cpu)")
    parser.add_argument("--embodiment", help="which embodiment, for a policy trained on several")
    parser.add_argument(
        "--camera-map",
        default="",
        metavar="ROBOT=POLICY,...",
        help="rename the robot's cameras to the policy's, e.g. cam_high=front_1",
    )
    parser.add_argument(
        "--state-key", default="state", help="the observation key of the state (default state)"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("POLYMIMIC_SERVE_API_KEY"),
        help="refuse connections without `Authorization: Api-Key <key>` "
        "(default: $POLYMIMIC_SERVE_API_KEY, else no key)",
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=DEFAULT_MAX_BATCH,
        help="run up to this many waiting requests of concurrent clients as one batch "
        f"(default {DEFAULT_MAX_BATCH}: batching across clients is the default; 1: one "
        "request at a time)",
    )
    parser.add_argument(
        "--max-message-mb",
        type=float,
        metavar="MB",
        help="refuse a message larger than this many MiB before reading it (default: room "
        "for max(4, the policy's cameras) 1080x1920 frames, plus 1 MiB)",
    )
    parser.add_argument(
        "--max-parameters",
        type=_count,
        default=DEFAULT_MAX_PARAMETERS,
        metavar="N",
        help="refuse a checkpoint whose policy has more parameters and buffers than this, "
        f"counted before anything is allocated (default {DEFAULT_MAX_PARAMETERS:,}; Pi on "
        "PaliGemma 3B has about 3.3e9); raise it for a real giant",
    )
    parser.add_argument(
        "--weights-dir",
        metavar="DIR",
        help="a folder of local weights the policy reads besides the checkpoint (Pi's "
        "PaliGemma config and tokenizer): every path the checkpoint names must lie inside "
        "the checkpoint's folder or this one",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the sampling noise")
    parser.add_argument(
        "--threads",
        type=int,
        help="torch's intra-op threads on a CPU (default: torch's choice; on a small CPU shared "
        "with the robot's own processes, fewer is often faster: measure with bench-serve)",
    )
    parser.add_argument("--version", action="version", version=f"polymimic-serve {__version__}")
    return parser


def _refuse(message: str) -> int:
    """Say what is wrong in one line on stderr; the exit status 2."""
    print(f"polymimic-serve: {' '.join(message.split())}", file=sys.stderr)
    return 2


def _check_device(device: str) -> None:
    """ValueError naming --device if torch cannot use it here (before any loading)."""
    import torch

    try:
        chosen = torch.device(device)
    except (RuntimeError, ValueError) as exc:
        raise ValueError(f"--device: {device!r} is not a device ({exc})") from None
    if chosen.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (chosen.index or 0) >= count:
            raise ValueError(f"--device {device}: this machine has {count} CUDA device(s)")


def main(argv: list[str] | None = None) -> int:
    """The command line entry point."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    from polymimic_serve.checkpoints import CheckpointError
    from polymimic_serve.observations import parse_camera_map
    from polymimic_serve.server import PolicyServer
    from polymimic_serve.trained_policy import load_policy

    try:
        camera_map = parse_camera_map(args.camera_map)
        if args.max_batch < 1:
            raise ValueError(f"--max-batch: a positive integer, got {args.max_batch}")
        max_message_bytes = None
        if args.max_message_mb is not None:
            if not (math.isfinite(args.max_message_mb) and args.max_message_mb > 0):
                raise ValueError(f"--max-message-mb: a positive number, got {args.max_message_mb}")
            max_message_bytes = max(1, int(args.max_message_mb * 2**20))
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads: a positive integer, got {args.threads}")
            torch.set_num_threads(args.threads)
        _check_device(args.device)
        policy = load_policy(
            args.checkpoint,
            device=args.device,
            embodiment=args.embodiment,
            max_parameters=args.max_parameters,
            weights_dir=args.weights_dir,
        )
        server = PolicyServer(
            policy,
            camera_map=camera_map,
            state_key=args.state_key,
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            max_batch=args.max_batch,
            seed=args.seed,
            max_message_bytes=max_message_bytes,
        )
    except (CheckpointError, ValueError, FileNotFoundError) as exc:
        return _refuse(str(exc))
    except (MemoryError, torch.OutOfMemoryError) as exc:
        return _refuse(f"out of memory loading {args.checkpoint} on {args.device}: {exc}")
    meta = server.metadata

    def ready(running: PolicyServer) -> None:
        print(
            f"serving {meta['policy']} ({meta['embodiment']}, step {meta['step']}, cameras "
            f"{meta['cameras']}, chunks of {meta['chunk_length']}) on "
            f"ws://{running.host}:{running.port}",
            flush=True,
        )

    try:
        asyncio.run(_serve_until_stopped(server, ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # e.g. the port is taken
        print(f"polymimic-serve: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


STOP_SIGNALS = ("SIGINT", "SIGTERM")


async def _serve_until_stopped(server: PolicyServer, ready: Callable[[PolicyServer], None]) -> None:
    """Serve until SIGINT (Ctrl-C) or SIGTERM (a process manager's stop): a clean stop.

    Both are handled whatever the process inherited: started in the background by a
    script (`polymimic-serve ... &`), a process has SIGINT ignored, and Ctrl-C or `kill
    -INT` would otherwise not stop it at all.
    """
    loop = asyncio.get_running_loop()
    serving = asyncio.current_task()
    assert serving is not None
    for name in STOP_SIGNALS:
        with contextlib.suppress(AttributeError, NotImplementedError, RuntimeError):  # Windows
            loop.add_signal_handler(getattr(signal, name), serving.cancel)
    try:
        await server.serve(on_ready=ready)
    except asyncio.CancelledError:
        logger.info("stopped")


if __name__ == "__main__":
    sys.exit(main())
