"""How soon `train` answers: `--help`, each misconfiguration, and (optionally) the default run.

    python benchmarks/train_startup.py                 # --help and misconfigurations
    python benchmarks/train_startup.py --default-run   # also the default `train`, end to end

Prints one JSON line per figure (DESIGN.md). Each misconfiguration is timed from launch to
exit; the default run reports its training time (from its summary and log), samples/s,
data-wait fraction and val_action_error against the predict-the-mean baseline. First, what
a training process imports, in a fresh interpreter: compiled from source (as under
PYTHONDONTWRITEBYTECODE=1 in a venv that holds no bytecode, which uv installs by default)
against read from a warm bytecode cache, best of two each, CPU seconds (the processes'
own, user and system).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from train_process import run_train

emit = figure_printer("train_startup")

MISCONFIGURATIONS = {
    "resume_missing": ["resume=/does/not/exist"],
    "image_tokens_zero": ["model.image_tokens=0"],
    "heads_do_not_divide": ["model.d_model=30", "model.num_heads=4"],
    "batch_size_zero": ["data.batch_size=0"],
    "unknown_layout": ["data.datasets.eva_bimanual.layout=joints"],
    "unknown_camera": ["data.datasets.eva_bimanual.cameras=[top]"],
    "no_episodes_of_embodiment": ["data=episodes", "data.roots=[{empty}]"],
}


# What `train` imports before its first step (the app, Lightning, the policies' stems)
TRAIN_IMPORTS = (
    "import lightning.pytorch, torchvision.models, polymimic_data, polymimic_policies, "
    "polymimic_train.app, polymimic_train.lightning"
)


def import_cpu_s(cache: Path, write: bool) -> float:
    """CPU seconds of a fresh interpreter importing TRAIN_IMPORTS, its bytecode under `cache`
    (read, and written if `write`): an empty `cache` not written is a compile from source."""
    env = os.environ | {"PYTHONPYCACHEPREFIX": str(cache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    if not write:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run([sys.executable, "-c", TRAIN_IMPORTS], env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def import_figures(tmp: Path) -> None:
    empty, warm = tmp / "pycache-empty", tmp / "pycache-warm"
    source = min(import_cpu_s(empty, write=False) for _ in range(2))
    import_cpu_s(warm, write=True)  # fills the cache
    cached = min(import_cpu_s(warm, write=True) for _ in range(2))
    emit("train_imports_cpu_s_from_source", source, "s")
    emit("train_imports_cpu_s_cached", cached, "s")
    emit("train_imports_from_source_over_cached", source / cached, "ratio",
         note="what PYTHONDONTWRITEBYTECODE=1 costs each process; .ci/run unsets it")  # fmt: skip


def startup_figures(tmp: Path) -> None:
    seconds, result = run_train(tmp, "--help")
    assert result.returncode == 0, result.stderr
    emit("help_s", seconds, "s", goal="< 5")
    empty = tmp / "empty"
    empty.mkdir()
    for name, overrides in MISCONFIGURATIONS.items():
        args = [o.format(empty=empty) for o in overrides]
        seconds, result = run_train(tmp, *args)
        assert result.returncode != 0, f"{name} did not fail"
        error = [line for line in result.stderr.splitlines() if "error" in line.lower()][-1:]
        emit(f"fail_s_{name}", seconds, "s", goal="< 10", error=error[0][:160] if error else "")


def default_run_figures(tmp: Path) -> None:
    seconds, result = run_train(tmp, "trainer.enable_progress_bar=false")
    assert result.returncode == 0, result.stderr[-3000:]
    (summary_path,) = (tmp / "runs").rglob("summary.json")
    summary = json.loads(summary_path.read_text())
    emit("default_run_wall_s", seconds, "s", note="data generation, preparation, training")
    emit("default_run_train_s", summary["train_s"], "s", goal="<= 180 on 2 CPU cores")
    emit("default_run_samples_per_s", summary["samples_per_s"], "samples/s")
    emit("default_run_data_wait_fraction", summary["data_wait_fraction"], "fraction")
    ratio = summary["val_action_error"] / summary["baseline_action_error"]
    emit("default_run_error_over_baseline", ratio, "ratio", goal="<= 0.5")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--default-run", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="polymimic-bench-") as tmp_name:
        tmp = Path(tmp_name)
        import_figures(tmp)
        startup_figures(tmp)
        if args.default_run:
            default_run_figures(tmp / "default")


if __name__ == "__main__":
    main()
