"""Remote-root benchmark: a first epoch from an object store (its sync included) against local.

    python benchmarks/remote_loader.py             # generated eva episodes, 3 cameras
    python benchmarks/remote_loader.py --episodes 2 --frames 20 --height 32 --width 40 --rounds 1

The store is moto's S3 server on 127.0.0.1 (polymimic_data.testing.S3TestServer: it needs
the `s3` extra and the test dependencies), holding the same generated episodes as the local
root. So the figures are the sync's own cost (listing, a request per object, atomic
placement, a Python server's pace) without a network: a store far away adds its transfer
time to `sync_s`.

Prints one JSON line per figure (DESIGN.md), each the median of `--rounds`:
`local_first_epoch_ms_per_sample` (resolve, then every sample once in a shuffled order, from
a fresh dataset), `remote_first_epoch_ms_per_sample` (the same after `sync_remote_episodes`
into an empty mirror, the sync counted), `remote_over_local_first_epoch` (the ratio of the
two), `sync_s` with `sync_mb_per_s`, and `resync_s` (a sync that finds the mirror up to
date: what every other rank on a node, and every later run of the job, pays).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_data import EpisodeDataset, resolve_episodes
from polymimic_data.store import sync_remote_episodes
from polymimic_data.synthetic import ensure_synthetic_episodes
from polymimic_data.testing import S3TestServer

emit = figure_printer("remote_loader")
CAMERAS = ("front_1", "left_wrist", "right_wrist")


def first_epoch_s(root: Path, seed: int) -> tuple[float, int]:
    """Seconds to resolve `root` and read every sample once, shuffled; and how many."""
    start = time.perf_counter()
    dataset = EpisodeDataset(
        resolve_episodes(root), embodiment="eva_bimanual", cameras=CAMERAS, history=2, horizon=16
    )
    for i in np.random.default_rng(seed).permutation(len(dataset)):
        dataset[int(i)]
    return time.perf_counter() - start, len(dataset)


def one_round(local: Path, url: str, mirror: Path, seed: int) -> dict[str, float]:
    local_s, samples = first_epoch_s(local, seed)
    start = time.perf_counter()
    sync_remote_episodes(url, mirror, progress=False)
    sync_s = time.perf_counter() - start
    epoch_s, _ = first_epoch_s(mirror, seed)
    start = time.perf_counter()
    sync_remote_episodes(url, mirror, progress=False)
    return {
        "local_ms": local_s / samples * 1e3,
        "remote_ms": (sync_s + epoch_s) / samples * 1e3,
        "sync_s": sync_s,
        "resync_s": time.perf_counter() - start,
        "samples": samples,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--episodes", type=int, default=12)
    parser.add_argument("--frames", type=int, default=100)
    parser.add_argument("--height", type=int, default=240)
    parser.add_argument("--width", type=int, default=320)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(1)
    with (
        tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp_name,
        S3TestServer.start() as server,
    ):
        tmp = Path(tmp_name)
        local = ensure_synthetic_episodes(
            tmp / "local",
            "eva_bimanual",
            episodes=args.episodes,
            frames=args.frames,
            height=args.height,
            width=args.width,
            progress=False,
        )
        url = "s3://bench/eva"
        server.upload(local, url)
        os.environ.update(server.env)  # the sync's client reads them, as a run's does
        mb = sum(p.stat().st_size for p in local.rglob("*") if p.is_file()) / 1e6
        rounds = [one_round(local, url, tmp / f"mirror-{r}", seed=r) for r in range(args.rounds)]
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    common = {
        "episodes": args.episodes,
        "samples": int(median["samples"]),
        "store": "moto@127.0.0.1",
    }
    emit("local_first_epoch_ms_per_sample", median["local_ms"], "ms", **common)
    emit("remote_first_epoch_ms_per_sample", median["remote_ms"], "ms", **common)
    emit(
        "remote_over_local_first_epoch", median["remote_ms"] / median["local_ms"], "ratio", **common
    )
    emit("sync_s", median["sync_s"], "s", megabytes=round(mb, 1), **common)
    emit("sync_mb_per_s", mb / median["sync_s"], "MB/s", **common)
    emit("resync_s", median["resync_s"], "s", **common)


if __name__ == "__main__":
    main()
