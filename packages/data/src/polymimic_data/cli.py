"""`polymimic-data`: look at and check episode folders.

polymimic-data inspect ROOT [ROOT ...]
polymimic-data validate ROOT [ROOT ...] [--embodiment NAME] [--filter KEY=V1,V2 ...]
                                        [--episodes H1,H2] [--deep] [--workers N]
polymimic-data correct NAME ROOT [ROOT ...] [--dry-run]
polymimic-data import-lerobot SRC DEST [--episodes 0,3-7] [--cameras top,wrist]
                                       [--jpeg-quality 90] [--embodiment NAME]
polymimic-data view ROOT [ROOT ...] [--episode HASH ...] [--save FILE.rrd | --web [--port N]]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from polymimic_data import __version__
from polymimic_data.episodes.bad_values import NOT_DETECTED_REASON
from polymimic_data.episodes.checks import deep_problems
from polymimic_data.episodes.corrections import CORRECTIONS, apply_correction
from polymimic_data.episodes.resolver import (
    EPISODE,
    EpisodeValidationError,
    scan_episodes,
    walk_root,
)
from polymimic_data.episodes.viewer import SERVER_MEMORY
from polymimic_data.store.episode_attrs import read_group_attrs
from polymimic_data.store.episode_store import episode_hash


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def inspect(roots: Sequence[str]) -> int:
    """Print a table of the episodes under `roots`, then totals per embodiment; 1 if none."""
    rows, totals = [], defaultdict(lambda: [0, 0, 0.0])
    for root in roots:
        for path, kind in walk_root(Path(root)):
            if kind != EPISODE:
                rows.append([episode_hash(path), "?", "?", "?", "?", "?", kind])
                continue
            try:
                attrs = read_group_attrs(path)
            except (OSError, ValueError) as exc:
                rows.append([episode_hash(path), "?", "?", "?", "?", "?", f"unreadable: {exc}"])
                continue
            keys = sorted(p.name for p in path.iterdir() if (p / "zarr.json").exists())
            cameras = [k.removeprefix("images.") for k in keys if k.startswith("images.")]
            numeric = [k for k in keys if not k.startswith("images.") and k != "annotations"]
            frames, fps = attrs.get("total_frames", "?"), attrs.get("fps", "?")
            embodiment = str(attrs.get("embodiment", "?")).lower()
            rows.append(
                [
                    episode_hash(path),
                    embodiment,
                    str(frames),
                    str(fps),
                    ",".join(cameras),
                    str(len(numeric)),
                    str(attrs.get("task_name", "")),
                ]
            )
            if isinstance(frames, int) and isinstance(fps, int | float) and fps > 0:
                totals[embodiment][0] += 1
                totals[embodiment][1] += frames
                totals[embodiment][2] += frames / fps
    if not rows:
        print(f"no episodes under {list(roots)}", file=sys.stderr)
        return 1
    print(_table(rows, ["episode", "embodiment", "frames", "fps", "cameras", "keys", "task"]))
    print()
    summary = [[e, str(n), str(f), f"{s / 3600:.2f}"] for e, (n, f, s) in sorted(totals.items())]
    print(_table(summary, ["embodiment", "episodes", "frames", "hours"]))
    return 0


def validate(
    roots: Sequence[str],
    filters: dict[str, Any],
    episodes: list[str] | None,
    *,
    deep: bool,
    workers: int | None = None,
) -> int:
    """Check the episodes under `roots` that match `filters`; 1 if any is bad or none match.

    `episodes`: hashes that must all be present. `deep` also checks every numeric value and
    every JPEG, on `workers` threads. Every bad episode is listed, not only the first.
    """
    try:
        scan = scan_episodes(roots, filters=filters, episodes=episodes)
    except FileNotFoundError as exc:
        print(exc, file=sys.stderr)
        return 1
    for where, why in scan.warnings:
        print(f"warning: {where}: {why}", file=sys.stderr)
    problems = list(scan.problems)
    undetected: list[tuple[str, str]] = []  # allowed: listed, not failed
    for found in deep_problems(scan.episodes, workers=workers) if deep else []:
        (undetected if found.reason == NOT_DETECTED_REASON else problems).append(found.row())
    for where, why in undetected:
        print(f"not detected: {where}: {why}", file=sys.stderr)
    checked = " (values and JPEGs checked)" if deep else ""
    if undetected:
        affected = len({where for where, _ in undetected})
        checked += (
            f"; {affected} with frames where a hand was not detected (the 1e9 sentinel, "
            "allowed: the loader drops the samples that see them)"
        )
    if problems:
        print(EpisodeValidationError(problems).full_report(), file=sys.stderr)
        bad = len({where for where, _ in problems})
        print(f"{bad} bad of {len(scan.episodes) + len(scan.problems)} episodes{checked}")
        return 1
    if not scan.episodes:
        print(f"no episodes found under {list(roots)} matching {filters}", file=sys.stderr)
        return 1
    frames = sum(e.total_frames for e in scan.episodes)
    print(f"ok: {len(scan.episodes)} episodes, {frames} frames{checked}")
    return 0


def correct(name: str, roots: Sequence[str], *, dry_run: bool) -> int:
    """Non-zero when an episode had to be skipped; every other episode is still done."""
    counts: dict[str, int] = defaultdict(int)
    for root in roots:
        for result in apply_correction(root, name, dry_run=dry_run):
            counts[result.action] += 1
            if result.action in ("corrected", "would correct"):
                print(f"{result.action}: {result.episode}")
            elif result.action == "skipped":
                print(f"skipped: {result.path}: {result.why}", file=sys.stderr)
    print(", ".join(f"{n} {action}" for action, n in sorted(counts.items())) or "no episodes")
    return 1 if counts["skipped"] else 0


def _memory_limit(text: str) -> str:
    """The memory rerun's server may use: an amount with a unit (4GiB, 500MB) or a share (50%)."""
    # as rerun 0.41 parses it: 50%, 4GiB, 500kB, 1.5 GB (kB, not KB; no space before %)
    if not re.fullmatch(r"\d+(\.\d+)?(%|\s*([KMGT]iB|kB|[MGT]B|B))", text.strip()):
        raise argparse.ArgumentTypeError(f"expected e.g. 4GiB, 500MB or 50%, got {text!r}")
    return text.strip()


