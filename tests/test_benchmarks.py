"""The benchmarks run on any episode root, however small (figures are theirs to print)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from polymimic_data.synthetic import ensure_synthetic_episodes

ROOT = Path(__file__).resolve().parents[1]


def _lines(script: str, *args: str, timeout: int = 300) -> list[dict]:
    """Run benchmarks/`script` with `args`; its JSON lines (it must exit 0)."""
    command = [sys.executable, str(ROOT / "benchmarks" / script), *args]
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line]


def _figures(script: str, *args: str) -> dict[str, dict]:
    """The benchmark's figures by metric (the last line of each)."""
    return {line["metric"]: line for line in _lines(script, *args)}


def test_loader_benchmark_runs_on_a_root_smaller_than_its_batches(tmp_path: Path) -> None:
    root = ensure_synthetic_episodes(
        tmp_path, "eva_bimanual", episodes=2, frames=30, height=32, width=40, progress=False
    )
    lines = _lines(
        "loader.py", "--root", str(root), "--skip-resolve", "--samples", "20", "--batches", "8"
    )
    figures = {line["metric"]: line for line in lines}
    assert lines[0]["metric"] == "machine" and "core" in lines[0]["machine"]
    assert figures["ms_per_sample"]["samples"] == 20
    assert figures["threaded_over_floor"]["value"] > 0  # the cameras on threads, beside it
    assert figures["threaded_ms_per_sample"]["cameras"] == 3
    assert figures["dataloader_samples_per_s"]["value"] > 0
    assert figures["dataloader_samples_per_s"]["batch_size"] == 32  # 60 samples: 1 batch an epoch
    # where a DataLoader's time goes, beside it
    for metric in ("dataloader_over_limit", "work_limit_samples_per_s", "transport_samples_per_s",
                   "worker_ms_per_sample", "collate_ms_per_batch", "first_batch_s",
                   "worker_busy_ms_per_sample", "worker_collate_ms_per_batch",
                   "main_wait_ms_per_batch", "main_first_touch_ms_per_batch",
                   "worker_busy_fraction", "dataloader_one_by_one_samples_per_s",
                   "batch_read_over_one_by_one_samples_per_s",
                   "worker_one_by_one_ms_per_sample", "slot_decode_ms_per_frame",
                   "slot_decode_aligned_over_off_boundary", "parallel_floor_samples_per_s",
                   "dataloader_over_parallel_floor"):  # fmt: skip
        assert figures[metric]["value"] > 0, metric
    swept = [line["workers"] for line in lines if line["metric"] == "sweep_samples_per_s"]
    assert swept == [1, 2, 4]
    depths = [line["prefetch"] for line in lines if line["metric"] == "prefetch_samples_per_s"]
    assert depths == [2, 8]


def test_loader_benchmark_at_scale_prints_opens_from_the_pack_and_from_disk(tmp_path) -> None:
    args = ["--episodes", "40", "--data-root", str(tmp_path), "--samples", "100", "--batches", "2"]
    lines = _lines("loader.py", *args)
    figures = {line["metric"]: line for line in lines}
    opens = [line["source"] for line in lines if line["metric"] == "episode_open_ms"]
    assert sorted(opens) == ["disk", "numeric pack"]
    assert figures["pack_over_disk_open"]["value"] > 0
    read = {line["source"]: line for line in lines if line["metric"] == "episode_open_files_read"}
    cameras = read["numeric pack"]["cameras"]
    assert read["numeric pack"]["value"] == cameras  # each camera's JPEG, and nothing else
    assert read["disk"]["value"] > 3 * cameras  # metadata, chunks, shard indices besides
    assert figures["numeric_pack_build_s"]["episodes"] == 40
    frame_read = figures["frame_read_over_pread"]  # every frame of each camera's one shard
    assert frame_read["frames"] == 40 * cameras * 20 and frame_read["value"] > 0
    for metric in ("ms_per_sample_over_floor", "unpacked_ms_per_sample_over_floor"):
        assert figures[metric]["value"] > 0, metric
    aligned = figures["slot_decode_aligned_over_off_boundary"]  # the small frames' own
    assert (aligned["height"], aligned["width"]) == (128, 160) and aligned["value"] > 0


