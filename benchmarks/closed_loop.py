"""The headline closed-loop figures, each from a fresh recording and training (issue 30).

    python benchmarks/closed_loop.py --headline transfer_cube|insertion|mt10
                                     [--demos N] [--steps N] [--episodes N] [--workers 2]
                                     [--workdir DIR] [--results DIR | --no-results]
                                     [--train-args OVERRIDE ...] [--record-only]
                                     [--executor chunk|temporal_ensemble|rtc]

A headline is a task, the demonstrations recorded of it, a training budget and the held-out
seeds it is evaluated on, with the figure the field reports for it beside ours:

- `transfer_cube`: ALOHA's transfer cube from 50 scripted demonstrations (ACT ~90%);
- `insertion`: ALOHA's insertion from 50, seen through `top_fov45` (ACT ~50%);
- `mt10`: MetaWorld's MT10, one policy for its ten tasks told apart by the prompt, 50
  demonstrations of each (SmolVLA 68% on MT50, pi0 ~50%, Diffusion Policy ~10%), evaluated
  through ACT's temporal ensemble (the others through `chunk`; `--executor` overrides).

Each records its demonstrations (seeds 0 on), trains hpt_small through the app, evaluates
200 held-out episodes (seeds 1000 on; 20 of each task for a suite) and prints one JSON line:
standard and strict success with 95% Wilson intervals, success at the registered step limit
and at 400, steps to success beside the expert's, each task's demonstrations and its share of
their frames, the wall times of recording, training and evaluation, and the commands. The
line is saved as `--results`/<headline>.json with the commit and the machine, and the sim
README's table is generated from those files (`python benchmarks/headline.py table`).
`--workdir` is reused: a rerun records nothing twice and resumes an interrupted training from
its last checkpoint. Run one at a time on a small CPU: on 2 cores transfer cube takes about an
hour, insertion about an hour and a half, mt10 about two and a quarter (its 500
demonstrations record in about 6 minutes in 2 `--workers` processes, its 10,000 steps train
in about 90, and its 200 episodes take 25 minutes through the temporal ensemble, an
inference every tick, against 10 through `chunk`).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path
from typing import Any

from cells import timed_log, train_and_evaluate
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from headline import RESULTS, add_results_arguments, save
from hydra import compose, initialize_config_module

from polymimic_data import resolve_episodes
from polymimic_serve import DEFAULT_EXECUTOR, EXECUTORS
from polymimic_sim import expert_variant, record, suite_tasks
from polymimic_train import recorded_cameras

emit = figure_printer("closed_loop")


@dataclasses.dataclass(frozen=True)
class Headline:
    task: str
    data: str  # the data config
    demos: int  # of each task, for a suite
    steps: int
    episodes: int  # of each task, for a suite
    anchor: str  # what the field reports on it
    overrides: tuple[str, ...] = ()
    executor: str = DEFAULT_EXECUTOR  # how its chunks are executed (polymimic-sim's --executor)


HEADLINES = {
    "transfer_cube": Headline(
        "aloha/transfer_cube", "sim_aloha_transfer_cube", 50, 7000, 200,
        "ACT ~90% (Zhao et al. 2023), LeRobot's ACT 87.6%",
    ),
    "insertion": Headline(
        "aloha/insertion", "sim_aloha_transfer_cube", 50, 7000, 200, "ACT ~50% (Zhao et al. 2023)",
        # the top camera narrowed from 78 to 45 degrees: the peg and socket twice as large,
        # every object in view (sim README, "Insertion through a narrowed view")
        ("data.sim_task=aloha/insertion", "data.datasets.aloha.cameras=[top_fov45]"),
    ),
    "mt10": Headline(
        "metaworld/mt10", "sim_metaworld_mt10", 50, 10000, 20,
        "MT50: SmolVLA 68%, pi0 ~50%, Diffusion Policy ~10%",
        # ACT's temporal ensemble: better than chunk here, worse on insertion (sim README,
        # "ACT's temporal ensemble on MT10"), so each headline names its own
        executor="temporal_ensemble",
    ),
}  # fmt: skip


def trained_cameras(data: str, overrides: list[str]) -> tuple[str, ...] | None:
    """The cameras data config `data` trains on with `overrides`: its demonstrations' cameras.

    Read from the config as the training run composes it (one place for a headline's view:
    e.g. mt10's narrowed corner4, or `--train-args` naming another); None where the task's
    own will do (polymimic_train.recorded_cameras).
    """
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        config = compose("train", overrides=[f"data={data}", *overrides])
    return recorded_cameras(config.data)


def record_resumed(
    task: str,
    demos_dir: Path,
    demos: int,
    workers: int,
    cameras: tuple[str, ...] | None = None,
    expert: str | None = None,
) -> tuple[Any, float]:
    """Record the demonstrations (those not there yet); the report, and the seconds every
    invocation spent recording them, summed (`record_log.json` beside the demonstrations,
    so a recording resumed after an interruption, or made ahead of the training, is counted
    whole). A resumed run simulates the expert's failed seeds again: they are never written.
    `expert`: record's (None: each task's default expert).
    """
    before = len(list(demos_dir.glob("*.zarr"))) if demos_dir.exists() else 0
    start = time.perf_counter()
    try:
        report = record(task, demos_dir, episodes=demos, workers=workers, cameras=cameras,
                        expert=expert)  # fmt: skip
    finally:  # an interrupted run's time counts too
        after = len(list(demos_dir.glob("*.zarr"))) if demos_dir.exists() else 0
        record_s = timed_log(demos_dir.parent / "record_log.json", time.perf_counter() - start,
                             workers=workers, written=after - before, kept=before)  # fmt: skip
    return report, record_s


def frames_by_task(demos_dir: Path) -> dict[str, dict[str, float]]:
    """Each recorded task's demonstrations, mean frames and share of all the frames over an
    even share (1/tasks): what a uniform shuffle trains each task at (a scripted reach is
    about half as long as a drawer-open, so it trains at about 0.6x; data.balance_by evens it).
    """
    frames: dict[str, list[int]] = {}
    for info in resolve_episodes(demos_dir):
        frames.setdefault(str(info.attrs["sim_task"]), []).append(info.total_frames)
    total = sum(sum(f) for f in frames.values())
    return {
        task: {
            "episodes": len(f),
            "mean_frames": round(sum(f) / len(f), 1),
            "share_over_even": round(sum(f) / total * len(frames), 3),
        }
        for task, f in sorted(frames.items())
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--headline", required=True, choices=sorted(HEADLINES))
    parser.add_argument("--demos", type=int, help="demonstrations (of each task of a suite)")
    parser.add_argument("--steps", type=int, help="training steps")
    parser.add_argument("--episodes", type=int, help="held-out episodes (of each task)")
    parser.add_argument("--workers", type=int, default=2,
                        help="simulator processes, recording and evaluating")  # fmt: skip
    parser.add_argument("--workdir", type=Path, default=Path("closed-loop-work"))
    parser.add_argument("--record-only", action="store_true",
                        help="record the demonstrations and stop (a later run trains on them, "
                        "its record_s counting this run's)")  # fmt: skip
    parser.add_argument("--expert", help="the scripted expert of every task (default: each "
                        "task's own; stock: as its source wrote it)")  # fmt: skip
    parser.add_argument("--executor", choices=sorted(EXECUTORS),
                        help="how the policy's chunks are executed in the evaluation "
                        "(default: the headline's own); recorded in the result")  # fmt: skip
    more = "more overrides for the training run, e.g. model=hpt_12m"
    parser.add_argument("--train-args", nargs="*", default=[], help=more)
    add_results_arguments(parser, RESULTS / "closed_loop", "<headline>.json")
    opts = parser.parse_args()
    spec = HEADLINES[opts.headline]
    given = {"demos": opts.demos, "steps": opts.steps, "episodes": opts.episodes}
    demos, steps, episodes = (getattr(spec, k) if v is None else v for k, v in given.items())
    for flag, value in (("--demos", demos), ("--steps", steps), ("--episodes", episodes)):
        if value < 1:
            parser.error(f"{flag}: at least 1, got {value}")
    work = opts.workdir.resolve() / opts.headline

    demos_dir = work / "demos"
    cameras = trained_cameras(spec.data, [*spec.overrides, *opts.train_args])
    report, record_s = record_resumed(spec.task, demos_dir, demos, opts.workers, cameras,
                                      opts.expert)  # fmt: skip
    experts = {task: expert_variant(task, opts.expert) for task in suite_tasks(spec.task)}
    shares = frames_by_task(demos_dir)  # now: an error here costs no training
    recorded = len(report.written) + len(report.kept)  # the expert's failures are not written
    if opts.record_only:
        print(f"{spec.task}: {recorded} demonstrations under {demos_dir} "
              f"(the expert {report.success_rate:.0%}), {record_s:.0f} s of recording")  # fmt: skip
        return
    result = train_and_evaluate(
        opts.headline, [demos_dir], spec.data, work, task=spec.task, steps=steps,
        episodes=episodes, workers=opts.workers, overrides=[*spec.overrides, *opts.train_args],
        executor=opts.executor or spec.executor,
    )  # fmt: skip
    line = emit(
        "success_rate", result["successes"] / result["episodes"], "fraction",
        headline=opts.headline, task=spec.task, demos=demos, demos_recorded=recorded,
        expert_success=report.success_rate, experts=experts, steps=steps, anchor=spec.anchor,
        record_s=round(record_s, 1), record_workers=opts.workers,
        demo_frames_by_task=shares, **result,
    )  # fmt: skip
    if opts.results:
        save(line, opts.results / f"{opts.headline}.json")


if __name__ == "__main__":
    main()
