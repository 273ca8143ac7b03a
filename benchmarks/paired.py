"""Two evaluations of the same seeds compared seed by seed: gained, lost, exact McNemar p.

    python benchmarks/paired.py BEFORE/summary.json AFTER/summary.json

Each argument is the `summary.json` that `polymimic-sim evaluate` writes (one task, or a
suite with its tasks under `tasks`). Episodes are paired by task and seed, so both must
have evaluated the same seeds of the same tasks (anything else is an error naming the file
and task). One JSON line per task, then one for all of them: `gained` (episodes that failed
in BEFORE and succeeded in AFTER), `lost` (the other way), the pairs that agree, and the
two-sided exact McNemar test's p (a binomial test of the discordant pairs against a half;
`value` rounded, `p` to three significant figures): totals whose intervals overlap can still
differ, seed by seed, beyond chance. Each task's p is its own test, not corrected for the
number of tasks; the last line pools the pairs. Needs scipy (the workspace's dev group).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from scipy.stats import binomtest

emit = figure_printer("paired")


def outcomes(path: Path) -> dict[str, dict[int, bool]]:
    """{task: {seed: success}} from an evaluation's summary.json."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"{path}: not a readable summary.json ({error})") from None
    if not isinstance(summary, dict) or "task" not in summary:
        raise SystemExit(f"{path}: not an evaluation's summary.json (an object with 'task')")
    tasks = summary.get("tasks") or {summary["task"]: summary}
    by_task: dict[str, dict[int, bool]] = {}
    for name, task in tasks.items():
        try:
            by_task[name] = {int(o["seed"]): bool(o["success"]) for o in task["outcomes"]}
        except (KeyError, TypeError, ValueError):
            raise SystemExit(
                f"{path}: task {name}: expected 'outcomes', a list of {{'seed', 'success'}}"
            ) from None
    return by_task


def mcnemar_p(gained: int, lost: int) -> float:
    """The two-sided exact McNemar p of `gained` against `lost` (1 where none differ)."""
    return float(binomtest(gained, gained + lost).pvalue) if gained + lost else 1.0


def emit_pairs(task: str, episodes: int, gained: int, lost: int) -> None:
    """One line: the pairs that changed, those that agree, and the test's p."""
    p = mcnemar_p(gained, lost)
    emit("mcnemar_p", p, "p", p=float(f"{p:.3g}"), task=task, episodes=episodes,
         gained=gained, lost=lost, agree=episodes - gained - lost)  # fmt: skip


def changed(before: dict[int, bool], after: dict[int, bool]) -> tuple[int, int]:
    """One task's seeds that failed before and succeed after (gained), and the other way."""
    gained = sum(not before[seed] and after[seed] for seed in before)
    return gained, sum(before[seed] and not after[seed] for seed in before)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("before", type=Path, help="the baseline's summary.json")
    parser.add_argument("after", type=Path, help="the other evaluation's summary.json")
    args = parser.parse_args()
    before, after = outcomes(args.before), outcomes(args.after)
    if before.keys() != after.keys():
        raise SystemExit(
            f"{args.after}: tasks {sorted(after)} differ from {args.before}'s {sorted(before)}"
        )
    for task in before:
        if before[task].keys() != after[task].keys():
            raise SystemExit(
                f"{args.after}: task {task} evaluated seeds {sorted(after[task])}, "
                f"not {args.before}'s {sorted(before[task])}"
            )
    gained = lost = 0
    for task in before:
        task_gained, task_lost = changed(before[task], after[task])
        emit_pairs(task, len(before[task]), task_gained, task_lost)
        gained, lost = gained + task_gained, lost + task_lost
    emit_pairs("all", sum(map(len, before.values())), gained, lost)


if __name__ == "__main__":
    main()