def test_remote_loader_benchmark_prints_its_ratio() -> None:
    tiny = ["--episodes", "2", "--frames", "20", "--height", "32", "--width", "40"]
    figures = _figures("remote_loader.py", *tiny, "--rounds", "1")
    assert figures["remote_over_local_first_epoch"]["value"] > 0
    assert figures["remote_first_epoch_ms_per_sample"]["samples"] == 40
    assert figures["sync_s"]["megabytes"] > 0 and figures["resync_s"]["value"] > 0


def test_lerobot_import_benchmark_prints_its_ratios() -> None:
    tiny = ["--episodes", "2", "--frames", "20", "--height", "48", "--width", "64"]
    figures = _figures("lerobot_import.py", *tiny, "--samples", "10")
    assert figures["import_frames_per_s"]["frames"] == 40
    assert figures["import_over_floor"]["value"] > 0
    assert figures["ms_per_sample"]["layout"] == "lerobot_converted"


def test_view_memory_benchmark_prints_its_peak_beside_the_episodes_size() -> None:
    tiny = ["--frames", "300", "--height", "24", "--width", "32"]
    figures = _figures("view_memory.py", *tiny)
    assert figures["view_peak_rss_mib"]["frames"] == 300
    assert figures["view_peak_rss_mib"]["value"] > figures["baseline_peak_rss_mib"]["value"] > 0
    assert figures["view_over_baseline_mib"]["recording_mib"] > 0
    assert figures["web_peak_rss_mib"]["value"] > figures["baseline_peak_rss_mib"]["value"]


def test_policy_benchmark_counts_every_model_config() -> None:
    lines = _lines("policies.py", "--skip-speed")
    trunks = {
        line["model"]: line["millions"] for line in lines if line["metric"] == "trunk_parameters"
    }
    counted = {line["model"] for line in lines if line["metric"] == "policy_parameters"}
    configs = {p.stem for p in (ROOT / "configs" / "model").glob("*.yaml")}
    assert counted == configs  # every model config, Pi at PaliGemma 3B from its config
    assert set(trunks) == {c for c in configs if not c.startswith("pi")}  # Pi has no trunk
    assert trunks["hpt_1b"] == pytest.approx(1000, rel=0.05)


def test_serve_benchmark_prints_its_ratios(trained_checkpoint: Path) -> None:
    quick = ["--checkpoint", str(trained_checkpoint), "--requests", "10", "--seconds", "0.3"]
    lines = _lines("serve.py", *quick, "--pipelined", "2")  # 20 by default: 14 s more
    ratios = [line for line in lines if line["metric"] == "round_trip_over_predict_p50"]
    assert [r["cameras_on_wire"] for r in ratios] == [1, 4] and all(r["value"] > 0 for r in ratios)
    rates = {(r["clients"], r["max_batch"]) for r in lines if r["metric"] == "requests_per_s"}
    assert rates == {(c, b) for c in (1, 4, 16) for b in (1, 8)}  # one at a time; the default
    assert any(line["metric"] == "rtc_over_chunk_boundary_jump" for line in lines)
    figures = {line["metric"]: line for line in lines}
    assert figures["over_cap_close_code"]["value"] == 1009  # a message over the cap: refused
    assert figures["pipelined_peak_over_message"]["answered"] == 2  # each pipelined one answered
    largest = [line["message"] for line in lines if line["metric"] == "abuse_peak_over_message"]
    assert sorted(largest) == ["four_1080p", "pixel_bound"]


