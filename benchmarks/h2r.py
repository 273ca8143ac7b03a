"""Human-to-robot transfer in simulation: does adding a person's demonstrations make the
robot succeed more often, at fewer robot demonstrations? (issue 29; DESIGN.md, "the closed loop")

    python benchmarks/h2r.py [--task aloha_ee/transfer_cube] [--robot-demos 5,10,25,50]
                             [--hands-demos 500] [--arms robot,cotrain] [--steps 3000]
                             [--eval-episodes 100] [--workdir DIR] [--tag NAME]
                             [--train-args OVERRIDE ...]

Records `max(--robot-demos)` robot demonstrations of `--task` (seeds 0 on) and
`--hands-demos` of a person's hands doing its twin (`hands/<task>`, seeds 100000 on, so no hands
episode shares its objects' placement with a robot one). The robot is `aloha_ee/<task>`,
driven by end-effector poses as the hands move (seen from the `top` camera);
`aloha_ego/<task>`, the same seen as eva sees, through a camera on its head at the person's
viewpoint (EgoMimic's setting: one viewpoint for both, the appearance gap kept);
`aloha_ego_masked/<task>`, that robot with its arms masked as the hands' are drawn
(EgoMimic's arm masking: the appearance gap closed); `aloha/<task>`, driven by joints,
whose actions share nothing with the hands' (the trunk and the image stem are what they
share); or `aloha_joints_ego_masked/<task>`, that joint-driven robot seen as
`aloha_ego_masked/<task>` is (its frames alike, only the action space apart: does a
person's data help across action spaces?). Then for each N in `--robot-demos` and each
arm it trains a policy and evaluates it on the robot in closed loop over `--eval-episodes`
held-out seeds (1000 on):

- `robot`: the first N robot demonstrations alone (data=sim_aloha_ee_transfer_cube, or
  sim_aloha_transfer_cube for the joints);
- `cotrain`: the same N with every hands demonstration (data=sim_cotrain_transfer_cube),
  one image stem shared by the robot's camera and the person's egocentric one;
- `pretrain`: a policy trained on the hands alone (once) gives its trunk and image stem to a
  policy fine-tuned on the N robot demonstrations (`model.pretrained`, by hash);
- `shuffled` (a control): as cotrain, but each hands episode's motions come from another
  hands episode (same images, wrong motions); a gain that survives this is not transfer;
- `hands` (the N = 0 control, cell `hands_n0`, once; `aloha_ego_masked/<task>` only): the
  policy trained on the hands alone (pretrain's run, trained once for both) drives the
  masked robot in the hands' own layout (`aloha_as_hands/<task>`: the robot's grippers
  observed as hands, the opening commanded from the predicted fingertips' distance), so
  nothing untrained stands between what it learnt and the robot.

Each cell prints one JSON line: its success rate with the 95% Wilson interval (standard and
strict, within 300 and 400 steps, steps to success beside the expert's), the seeds,
the demonstrations, the training steps and the wall times of training and evaluation, and
the command lines that made it. It is saved as `--results`/<task>/<cell>.json with the
commit and the machine; the sim README's table is generated from those files
(`python benchmarks/headline.py table`). Recordings and runs stay under `--workdir`, the
hands' at its top (every robot task shares them), the robot's under `<task>/` (e.g.
`aloha_ee_transfer_cube/`: its demonstrations, runs and rollouts). The folder is
reused: a rerun records nothing twice, trains no finished cell again and resumes an
interrupted one from its last checkpoint; a resumed cell's `train_s` counts only the resumed
part. Run cells one at a time on a small CPU (two heavy jobs on 2 cores each go about 5x
slower).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from cells import finished_run, run_logged, train_and_evaluate
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from headline import RESULTS, add_results_arguments, save

from polymimic_data import EpisodeReader, resolve_episodes
from polymimic_data.store import EpisodeWriter
from polymimic_sim import object_poses, record

emit = figure_printer("h2r")
HANDS_SEED = 100_000  # the hands' seeds: apart from the robot's (0 on) and the evaluation's
# per robot family: its data config, that config's dataset and the robot's camera.
# Cotraining takes sim_cotrain_transfer_cube's `robot` dataset filtered to the robot's task
# and given its camera: its own head either way (joints or poses)
ROBOTS = {
    "aloha_ee": ("sim_aloha_ee_transfer_cube", "aloha_ee", "top"),
    "aloha_ego": ("sim_aloha_ee_transfer_cube", "aloha_ee", "front_1"),  # eva's head camera
    "aloha_ego_masked": ("sim_aloha_ee_transfer_cube", "aloha_ee", "front_1"),  # arms masked
    "aloha": ("sim_aloha_transfer_cube", "aloha", "top"),
    "aloha_joints_ego_masked": ("sim_aloha_transfer_cube", "aloha", "front_1"),  # as masked
}
# the policy trained on the hands alone: pretrain's start and the N = 0 control, one run
HANDS_ALONE, HANDS_DATA = "hands_pretrain", "sim_hands_transfer_cube"
HANDS_OVERRIDES = ["+model.shared_stems.front_1=image"]  # the stem the robot's camera shares
ARMS = ("robot", "cotrain", "pretrain", "shuffled", "hands")
NUMERIC = ("left.obs_wrist_pose", "left.obs_keypoints", "right.obs_wrist_pose",
           "right.obs_keypoints", "obs_head_pose")  # fmt: skip


def robot_subset(all_demos: Path, n: int, dest: Path) -> Path:
    """A folder holding copies of the first `n` robot episodes (by seed)."""
    if dest.is_dir() and len(list(dest.glob("*.zarr"))) == n:
        return dest
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    for episode in sorted(all_demos.glob("*.zarr"))[:n]:
        shutil.copytree(episode, dest / episode.name)
    return dest


def shuffled_hands(hands: Path, dest: Path, seed: int = 0) -> Path:
    """Each hands episode's images with another's motions (a derangement), cut to fit.

    Written beside `dest` and renamed into place when whole, so an interrupted run remakes
    it rather than training on part of it."""
    if dest.is_dir():
        return dest
    partial = dest.with_name(dest.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    episodes = sorted(resolve_episodes(hands), key=lambda e: e.path.name)
    order = np.random.default_rng(seed).permutation(len(episodes))
    order = np.roll(order, 1)[np.argsort(order)]  # nobody keeps their own motions
    partial.mkdir(parents=True)
    for episode, other in zip(episodes, (episodes[i] for i in order), strict=True):
        mine, theirs = EpisodeReader(episode.path), EpisodeReader(other.path)
        frames = min(mine.attrs["total_frames"], theirs.attrs["total_frames"])
        arrays = {k: np.asarray(theirs.read_numeric(k))[:frames] for k in NUMERIC}
        jpegs = {"front_1": [mine.read_jpeg("front_1", f) for f in range(frames)]}
        attrs = mine.attrs
        metadata = {k: attrs[k] for k in ("embodiment_declaration", "seed", "sim_task")}
        metadata |= {"motions_of": other.path.name}
        writer = EpisodeWriter(
            partial / episode.path.name,
            embodiment=attrs["embodiment"],
            fps=attrs["fps"],
            task_name=attrs["task_name"],
            task_description=attrs["task_description"],
            metadata=metadata,
        )
        with writer:
            writer.extend(arrays, jpegs)
            writer.annotate(attrs["task_name"], 0, frames)
    partial.rename(dest)
    return dest


DISTANCE_BINS = (0.0, 0.02, 0.04, 0.06)  # metres; the last bin is open


def by_demo_distance(task: str, demos: int, outcomes: list[dict[str, Any]]) -> list[dict]:
    """Successes binned by how far each episode's objects start from the nearest of the first
    `demos` robot demonstrations' (seeds 0 on; the objects' xy, metres): a policy that
    generalises succeeds far from its demonstrations, one that memorises them only near."""

    def where(seed: int) -> np.ndarray:
        return object_poses(task, seed)[:, :2].reshape(-1)

    shown = np.stack([where(seed) for seed in range(demos)])
    rows = [{"from_m": lo, "to_m": hi, "successes": 0, "episodes": 0}
            for lo, hi in zip(DISTANCE_BINS, [*DISTANCE_BINS[1:], None], strict=True)]  # fmt: skip
    for outcome in outcomes:
        distance = float(np.linalg.norm(shown - where(outcome["seed"]), axis=1).min())
        row = rows[int(np.searchsorted(DISTANCE_BINS, distance, side="right")) - 1]
        row["episodes"] += 1
        row["successes"] += int(bool(outcome["success"]))
    return rows


def print_coverage(task: str, demos: int, summaries: list[Path]) -> None:
    """One JSON line per evaluation summary: its successes by distance from the demos."""
    for path in summaries:
        outcomes = json.loads(path.read_text())["outcomes"]
        rate = sum(bool(o["success"]) for o in outcomes) / len(outcomes)
        emit("success_by_demo_distance", rate, "fraction", summary=str(path), task=task,
             robot_demos=demos, bins=by_demo_distance(task, demos, outcomes))  # fmt: skip


def hands_alone_runs(work: Path, tag: str) -> Path:
    """The run folder of the policy trained on the hands alone (per --tag, like every cell)."""
    return work / "runs" / (HANDS_ALONE + (f"_{tag}" if tag else ""))


def pretrained_model(work: Path, camera: str, opts: argparse.Namespace) -> list[str]:
    """Train on the hands alone (once); the overrides that start a robot run from its trunk
    and image stem, the robot's `camera` read by that stem (a model config written under
    `work`, found through Hydra's search path)."""
    from polymimic_policies import pretrained_parts
    from polymimic_serve import load_policy

    runs = hands_alone_runs(work, opts.tag)
    checkpoint = runs / "checkpoints" / "last.ckpt"
    train = [
        sys.executable, "-m", "polymimic_train", f"name={runs.name}",
        f"data={HANDS_DATA}", f"data.roots=[{work / 'hands'}]",
        f"trainer.max_steps={opts.steps}", "trainer.enable_progress_bar=false",
        f"hydra.run.dir={runs}", *HANDS_OVERRIDES, *opts.train_args,
    ]  # fmt: skip
    log = work / f"{runs.name}.train.log"
    seconds = 0.0 if finished_run(runs, opts.steps) else run_logged(train, log)
    emit("hands_pretrain_s", seconds, "s", steps=opts.steps, command=" ".join(train))
    parts_dir = work / f"{runs.name}_parts"
    parts_dir.mkdir(exist_ok=True)
    saved = load_policy(checkpoint).policy.save_pretrained(parts_dir)  # type: ignore[attr-defined]
    parts = pretrained_parts(saved, ["trunk", "stems.image"])
    model_dir = work / "configs" / "model"
    model_dir.mkdir(parents=True, exist_ok=True)
    lines = ["defaults: [hpt_small, _self_]", f"shared_stems: {{{camera}: image}}", "pretrained:"]
    lines += [f"  {n}: {{path: {p['path']}, sha256: {p['sha256']}}}" for n, p in parts.items()]
    (model_dir / "h2r_pretrained.yaml").write_text("\n".join(lines) + "\n")
    return [f"hydra.searchpath=[file://{work / 'configs'}]", "model=h2r_pretrained"]


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--task", default="aloha_ee/transfer_cube")
    parser.add_argument("--robot-demos", default="5,10,25,50")
    parser.add_argument("--hands-demos", type=int, default=500)
    parser.add_argument("--arms", default="robot,cotrain")
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--eval-episodes", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--workdir", type=Path, default=Path("h2r-work"))
    more = "more overrides for every training run, e.g. model.d_model=64"
    parser.add_argument("--train-args", nargs="*", default=[], help=more)
    tag = (
        "a suffix for the cells' names (cotrain_n10_<tag>), so cells trained with other "
        "--train-args share a --workdir's recordings without reusing its finished runs"
    )
    parser.add_argument("--tag", default="", help=tag)
    add_results_arguments(parser, RESULTS / "h2r", "<task>/<cell>.json, one per cell")
    coverage = (
        "print the successes of these evaluation summaries (summary.json) by how far each "
        "episode's objects start from the nearest of --robot-demos N's, and exit"
    )
    parser.add_argument("--coverage", nargs="+", type=Path, metavar="SUMMARY", help=coverage)
    opts = parser.parse_args()
    counts = sorted({int(n) for n in opts.robot_demos.split(",")})
    if opts.coverage:
        if len(counts) != 1:
            parser.error(f"--coverage: one --robot-demos N (the demos trained on), got {counts}")
        missing = [str(p) for p in opts.coverage if not p.is_file()]
        if missing:
            parser.error(f"--coverage: no such evaluation summary: {', '.join(missing)}")
        print_coverage(opts.task, counts[0], opts.coverage)
        return
    arms = opts.arms.split(",")
    unknown = set(arms) - set(ARMS)
    if unknown:
        parser.error(f"--arms: {sorted(unknown)} are not arms; choose {', '.join(ARMS)}")
    if opts.tag and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]*", opts.tag):
        parser.error(f"--tag: letters, digits, _ and - (it names a run folder), got {opts.tag!r}")
    work = opts.workdir.resolve()
    family, _, name = opts.task.partition("/")
    if family not in ROBOTS:
        parser.error(f"--task: the robot the hands transfer to, aloha_ee/<task> (its poses, as "
                     f"the hands'), aloha_ego/<task> (the same, seeing from the hands' "
                     f"viewpoint), aloha_ego_masked/<task> (that, its arms masked as the "
                     f"hands'), aloha/<task> (its joints) or aloha_joints_ego_masked/<task> "
                     f"(joints, seen as the masked one), got {opts.task}")  # fmt: skip
    data, dataset, camera = ROBOTS[family]
    if "hands" in arms and family != "aloha_ego_masked":
        parser.error(f"--arms hands: the hands-trained policy drives the masked robot in "
                     f"the hands' layout; use --task aloha_ego_masked/{name}, not "
                     f"{opts.task}")  # fmt: skip
    # the robot's recordings, runs and rollouts per task; the hands' are shared
    robot_work = work / opts.task.replace("/", "_")

    start = time.perf_counter()
    report = record(opts.task, robot_work / "robot", episodes=max(counts))
    emit("robot_record_s", time.perf_counter() - start, "s", episodes=max(counts),
         written=len(report.written), kept=len(report.kept),
         expert_success=report.success_rate)  # fmt: skip
    hands = work / "hands"
    if {"cotrain", "pretrain", "shuffled", "hands"} & set(arms):
        start = time.perf_counter()
        report = record(f"hands/{name}", hands, episodes=opts.hands_demos, seed=HANDS_SEED)
        emit("hands_record_s", time.perf_counter() - start, "s", episodes=opts.hands_demos,
             written=len(report.written), kept=len(report.kept),
             expert_success=report.success_rate)  # fmt: skip
    # the robot's task (and the hands' twin of it) where the configs name transfer cube's
    tasks = [f"data.sim_task={opts.task}"]
    alone = [*tasks, f"data.datasets.{dataset}.cameras=[{camera}]"]
    shared = [f"+model.shared_stems.{camera}=image", "+model.shared_stems.front_1=image",
              *tasks, f"data.datasets.robot.filters.sim_task={opts.task}",
              f"data.datasets.robot.cameras=[{camera}]",
              f"data.datasets.hands.filters.sim_task=hands/{name}"]  # fmt: skip
    shared = list(dict.fromkeys(shared))  # the robot's camera may be front_1 itself
    pretrained = pretrained_model(work, camera, opts) if "pretrain" in arms else []
    for n in counts:
        robot = robot_subset(robot_work / "robot", n, robot_work / f"robot_{n}")
        cells = {
            "robot": ([robot], data, alone),
            "cotrain": ([robot, hands], "sim_cotrain_transfer_cube", shared),
            "pretrain": ([robot], data, alone + pretrained),
            "shuffled": ([robot, shuffled_hands(hands, work / "hands_shuffled")]
                         if "shuffled" in arms else [], "sim_cotrain_transfer_cube", shared),
            "hands": ([hands], HANDS_DATA, HANDS_OVERRIDES),
        }  # fmt: skip
        for arm in arms:
            if arm == "hands" and n != counts[0]:
                continue  # N = 0: one cell
            roots, data_config, extra = cells[arm]
            trained = 0 if arm == "hands" else n  # robot demonstrations trained on
            cell = f"{arm}_n{trained}" + (f"_{opts.tag}" if opts.tag else "")
            result = train_and_evaluate(
                cell, roots, data_config, robot_work, steps=opts.steps,
                task=f"aloha_as_hands/{name}" if arm == "hands" else opts.task,
                runs=hands_alone_runs(work, opts.tag) if arm == "hands" else None,
                episodes=opts.eval_episodes, workers=opts.workers,
                overrides=[*extra, *opts.train_args],
            )  # fmt: skip
            outcomes = json.loads((robot_work / "eval" / cell / "summary.json").read_text())
            coverage = by_demo_distance(opts.task, n, outcomes["outcomes"]) if trained else None
            # aloha_as_hands counts 30 Hz frames: 180 and 240 are ticks 300 and 400
            unit = {"step_unit": "30 Hz frames"} if arm == "hands" else {}
            line = emit("success_rate", result["successes"] / result["episodes"], "fraction",
                        cell=cell, task=opts.task, arm=arm, robot_demos=trained, **unit,
                        hands_demos=0 if arm == "robot" else opts.hands_demos, steps=opts.steps,
                        **result, success_by_demo_distance=coverage)  # fmt: skip
            if opts.results:
                save(line, opts.results / opts.task.replace("/", "_") / f"{cell}.json")


if __name__ == "__main__":
    main()
