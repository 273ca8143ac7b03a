"""One closed-loop cell, as the benchmarks that measure success rates run it: a training run
through the app, then rollouts of its last checkpoint through `polymimic-sim evaluate`, each
a subprocess with its output in a log (h2r.py, closed_loop.py and gate_sim.py share it).

A cell's run folder is reused: a finished run is evaluated again without training, an
interrupted one is resumed from its last checkpoint by the app (resume=auto).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from polymimic_serve import DEFAULT_EXECUTOR

EVAL_SEED = 1000  # held-out seeds start here; demonstrations are recorded from 0 on


def finished_run(run_dir: Path, steps: int) -> bool:
    """Whether the training run in `run_dir` finished (its `steps`, or exit naming both).

    An interrupted one is trained again: the app resumes it from its last checkpoint
    (resume=auto), so no half-trained cell is evaluated.
    """
    from polymimic_train import read_record

    record = read_record(run_dir)
    if record.get("state") != "finished":
        return False
    if record.get("steps") != steps:
        sys.exit(f"{run_dir} trained {record.get('steps')} steps, not --steps {steps}: "
                 "use another --workdir for another budget (a cell is its name)")  # fmt: skip
    return True


def run_logged(args: list[str], log: Path) -> float:
    """Seconds `args` took; its output in `log`; exits with it when it fails."""
    start = time.perf_counter()
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        result = subprocess.run(args, stdout=out, stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        sys.exit(f"{' '.join(args)} failed; see {log}")
    return time.perf_counter() - start


def logged_seconds(log_path: Path) -> float:
    """The seconds of every invocation in the JSON list at `log_path` (0 when there is none)."""
    log = json.loads(log_path.read_text()) if log_path.exists() else []
    return sum(entry["seconds"] for entry in log)


def timed_log(log_path: Path, seconds: float, **fields: Any) -> float:
    """Add one invocation's `seconds` (and `fields`) to the JSON list at `log_path`; the
    seconds of every invocation so far, summed.

    A step resumed after an interruption, or found already done, is then counted whole,
    not as the few seconds of the run that finished it.
    """
    from polymimic_data.store import write_json_atomic

    log = json.loads(log_path.read_text()) if log_path.exists() else []
    log.append({"seconds": round(seconds, 1), **fields})
    write_json_atomic(log_path, log)
    return logged_seconds(log_path)


def _model_choice(run_dir: Path) -> str | None:
    """The model config a run composed (`model=...`), from Hydra's record of its choices."""
    from omegaconf import OmegaConf

    hydra = run_dir / ".hydra" / "hydra.yaml"
    if not hydra.is_file():
        return None
    return OmegaConf.load(hydra).hydra.runtime.choices.get("model")


# a run's per-embodiment figures (its summary's `metrics`), by the key each is logged under
EMBODIMENT_FIGURES = {
    "val_action_error": re.compile(r"val/(.+)/action_error"),
    "val_baseline_action_error": re.compile(r"val/(.+)/baseline_action_error"),
    "train_flow_loss": re.compile(r"train/(.+)/flow_loss"),
}


def embodiment_figures(metrics: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each embodiment's own validation error, its mean-predicting baseline and its last
    training flow loss: a cotrained run's `val_action_error` is the mean over all of them,
    which says little of the robot's own."""
    found: dict[str, dict[str, float]] = {}
    for key, value in metrics.items():
        for figure, pattern in EMBODIMENT_FIGURES.items():
            match = pattern.fullmatch(key)
            if match:
                found.setdefault(match[1], {})[figure] = value
    return found


def train_and_evaluate(
    cell: str,
    roots: list[Path],
    data: str,
    work: Path,
    *,
    task: str,
    steps: int,
    episodes: int,
    workers: int,
    overrides: list[str],
    runs: Path | None = None,
    executor: str = DEFAULT_EXECUTOR,
) -> dict[str, Any]:
    """A training run named `cell` on `roots` (data config `data`, `overrides` after it),
    then `episodes` closed-loop episodes of `task` from seed EVAL_SEED on (per task, for a
    suite) through `executor` (polymimic-sim's --executor): the evaluation's figures, the
    wall times and both command lines.

    The run's folder is `runs` (default `work/runs/<cell>`): a run another cell also
    evaluates is trained once."""
    runs = runs or work / "runs" / cell
    train = [
        sys.executable, "-m", "polymimic_train", f"name={cell}", f"data={data}",
        f"data.roots=[{','.join(map(str, roots))}]", f"trainer.max_steps={steps}",
        "trainer.enable_progress_bar=false", f"hydra.run.dir={runs}", *overrides,
    ]  # fmt: skip
    checkpoint = runs / "checkpoints" / "last.ckpt"
    train_log = runs.parent / f"{runs.name}.train_log.json"  # beside the run: seconds spent
    if finished_run(runs, steps):  # trained before: its seconds as logged then (0 if never)
        train_s = logged_seconds(train_log)
    else:
        started, log = time.perf_counter(), work / f"{cell}.train.log"
        try:
            run_logged(train, log)
        finally:  # an interrupted run's seconds count too
            train_s = timed_log(train_log, time.perf_counter() - started, steps=steps)
        if not finished_run(runs, steps):  # exit 0 is not proof (a SIGTERM'd app once gave it)
            sys.exit(f"{runs}: the training run did not finish (see {log});"
                     " the same command resumes it")  # fmt: skip
    out = work / "eval" / (cell if executor == DEFAULT_EXECUTOR else f"{cell}-{executor}")
    evaluate = [
        str(Path(sys.executable).with_name("polymimic-sim")), "evaluate", str(checkpoint),
        task, "--episodes", str(episodes), "--seed", str(EVAL_SEED),
        "--workers", str(workers), "--videos", "2", "--out", str(out), "--executor", executor,
    ]  # fmt: skip
    eval_s = run_logged(evaluate, work / f"{out.name}.eval.log")
    summary = json.loads((out / "summary.json").read_text())
    trained = json.loads((runs / "summary.json").read_text())
    commit_file = runs / "git_commit.txt"  # the train app's: a run evaluated again keeps its own
    return {
        "model": _model_choice(runs),
        "trained_commit": commit_file.read_text().strip() if commit_file.is_file() else None,
        "val_action_error": trained.get("val_action_error"),
        "baseline_action_error": trained.get("baseline_action_error"),
        "by_embodiment": embodiment_figures(trained.get("metrics", {})),
        "executor": summary["executor"],
        "successes": summary["successes"],
        "episodes": summary["episodes"],
        "wilson95": summary["success_rate_wilson95"],
        "strict_successes": summary["strict_success"]["successes"],
        "strict_wilson95": summary["strict_success"]["wilson95"],
        # a suite's summary (metaworld/mt10) pools its tasks' counts and has each task's rate
        # instead of the step figures, which differ in meaning from task to task
        "success_at_steps": {
            n: r["successes"] for n, r in summary.get("success_at_steps", {}).items()
        },
        "mean_steps_to_success": summary.get("mean_steps_to_success"),
        "expert_mean_steps_to_success": summary.get("expert_mean_steps_to_success"),
        **{k: summary[k] for k in ("success_rate_per_task",) if k in summary},
        "seeds": [EVAL_SEED, EVAL_SEED + episodes - 1],
        "train_s": round(train_s, 1),
        "eval_s": round(eval_s, 1),
        "train_command": " ".join(train),
        "eval_command": " ".join(evaluate),
    }