def test_sim_benchmark_prints_its_ratios() -> None:
    tasks = "metaworld/button-press-v3,aloha/transfer_cube"
    lines = _lines("sim.py", "--tasks", tasks, "--episodes", "1", "--steps", "40", timeout=600)
    for task in ("metaworld/button-press-v3", "aloha/transfer_cube"):
        figures = {(f["metric"], f.get("workers")): f for f in lines if f["task"] == task}
        assert figures[("expert_success_rate", None)]["value"] == 1.0
        assert figures[("record_frames_per_s", None)]["value"] > 0
        assert figures[("record_workers_over_one", 2)]["value"] > 0
        assert figures[("render_default_over_cheap", None)]["value"] > 0
        assert figures[("rollout_over_bare_step_rate", 1)]["value"] > 0
        assert figures[("workers_over_one_step_rate", 2)]["value"] > 0


def _summary(path: Path, successes: dict[str, list[bool]]) -> Path:
    """A summary.json as `polymimic-sim evaluate` writes it: one task, or a suite of them."""
    from polymimic_sim import Outcome, summarise, summarise_suite

    parts = {
        task: summarise(
            task, "temporal_ensemble",
            [Outcome(seed=1000 + i, success=s, steps=10, total_return=0.0)
                            for i, s in enumerate(wins)],
            1.0, limit=10, registered_steps=10,
        ) | {"workers": 1, "videos": []}
        for task, wins in successes.items()
    }  # fmt: skip
    summary = summarise_suite("suite", parts) if len(parts) > 1 else parts.popitem()[1]
    path.write_text(json.dumps(summary))
    return path


def test_paired_benchmark_counts_gains_and_losses_seed_by_seed(tmp_path: Path) -> None:
    before = {"a": [False] * 9 + [True], "b": [True, True, False, False], "c": [True, False]}
    after = {"a": [True] * 9 + [False], "b": [True, False, True, False], "c": [True, False]}
    figures = {
        line["task"]: line
        for line in _lines("paired.py", str(_summary(tmp_path / "before.json", before)),
                           str(_summary(tmp_path / "after.json", after)))
    }  # fmt: skip
    assert (figures["a"]["gained"], figures["a"]["lost"], figures["a"]["agree"]) == (9, 1, 0)
    assert figures["a"]["value"] == pytest.approx(0.02148, abs=1e-5)  # 2 * P(X <= 1), X~B(10, .5)
    assert (figures["b"]["gained"], figures["b"]["lost"], figures["b"]["value"]) == (1, 1, 1.0)
    assert (figures["c"]["gained"], figures["c"]["lost"], figures["c"]["p"]) == (0, 0, 1.0)
    assert (figures["all"]["gained"], figures["all"]["lost"], figures["all"]["agree"]) == (10, 2, 4)
    assert figures["all"]["episodes"] == 16
    # a p too small for the rounded value keeps three significant figures
    many = _lines("paired.py", str(_summary(tmp_path / "3.json", {"a": [False] * 30})),
                  str(_summary(tmp_path / "4.json", {"a": [True] * 30})))  # fmt: skip
    assert many[-1]["value"] == 0.0 and many[-1]["p"] == pytest.approx(2 * 0.5**30, rel=1e-2)
    # one task's summary (no suite) compares the same way
    one = _lines("paired.py", str(_summary(tmp_path / "1.json", {"a": before["a"]})),
                 str(_summary(tmp_path / "2.json", {"a": after["a"]})))  # fmt: skip
    assert [(f["task"], f["gained"], f["lost"]) for f in one] == [("a", 9, 1), ("all", 9, 1)]


def test_paired_benchmark_refuses_evaluations_of_other_seeds(tmp_path: Path) -> None:
    before = _summary(tmp_path / "before.json", {"a": [True, False]})
    after = _summary(tmp_path / "after.json", {"a": [True, False, True]})
    command = [sys.executable, str(ROOT / "benchmarks" / "paired.py"), str(before), str(after)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert result.returncode != 0
    assert f"{after}: task a evaluated seeds [1000, 1001, 1002]" in result.stderr
    (tmp_path / "list.json").write_text("[]")
    command[-1] = str(tmp_path / "list.json")
    result = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert f"{tmp_path / 'list.json'}: not an evaluation's summary.json" in result.stderr