def _parse_filters(items: Sequence[str], embodiment: str | None) -> dict[str, Any]:
    filters: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"--filter takes KEY=VALUE or KEY=V1,V2, got {item!r}")
        values = value.split(",")
        filters[key] = values if len(values) > 1 else values[0]
    if embodiment:
        filters["embodiment"] = embodiment
    return filters


def import_lerobot_command(args: argparse.Namespace) -> int:
    """`polymimic-data import-lerobot`: 2, with the reason, if the dataset cannot be imported."""
    from polymimic_data.embodiments.declared import DeclarationError
    from polymimic_data.lerobot.importer import import_lerobot, parse_episodes
    from polymimic_data.lerobot.source import LeRobotFormatError

    try:
        report = import_lerobot(
            args.src,
            args.dest,
            episodes=parse_episodes(args.episodes) if args.episodes else None,
            cameras=args.cameras.split(",") if args.cameras else None,
            jpeg_quality=args.jpeg_quality,
            embodiment=args.embodiment,
        )
    except (LeRobotFormatError, DeclarationError, ValueError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    rate = report.frames / report.seconds if report.seconds else 0.0
    print(
        f"{len(report.written)} episodes written ({report.frames} frames, {rate:.0f} frames/s), "
        f"{len(report.skipped)} already there; embodiment {report.embodiment} in {args.dest}"
    )
    return 0


def view_command(args: argparse.Namespace) -> int:
    """`polymimic-data view`: 2, with the reason, before any episode is read if it cannot run."""
    from polymimic_data.episodes import MissingViewerError, require_rerun, viewer

    try:
        require_rerun()
    except MissingViewerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    found = {
        episode_hash(path): path
        for root in args.roots
        for path, kind in walk_root(Path(root))
        if kind == EPISODE
    }
    wanted = args.episode or sorted(found)
    missing = [h for h in wanted if h not in found]
    if missing or not found:
        known = ", ".join(sorted(found)[:10]) or "none"
        print(f"error: no episode {', '.join(missing) or ''} under {list(args.roots)} "
              f"(episodes there: {known})", file=sys.stderr)  # fmt: skip
        return 2
    paths = [found[h] for h in wanted]
    if args.save:
        if not args.save.parent.is_dir():
            print(f"error: --save: no folder {args.save.parent}", file=sys.stderr)
            return 2
        viewer.save_recording(paths, args.save)
        print(f"{len(paths)} episodes in {args.save} (open it with `rerun {args.save}`)")
        return 0
    if args.web:
        _stream, url = viewer.serve_recording(paths, port=args.port, grpc_port=args.grpc_port,
                                              memory_limit=args.memory_limit)  # fmt: skip
        print(f"{len(paths)} episodes at {url} (Ctrl-C stops)", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            return 0
    viewer.spawn_viewer(paths)
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The `polymimic-data` command line; returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="polymimic-data", description=(__doc__ or "").splitlines()[0]
    )
    parser.add_argument("--version", action="version", version=f"polymimic-data {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    p_inspect = sub.add_parser("inspect", help="a table of the episodes under ROOT, and totals")
    p_inspect.add_argument("roots", nargs="+", metavar="ROOT")
    p_validate = sub.add_parser(
        "validate", help="check episodes; non-zero exit lists every bad one"
    )
    p_validate.add_argument("roots", nargs="+", metavar="ROOT")
    p_validate.add_argument("--embodiment")
    p_validate.add_argument("--filter", action="append", default=[], metavar="KEY=V1,V2")
    p_validate.add_argument("--episodes", help="comma-separated hashes that must all be present")
    p_validate.add_argument(
        "--deep",
        action="store_true",
        help="also check every value (NaN, 1e9, quaternions) and decode every JPEG",
    )
    p_validate.add_argument("--workers", type=int, help="threads for --deep (default: one per CPU)")
    p_correct = sub.add_parser("correct", help="fix a known converter bug in episodes on disk")
    p_correct.add_argument("correction", choices=sorted(CORRECTIONS))
    p_correct.add_argument("roots", nargs="+", metavar="ROOT")
    p_correct.add_argument("--dry-run", action="store_true", help="say what would change only")
    p_import = sub.add_parser(
        "import-lerobot",
        help="convert a LeRobot v3 dataset into episodes (needs polymimic-data[lerobot])",
    )
    p_import.add_argument("src", metavar="SRC", help="the LeRobot dataset's root (meta/info.json)")
    p_import.add_argument("dest", metavar="DEST", help="folder for the episodes (re-run: resumes)")
    p_import.add_argument("--episodes", help="LeRobot episode indices, e.g. 0,3-7 (default all)")
    p_import.add_argument("--cameras", help="e.g. top,wrist (default every camera)")
    p_import.add_argument("--jpeg-quality", type=int, default=90)
    p_import.add_argument("--embodiment", help="the name to declare (default lerobot/<robot_type>)")
    p_view = sub.add_parser(
        "view", help="episodes in rerun's viewer, or saved as a recording (polymimic-data[viz])"
    )
    p_view.add_argument("roots", nargs="+", metavar="ROOT")
    every = "an episode to show (repeatable; default every one under ROOT)"
    p_view.add_argument("--episode", action="append", metavar="HASH", help=every)
    shown = p_view.add_mutually_exclusive_group()
    shown.add_argument("--save", type=Path, metavar="FILE.rrd", help="write a recording")
    shown.add_argument("--web", action="store_true", help="serve rerun's web viewer")
    p_view.add_argument("--port", type=int, default=9090, help="the web viewer's port")
    p_view.add_argument("--grpc-port", type=int, default=9876, help="the data's port (--web)")
    limit = (
        "--web: the memory rerun's server keeps the recording in (e.g. 4GiB or 50%%); past it "
        "the earliest frames are dropped for a browser that connects later"
    )
    p_view.add_argument("--memory-limit", type=_memory_limit, default=SERVER_MEMORY, help=limit)
    args = parser.parse_args(argv)
    if args.command == "view":
        return view_command(args)
    if args.command == "import-lerobot":
        return import_lerobot_command(args)
    if args.command == "inspect":
        return inspect(args.roots)
    if args.command == "correct":
        return correct(args.correction, args.roots, dry_run=args.dry_run)
    episodes = args.episodes.split(",") if args.episodes else None
    filters = _parse_filters(args.filter, args.embodiment)
    return validate(args.roots, filters, episodes, deep=args.deep, workers=args.workers)


if __name__ == "__main__":
    sys.exit(main())
