"""`polymimic-data view` on a long episode: its peak memory against the episode's size.

    python benchmarks/view_memory.py                       # a 10,000-frame aria episode
    python benchmarks/view_memory.py --frames 2000 --height 96 --width 128

Generates one human (aria) episode, then writes it to a rerun recording with `view --save`
in a child process, and in another child only imports what `view` imports and opens the
episode (the baseline: the interpreter, numpy, zarr, rerun). `view_over_baseline_mib` is
what viewing added at its peak, printed beside the episode's JPEG bytes and the
recording's size: viewing streams the episode in blocks, so the increment stays well
below the episode's size rather than growing with it. A third child serves it as `view
--web` does (`web_over_baseline_mib`, once every frame was sent): there rerun's server
keeps the whole recording in memory to serve it to each browser that connects, so that
figure grows with the recording (up to rerun's server memory limit). Prints one JSON line
per figure.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

from polymimic_data import EpisodeReader
from polymimic_data.synthetic import ensure_synthetic_episodes

emit = figure_printer("view_memory")

CHILD = """
import resource, sys
from pathlib import Path
import rerun  # noqa: F401  (what view imports, in both)
from polymimic_data import EpisodeReader
from polymimic_data.cli import main
episode, dest = Path(sys.argv[1]), sys.argv[2]
if dest == "-":
    EpisodeReader(episode).keys()
elif dest == "web":
    import socket
    from polymimic_data.episodes.viewer import serve_recording
    ports = []
    for _ in range(2):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            ports.append(s.getsockname()[1])
    stream, _ = serve_recording([episode], port=ports[0], grpc_port=ports[1], progress=False)
    stream.flush()
else:
    assert main(["view", str(episode.parent), "--save", dest]) == 0
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def peak_kib(episode: Path, dest: str) -> tuple[int, float]:
    """The child's peak resident memory (KiB) and its wall time."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", CHILD, str(episode), dest], check=True,
                          capture_output=True, text=True)  # fmt: skip
    return int(done.stdout.strip().splitlines()[-1]), time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--frames", type=int, default=10_000)
    parser.add_argument("--height", type=int, default=96)
    parser.add_argument("--width", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp_name:
        tmp = Path(tmp_name)
        start = time.perf_counter()
        root = ensure_synthetic_episodes(tmp / "data", "aria_bimanual", episodes=1,
                                         frames=args.frames, height=args.height,
                                         width=args.width, progress=False)  # fmt: skip
        episode = next(root.rglob("*.zarr"))
        emit("generate_s", time.perf_counter() - start, "s", frames=args.frames)
        reader = EpisodeReader(episode)
        jpeg_bytes = sum(len(b) for b in reader.read_jpegs("front_1", 0, reader.total_frames))
        baseline, _ = peak_kib(episode, "-")
        dest = tmp / "view.rrd"
        viewing, seconds = peak_kib(episode, str(dest))
        mib = 1024.0
        emit("baseline_peak_rss_mib", baseline / mib, "MiB")
        emit("view_peak_rss_mib", viewing / mib, "MiB", frames=reader.total_frames,
             image=f"{args.height}x{args.width}", seconds=round(seconds, 1))  # fmt: skip
        emit("view_over_baseline_mib", (viewing - baseline) / mib, "MiB",
             episode_jpeg_mib=round(jpeg_bytes / 2**20, 1),
             recording_mib=round(dest.stat().st_size / 2**20, 1))  # fmt: skip
        emit("view_frames_per_s", reader.total_frames / seconds, "frames/s")
        web, seconds = peak_kib(episode, "web")
        emit("web_peak_rss_mib", web / mib, "MiB", seconds=round(seconds, 1))
        emit("web_over_baseline_mib", (web - baseline) / mib, "MiB",
             recording_mib=round(dest.stat().st_size / 2**20, 1))  # fmt: skip


if __name__ == "__main__":
    main()
