"""A gate on closed-loop success: fails when a freshly trained policy stops doing its task.

    python benchmarks/gate_sim.py [--seed 0] [--runs 1] [--plant NAME] [--workdir DIR]

Every offline test passes when a change forgets to undo the action normalisation or feeds
the policy black frames; only a policy acting in its task shows it. From scratch each run:
`--demos` scripted demonstrations of MetaWorld's button press (seeds 0 on, 48x64), a small
HPT trained `--steps` steps from training seed `--seed`, and `--episodes` closed-loop
episodes on held-out seeds (1000 on). The run passes when the lower end of the success
rate's 95% Wilson interval is at least `--threshold`, which was set from clean runs (the sim
README has the measurements: clean passes and false alarms over training seeds, and the
planted regressions that fail).

Why button press: of the tasks with a goal placed by the seed, it learns fastest on a CPU
(every clean run so far: 30 of 30 from 400 steps at 48x64), and a gate run takes about
2.5 minutes on a 2-core CPU (recording 20 s, training 80 s, 30 episodes 40 s, start-up).
What it catches, measured: actions left normalised, state not normalised, black frames
(each run fails; the sim README has the figures). What it does not: images mirrored or in
BGR, and chunks a step late, leave button press at 30 of 30: the hand moves at
MetaWorld's top speed towards targets a few centimetres off, and the button is wide.

`--plant NAME` runs the same gate with a regression planted in the code under test (a
monkeypatch during evaluation, where a train-serve mismatch shows): the gate fails on
those it catches.
`--runs N` trains seeds `--seed` .. `--seed + N - 1` one after another (the false-alarm
rate: `--runs 20`). One JSON line per run, then one with the tally; the exit status is 1
when any run failed the gate.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import torch
from cells import finished_run
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run

emit = figure_printer("gate_sim")
TASK = "metaworld/button-press-v3"
IMAGE_SIZE = (48, 64)
EVAL_SEED = 1000


def _images_changed(
    change: Callable[[torch.Tensor], torch.Tensor],
) -> contextlib.AbstractContextManager[Any]:
    """Every image the policy is given, (B, 3, H, W) uint8, passed through `change`."""
    from polymimic_serve import TrainedPolicy

    original = TrainedPolicy.image_tensor

    def image_tensor(self: Any, camera: str, frames: Any, batched: bool = False) -> torch.Tensor:
        return change(original(self, camera, frames, batched)).contiguous()

    return mock.patch.object(TrainedPolicy, "image_tensor", image_tensor)


def _identity(method: str) -> contextlib.AbstractContextManager[Any]:
    from polymimic_data.samples import Normalizer

    def unchanged(self: Any, embodiment: str, values: torch.Tensor) -> torch.Tensor:
        return values

    return mock.patch.object(Normalizer, method, unchanged)


def _chunks_one_step_late() -> contextlib.AbstractContextManager[Any]:
    from polymimic_serve import TrainedPolicy

    original = TrainedPolicy.predict_batch

    def predict_batch(self: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        out = original(self, *args, **kwargs)
        chunk = out["actions"]  # (B, T, A): each chunk's step j is what training put at j + 1
        out["actions"] = np.concatenate([chunk[:, 1:], chunk[:, -1:]], axis=1)
        return out

    return mock.patch.object(TrainedPolicy, "predict_batch", predict_batch)


# Regressions a real change could make, planted in the evaluation's code path.
PLANTS: dict[str, tuple[str, Callable[[], contextlib.AbstractContextManager[Any]]]] = {
    "actions_normalised": (
        "the action chunk is not denormalised (the normaliser's inverse forgotten)",
        lambda: _identity("denormalize_actions"),
    ),
    "state_raw": (
        "the state reaches the model in the data's units (not normalised)",
        lambda: _identity("normalize_state"),
    ),
    "channels_swapped": (
        "images reach the model as BGR (trained on RGB)",
        lambda: _images_changed(lambda images: images.flip(1)),
    ),
    "image_mirrored": (
        "images reach the model mirrored left to right (a camera's orientation lost)",
        lambda: _images_changed(lambda images: images.flip(3)),
    ),
    "black_images": (
        "the camera's frames arrive black (a feed lost, a wrong key read as zeros)",
        lambda: _images_changed(torch.zeros_like),
    ),
    "actions_one_step_late": (
        "each chunk's actions are one step late (the action window off by one)",
        _chunks_one_step_late,
    ),
}


def train(demos: Path, run_dir: Path, seed: int, steps: int) -> dict[str, Any]:
    """A small HPT on the demonstrations, through the app, in this process."""
    from hydra import compose, initialize_config_module

    import polymimic_train

    overrides = [
        "name=gate_sim", f"seed={seed}", "data=sim_metaworld", f"data.roots=[{demos}]",
        f"data.image_size=[{IMAGE_SIZE[0]},{IMAGE_SIZE[1]}]", "data.num_workers=1",
        "data.video_episodes=0", f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}", "trainer.enable_progress_bar=false",
        f"paths.run_dir={run_dir}", f"paths.data_root={run_dir / 'data'}",
        f"paths.cache_dir={run_dir / 'cache'}",
    ]  # fmt: skip
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        cfg = compose("train", overrides=overrides)
    with contextlib.redirect_stdout(sys.stderr):  # stdout holds the figures alone
        return polymimic_train.run(cfg)


def gate_run(opts: argparse.Namespace, demos: Path, seed: int) -> dict[str, Any]:
    """Train from `seed`, evaluate (with the plant, if any): the run's figures."""
    from polymimic_sim import RolloutSettings, evaluate_checkpoint

    run_dir = opts.workdir / f"run-seed{seed}"
    start = time.perf_counter()
    if opts.reuse and finished_run(run_dir, opts.steps):
        summary = json.loads((run_dir / "summary.json").read_text())
    else:
        shutil.rmtree(run_dir, ignore_errors=True)
        summary = train(demos, run_dir, seed, opts.steps)
    train_s = time.perf_counter() - start
    settings = RolloutSettings(episodes=opts.episodes, seed=EVAL_SEED, workers=2, videos=0,
                               progress=False, expert_episodes=0)  # fmt: skip
    start = time.perf_counter()
    with PLANTS[opts.plant][1]() if opts.plant else contextlib.nullcontext():
        rollouts = evaluate_checkpoint(run_dir / "checkpoints" / "last.ckpt", TASK, settings)
    low, high = rollouts["success_rate_wilson95"]
    return {
        "seed": seed, "plant": opts.plant, "passed": low >= opts.threshold,
        "successes": rollouts["successes"],
        "episodes": opts.episodes, "wilson95": [round(low, 4), round(high, 4)],
        "threshold": opts.threshold, "mean_steps_to_success": rollouts["mean_steps_to_success"],
        "val_action_error": summary.get("val_action_error"), "train_s": round(train_s, 1),
        "eval_s": round(time.perf_counter() - start, 1),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--seed", type=int, default=0, help="the (first) training seed")
    parser.add_argument("--runs", type=int, default=1, help="training seeds, one after another")
    parser.add_argument("--plant", choices=sorted(PLANTS), help="a regression to plant")
    parser.add_argument("--demos", type=int, default=20)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--episodes", type=int, default=30)
    least = "the least lower end of the success rate's 95%% Wilson interval that passes"
    parser.add_argument("--threshold", type=float, default=0.75, help=least)
    parser.add_argument("--workdir", type=Path, help="kept (default: a temporary folder)")
    parser.add_argument("--reuse", action="store_true",
                        help="evaluate a run already trained in --workdir (e.g. each plant on "
                             "the same clean runs) instead of training it again")  # fmt: skip
    opts = parser.parse_args()
    if opts.runs < 1 or opts.demos < 1 or opts.steps < 1 or opts.episodes < 1:
        parser.error("--runs, --demos, --steps and --episodes: positive numbers")
    with contextlib.ExitStack() as stack:
        if opts.workdir is None:
            opts.workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gate-")))
        opts.workdir = opts.workdir.resolve()
        from polymimic_sim import record

        start = time.perf_counter()
        demos = opts.workdir / "demos"
        report = record(TASK, demos, episodes=opts.demos, image_size=IMAGE_SIZE, progress=False)
        emit("record_s", time.perf_counter() - start, "s", task=TASK, episodes=opts.demos,
             expert_success=report.success_rate)  # fmt: skip
        if opts.plant:
            print(f"planted: {opts.plant}: {PLANTS[opts.plant][0]}", file=sys.stderr)
        results = []
        for seed in range(opts.seed, opts.seed + opts.runs):
            result = gate_run(opts, demos, seed)
            results.append(result)
            emit("success_rate", result["successes"] / result["episodes"], "fraction", **result)
        passed = sum(r["passed"] for r in results)
        emit("passed", passed, "runs", runs=len(results), plant=opts.plant,
             threshold=opts.threshold, seeds=[opts.seed, opts.seed + opts.runs - 1])  # fmt: skip
    for r in results:
        if not r["passed"]:
            print(f"gate-sim FAILED (seed {r['seed']}): {r['successes']}/{r['episodes']} "
                  f"succeeded in {TASK}; the 95% interval's lower end {r['wilson95'][0]:.2f} "
                  f"is below {opts.threshold}", file=sys.stderr)  # fmt: skip
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
