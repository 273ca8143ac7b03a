"""Two evaluations of the same seeds compared seed by seed: gained, lost, exact McNemar p.

    python benchmarks/paired.py BEFORE/summary.json AFTER/summary.json

Each argument is the `summary.json` that `polymimic-sim evaluate` writes (one task, or a
suite with its tasks under `tasks`). Episodes are paired by task and seed, so both must
have evaluated the same seeds of the same tasks (anything else is an error naming the file
and task). One JSON line per task, then one for all of them: `gained` (episodes that failed
in BEFORE and succeeded in AFTER), `lost` (the other way), the pairs that agree, and the
two-sided exact McNemar test's p (a binomial test of the discordant pairs against a half):
totals whose intervals overlap can still differ, seed by seed, beyond chance.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from scipy.stats import binomtest

emit = figure_printer("paired")


def outcomes(path: Path) -> dict[str, dict[int, bool]]:
    """{task: {seed: success}} from an evaluation's summary.json."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"{path}: not a readable summary.json ({error})") from None
    tasks = summary.get("tasks") or {summary.get("task", str(path)): summary}
    by_task: dict[str, dict[int, bool]] = {}
    for name, task in tasks.items():
        if "outcomes" not in task:
            raise SystemExit(f"{path}: task {name} has no 'outcomes' (per-seed results)")
        by_task[name] = {int(o["seed"]): bool(o["success"]) for o in task["outcomes"]}
    return by_task


def compare(before: dict[int, bool], after: dict[int, bool]) -> dict[str, Any]:
    """gained, lost, agreeing pairs and the exact McNemar p of one task's paired seeds."""
    gained = sum(not before[seed] and after[seed] for seed in before)
    lost = sum(before[seed] and not after[seed] for seed in before)
    p = binomtest(gained, gained + lost).pvalue if gained + lost else 1.0
    return {"gained": gained, "lost": lost, "agree": len(before) - gained - lost, "p": p}


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
    total = {"gained": 0, "lost": 0, "agree": 0}
    for task in before:
        result = compare(before[task], after[task])
        emit("mcnemar_p", result.pop("p"), "p", task=task, episodes=len(before[task]), **result)
        total = {key: total[key] + result[key] for key in total}
    episodes = sum(map(len, before.values()))
    discordant = total["gained"] + total["lost"]
    p = binomtest(total["gained"], discordant).pvalue if discordant else 1.0
    emit("mcnemar_p", p, "p", task="all", episodes=episodes, **total)


if __name__ == "__main__":
    main()
