"""`polymimic-sim record TASK DEST` and `polymimic-sim evaluate CHECKPOINT TASK`."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from polymimic_serve import DEFAULT_EXECUTOR, EXECUTORS
from polymimic_sim import __version__
from polymimic_sim.settings import RolloutSettings
from polymimic_sim.tasks.task_types import MissingExtraError, UnknownTaskError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="polymimic-sim", description="Simulated tasks: demonstrations and rollouts."
    )
    parser.add_argument("--version", action="version", version=f"polymimic-sim {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    rec = commands.add_parser("record", help="record scripted demonstrations as episodes")
    rec.add_argument("task", help="e.g. aloha/transfer_cube or metaworld/reach-v3")
    rec.add_argument("dest", type=Path, help="folder of episodes (created; resumable)")
    rec.add_argument("--episodes", type=int, default=50)
    rec.add_argument("--seed", type=int, default=0, help="the first episode's seed")
    rec.add_argument("--image-size", default="96x128", help="HEIGHTxWIDTH of every camera")
    rec.add_argument(
        "--cameras",
        help="comma-separated camera names (default: the task's); <camera>_fov<degrees> is "
        "that camera narrowed, e.g. corner4_fov40",
    )
    rec.add_argument(
        "--workers", type=int, default=1, help="simulator processes sharing the episodes"
    )
    rec.add_argument(
        "--expert",
        help="the scripted expert (default: the task's): stock (as its source wrote it; "
        "MetaWorld's reach and pick-place default to fingertips_to_goal, their goal corrected)",
    )
    ev = commands.add_parser("evaluate", help="closed-loop rollouts of a trained policy")
    ev.add_argument("checkpoint", help="a checkpoint of `train` or an export")
    ev.add_argument("task", help="e.g. aloha/transfer_cube, metaworld/reach-v3, metaworld/mt10")
    ev.set_defaults(**dataclasses.asdict(RolloutSettings()))  # one default, the settings'
    ev.add_argument("--episodes", type=int)
    ev.add_argument("--seed", type=int, help="the first seed (keep the demonstrations' apart)")
    ev.add_argument("--executor", choices=sorted(EXECUTORS), help=f"default {DEFAULT_EXECUTOR}")
    ev.add_argument("--n-action-steps", type=int, help="steps run per chunk (chunk, rtc)")
    ev.add_argument("--delay", type=int, help="simulated inference delay, ticks")
    ev.add_argument("--workers", type=int, help="simulator processes (batched policy)")
    ev.add_argument("--max-steps", type=int, help="ticks per episode at most (the task's limit)")
    ev.add_argument("--out", type=Path, help="write summary.json (and videos/) here")
    ev.add_argument("--videos", type=int, help="mp4s of the first N episodes (--out)")
    ev.add_argument(
        "--rerun",
        action="store_true",
        help="every episode into one rerun recording, --out/rollouts.rrd (polymimic-sim[viz])",
    )
    ev.add_argument(
        "--via-server", action="store_true", help="drive the policy through its websocket server"
    )
    ev.add_argument(
        "--realtime",
        action="store_true",
        help="step one simulator at wall-clock rate, inference beside it (delays measured)",
    )
    ev.add_argument(
        "--inference-slowdown",
        type=float,
        help="with --realtime: make each inference this many times slower (default 1)",
    )
    ev.add_argument(
        "--weights-dir", help="a Pi policy's PaliGemma folder, if not inside the checkpoint's"
    )
    commands.add_parser("tasks", help="list the tasks (with the extras installed)")
    return parser


def _record(args: argparse.Namespace) -> int:
    from polymimic_sim.recording import record
    from polymimic_sim.tasks.registry import parse_image_size

    cameras = args.cameras.split(",") if args.cameras else None
    report = record(
        args.task,
        args.dest,
        episodes=args.episodes,
        seed=args.seed,
        image_size=parse_image_size(args.image_size),
        cameras=cameras,
        workers=args.workers,
        expert=args.expert,
    )
    print(
        f"{report.task}: the expert succeeded in {sum(report.succeeded.values())} of "
        f"{len(report.succeeded)} episodes ({report.success_rate:.0%}); wrote "
        f"{len(report.written)}, kept {len(report.kept)} already there, under {args.dest}"
    )
    per_task = report.per_task()
    if len(per_task) > 1:
        print("  " + ", ".join(f"{name}: {rate:.0%}" for name, rate in per_task.items()))
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from polymimic_sim.rollouts.closed_loop import describe, evaluate_checkpoint
    from polymimic_sim.settings import RolloutSettings

    settings = RolloutSettings.parse(
        {name: getattr(args, name) for name in RolloutSettings.names() if hasattr(args, name)}
    )
    summary = evaluate_checkpoint(
        args.checkpoint, args.task, settings, out=args.out, weights_dir=args.weights_dir
    )
    print(describe(summary))
    print(json.dumps({k: v for k, v in summary.items() if k != "outcomes"}))
    return 0


def _tasks() -> int:
    from polymimic_sim.tasks.registry import aloha_tasks, metaworld_tasks

    for family, names in (("aloha", aloha_tasks), ("metaworld", metaworld_tasks)):
        try:
            print("\n".join(names()))
        except MissingExtraError:
            print(f"{family}/...: install polymimic-sim[{family}] to list these", file=sys.stderr)
    return 0


def main(argv: list[str] | None = None) -> int:
    """The command line entry point."""
    args = _parser().parse_args(argv)

    try:
        if args.command == "record":
            return _record(args)
        if args.command == "evaluate":
            return _evaluate(args)
        return _tasks()
    except (UnknownTaskError, MissingExtraError, ValueError, FileNotFoundError) as exc:
        print(f"polymimic-sim: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
