"""`polymimic-serve CHECKPOINT_OR_EXPORT`: serve a trained policy to robot runtimes."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

from polymimic_serve import __version__


def _parser() -> argparse.ArgumentParser:
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
        default=1,
        help="run up to this many waiting requests of concurrent clients as one batch",
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


def main(argv: list[str] | None = None) -> int:
    """The command line entry point."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    import torch

    from polymimic_serve.observations import parse_camera_map
    from polymimic_serve.server import PolicyServer
    from polymimic_serve.trained_policy import load_policy

    try:
        camera_map = parse_camera_map(args.camera_map)
        if args.max_batch < 1:
            raise ValueError(f"--max-batch: a positive integer, got {args.max_batch}")
        if args.threads is not None:
            if args.threads < 1:
                raise ValueError(f"--threads: a positive integer, got {args.threads}")
            torch.set_num_threads(args.threads)
        policy = load_policy(args.checkpoint, device=args.device, embodiment=args.embodiment)
        server = PolicyServer(
            policy,
            camera_map=camera_map,
            state_key=args.state_key,
            host=args.host,
            port=args.port,
            api_key=args.api_key,
            max_batch=args.max_batch,
            seed=args.seed,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"polymimic-serve: {exc}", file=sys.stderr)
        return 2
    meta = server.metadata

    def ready(running: PolicyServer) -> None:
        print(
            f"serving {meta['policy']} ({meta['embodiment']}, step {meta['step']}, cameras "
            f"{meta['cameras']}, chunks of {meta['chunk_length']}) on "
            f"ws://{running.host}:{running.port}",
            flush=True,
        )

    try:
        asyncio.run(server.serve(on_ready=ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:  # e.g. the port is taken
        print(f"polymimic-serve: cannot serve on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
