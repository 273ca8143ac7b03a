"""Headline figures as files: each measured result is a JSON file under benchmarks/results/,
and the READMEs' tables of them are generated from those files, so a table cannot say what
no run measured (issue 30).

    python benchmarks/headline.py table [--check]      # rewrite (or check) the READMEs' tables
    python benchmarks/headline.py save LINES.jsonl --into DIR --commit SHA --command CMD
                                      [--metric success_rate] [--set KEY=VALUE ...]

A benchmark that measures a headline figure saves it itself (`save`: the printed line, with
the commit, the machine and the command that made it); `save` on the command line keeps the
lines a run printed before it saved its own. A README table sits between
`<!-- results:NAME -->` and `<!-- /results:NAME -->`; everything between is generated.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from polymimic_data.store import write_text_atomic

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def machine() -> str:
    """The machine in words: cores and CPU model, and the GPU where one is."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = re.findall(r"^model name\s*:\s*(.+)$", cpuinfo.read_text(), flags=re.MULTILINE)
        model = names[0].strip() if names else model
    words = f"{os.cpu_count()}-core CPU ({model})"
    if shutil.which("nvidia-smi"):
        query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
        gpus = subprocess.run(query, capture_output=True, text=True).stdout.split("\n")
        words += "".join(f", {gpu.strip()}" for gpu in gpus[:1] if gpu.strip())
    return words


def current_commit() -> str:
    """HEAD's commit, with `+dirty` when the checkout differs from it."""
    git = ["git", "-C", str(ROOT)]
    try:
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
        if head.returncode != 0:
            return "unknown"
        dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()  # fmt: skip
    except OSError:  # no git here
        return "unknown"
    return head.stdout.strip() + ("+dirty" if dirty else "")


# The commit a measuring process began at: a headline takes an hour or more, and the
# commit when it saves may be one made since. (Its training and evaluation processes load
# what the checkout holds when they start: keep the checkout at that commit, or measure from
# a worktree of it.)
COMMIT_AT_START = current_commit()


def save(line: dict[str, Any], dest: Path, *, commit: str | None = None,
         argv: list[str] | None = None) -> Path:  # fmt: skip
    """`line` (a benchmark's printed figure) as `dest`, with where and how it was measured.

    Written atomically: a reader never sees half a result. `commit` defaults to the one
    this process began at; `argv` to this process's, as `python benchmarks/<script> ...`."""
    if argv is None:
        script = Path(sys.argv[0]).resolve()
        shown = script.relative_to(ROOT) if script.is_relative_to(ROOT) else script
        argv = ["python", str(shown), *sys.argv[1:]]
    result = {
        **line,
        "commit": commit or COMMIT_AT_START,
        "machine": line.get("machine") or machine(),
        "saved_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "argv": argv,
    }
    return write_text_atomic(dest, json.dumps(result, indent=1, sort_keys=True) + "\n")


def add_results_arguments(parser: argparse.ArgumentParser, default: Path, where: str) -> None:
    """`--results DIR` (default `default`; `where` says the file's name under it) and
    `--no-results`, as every benchmark that saves a headline result takes them."""
    parser.add_argument("--results", type=Path, default=default,
                        help=f"where the result is saved, {where} (the READMEs' tables are "
                        "generated from them: headline.py table)")  # fmt: skip
    parser.add_argument("--no-results", dest="results", action="store_const", const=None,
                        help="save no result (a trial run)")  # fmt: skip


def load(folder: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every result under `folder`, by path."""
    found = []
    for path in sorted(folder.rglob("*.json")):
        try:
            found.append((path, json.loads(path.read_text())))
        except json.JSONDecodeError as error:
            raise SystemExit(f"{path}: not a JSON result ({error})") from None
    return found


def _require(path: Path, result: dict[str, Any], keys: Iterable[str]) -> None:
    missing = [key for key in keys if key not in result]
    if missing:
        raise SystemExit(f"{path}: a result without {missing} (written by an older benchmark?)")


def _percent(interval: list[float]) -> str:
    low, high = interval
    return f"{100 * low:.1f}%-{100 * high:.1f}%"


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.0f} min"


OUTCOME_KEYS = ("successes", "episodes", "wilson95", "strict_successes", "strict_wilson95",
                "success_at_steps", "mean_steps_to_success", "expert_mean_steps_to_success",
                "seeds", "train_s", "eval_s", "commit", "machine", "argv")  # fmt: skip
H2R_KEYS = ("cell", "task", "robot_demos", "hands_demos", "steps", *OUTCOME_KEYS)
CLOSED_LOOP_KEYS = ("headline", "task", "model", "demos", "steps", "anchor", "record_s",
                    *OUTCOME_KEYS)  # fmt: skip


def _outcome(r: dict[str, Any]) -> str:
    """Success and strict success with their intervals, within the task's registered limit
    (gym-aloha's 300 ticks; 180 frames for a person's 30 Hz), steps to success."""
    n, at_steps = r["episodes"], r["success_at_steps"]
    limit = min(at_steps, key=int) if at_steps else None  # the registered one, the shorter
    by_limit = f"{at_steps[limit]}/{n} by {limit}" if limit else "-"
    mean, expert = r["mean_steps_to_success"], r["expert_mean_steps_to_success"]
    shown = [f"{x:.1f}" if x is not None else "-" for x in (mean, expert)]
    return (
        f"**{r['successes']}/{n}** ({_percent(r['wilson95'])}) | "
        f"{r['strict_successes']}/{n} ({_percent(r['strict_wilson95'])}) | {by_limit} | "
        f"{shown[0]} ({shown[1]})"
    )


def _provenance(r: dict[str, Any]) -> str:
    """The seeds, the commit (and the training's, where a run trained before was evaluated
    at another) and machine, the command."""
    commit, trained = r["commit"][:7], (r.get("trained_commit") or r["commit"])[:7]
    at = commit if trained == commit else f"{commit} (trained at {trained})"
    return f"{r['seeds'][0]}-{r['seeds'][1]} | {at}, {r['machine']} | `{' '.join(r['argv'])}`"


OUTCOME_HEADER = (
    "success (95% Wilson) | strict | within the registered limit | steps to success (expert's)"
)


def _header(columns: str) -> list[str]:
    """A markdown table's header row for `columns` ("a | b | ..."), and its separator."""
    return [f"| {columns} |", "|" + "---|" * (columns.count("|") + 1)]


def h2r_table(results: list[tuple[Path, dict[str, Any]]]) -> str:
    """The human-to-robot cells, by task, robot demonstrations and cell name."""
    rows = _header(
        f"task | cell | robot / hands demos | steps | {OUTCOME_HEADER} | train / eval | seeds | "
        "commit, machine | command"
    )
    for path, r in results:
        _require(path, r, H2R_KEYS)
    ordered = sorted(results, key=lambda pr: (pr[1]["task"], pr[1]["robot_demos"], pr[1]["cell"]))
    for _, r in ordered:
        rows.append(
            f"| {r['task']} | {r['cell']} | {r['robot_demos']} / {r['hands_demos']} | "
            f"{r['steps']} | {_outcome(r)} | {_minutes(r['train_s'])} / "
            f"{_minutes(r['eval_s'])} | {_provenance(r)} |"
        )
    return "\n".join(rows)


H2R_ARMS = {"robot": "robot only", "cotrain": "robot + hands (cotrain)",
            "pretrain": "hands pretrain -> robot fine-tune",
            "shuffled": "shuffled hands (control)", "hands": "hands alone (N = 0)"}  # fmt: skip


def h2r_grid(results: list[tuple[Path, dict[str, Any]]]) -> str:
    """The issue's view of the same cells: per task, robot demonstrations by arm, each
    measured variant (the cell's tag: `shared`, `bs48`, a training seed) in its place."""
    for path, r in results:
        _require(path, r, ("arm", *H2R_KEYS))
    blocks = []
    for task in sorted({r["task"] for _, r in results}):
        cells = [r for _, r in results if r["task"] == task]
        arms = [arm for arm in H2R_ARMS if any(r["arm"] == arm for r in cells)]
        rows = [f"**{task}** (success, 95% Wilson, of {cells[0]['episodes']} held-out seeds; "
                "a variant's tag after it)", "", *_header(
                    "robot demos N | " + " | ".join(H2R_ARMS[a] for a in arms))]  # fmt: skip
        for n in sorted({r["robot_demos"] for r in cells}):
            entries = []
            for arm in arms:
                found = sorted((r for r in cells if r["arm"] == arm and r["robot_demos"] == n),
                               key=lambda r: r["cell"])  # fmt: skip
                entries.append("<br>".join(_grid_entry(r) for r in found) or "-")
            rows.append(f"| {n} | " + " | ".join(entries) + " |")
        blocks.append("\n".join(rows))
    return "\n\n".join(blocks) if blocks else "No human-to-robot cell recorded yet."


def _grid_entry(r: dict[str, Any]) -> str:
    low, high = r["wilson95"]
    tag = r["cell"].removeprefix(f"{r['arm']}_n{r['robot_demos']}").lstrip("_")
    return f"**{r['successes']}** ({100 * low:.0f}-{100 * high:.0f})" + (f" `{tag}`" if tag else "")


def _demos(r: dict[str, Any]) -> str:
    """The demonstrations, and the tasks whose expert was not the stock one (`experts`; a
    result without it predates the corrected experts: every one stock)."""
    from polymimic_sim import STOCK_EXPERT  # here: bench-data imports this file without sim

    experts = (r.get("experts") or {}).items()
    other = {task.removeprefix("metaworld/").removesuffix("-v3"): expert
             for task, expert in experts if expert != STOCK_EXPERT}  # fmt: skip
    by = "; ".join(f"{task}: {expert}" for task, expert in sorted(other.items()))
    return f"{r['demos']} ({by})" if by else str(r["demos"])


def _executor(r: dict[str, Any]) -> str:
    """How the evaluation executed the policy's chunks. A result without `executor` predates
    the key, when every evaluation ran through `chunk` (not whatever the default is now)."""
    return r.get("executor", "chunk")


def closed_loop_table(results: list[tuple[Path, dict[str, Any]]]) -> str:
    """The headline figures (closed_loop.py), one row each, with the field's beside them."""
    if not results:
        return (
            "No headline result recorded yet (`uv run nox -s bench-closed-loop -- --headline ...`)."
        )
    rows = _header(
        f"headline | task | model (executor) | demos (experts not stock) | training steps | "
        f"{OUTCOME_HEADER} | lowest task | the field's | record / train / eval | seeds | "
        "commit, machine | command"
    )
    for path, r in results:
        _require(path, r, CLOSED_LOOP_KEYS)
    for _, r in sorted(results, key=lambda pr: pr[1]["headline"]):
        per_task = r.get("success_rate_per_task") or {}
        lowest = min(per_task.items(), key=lambda kv: kv[1]) if per_task else None
        worst = f"{lowest[0]} {100 * lowest[1]:.0f}%" if lowest else "-"
        rows.append(
            f"| {r['headline']} | {r['task']} | {r['model']} ({_executor(r)}) | {_demos(r)} | "
            f"{r['steps']} | "
            f"{_outcome(r)} | {worst} | {r['anchor']} | {_minutes(r['record_s'])} / "
            f"{_minutes(r['train_s'])} / {_minutes(r['eval_s'])} | {_provenance(r)} |"
        )
    return "\n".join(rows)


# README table name -> (the README, the results' folder, the renderer)
TABLES: dict[str, tuple[Path, Path, Callable[[list[tuple[Path, dict[str, Any]]]], str]]] = {
    "h2r": (ROOT / "packages" / "sim" / "README.md", RESULTS / "h2r", h2r_table),
    "h2r_grid": (ROOT / "packages" / "sim" / "README.md", RESULTS / "h2r", h2r_grid),
    "closed_loop": (
        ROOT / "packages" / "sim" / "README.md",
        RESULTS / "closed_loop",
        closed_loop_table,
    ),
}


def render(readme: str, name: str, table: str) -> str:
    """`readme` with its `name` block replaced by `table`."""
    block = re.compile(rf"(<!-- results:{name} -->\n).*?(<!-- /results:{name} -->)", re.DOTALL)
    if not block.search(readme):
        raise SystemExit(f"no <!-- results:{name} --> ... <!-- /results:{name} --> block")
    return block.sub(lambda m: f"{m[1]}{table}\n{m[2]}", readme, count=1)


def tables(check: bool) -> int:
    """Rewrite each README's generated tables; with `check`, only say which are stale."""
    stale = []
    for name, (readme_path, folder, renderer) in TABLES.items():
        readme = readme_path.read_text()
        updated = render(readme, name, renderer(load(folder)))
        if updated != readme:
            stale.append(f"{readme_path.relative_to(ROOT)} ({name})")
            if not check:
                write_text_atomic(readme_path, updated)
    if check and stale:
        print(f"stale results tables: {stale}; run python benchmarks/headline.py table")
        return 1
    print(f"{'stale' if check else 'rewrote'}: {stale or 'none'}")
    return 0


def save_lines(lines: Path, into: Path, commit: str, metric: str, command: str,
               fields: dict[str, Any]) -> int:  # fmt: skip
    """Each `metric` line a run printed (with `fields` where it lacks them), saved as
    `<cell>.json` in `into`, `command` named as what made it."""
    saved, argv = 0, shlex.split(command)
    for number, text in enumerate(lines.read_text().splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError:
            raise SystemExit(f"{lines}:{number}: not a JSON line") from None
        if line.get("metric") != metric:
            continue
        if "cell" not in line:
            raise SystemExit(f"{lines}:{number}: a {metric} line without `cell`")
        line = fields | line
        print(save(line, into / f"{line['cell']}.json", commit=commit, argv=argv))
        saved += 1
    if not saved:
        raise SystemExit(f"{lines}: no {metric!r} lines")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    table = commands.add_parser("table", help="rewrite the READMEs' generated tables")
    table.add_argument("--check", action="store_true", help="fail if one is stale; write none")
    keep = commands.add_parser("save", help="save a run's printed lines as result files")
    keep.add_argument("lines", type=Path)
    keep.add_argument("--into", type=Path, required=True)
    keep.add_argument("--commit", required=True, help="the commit the run measured")
    keep.add_argument("--metric", default="success_rate")
    keep.add_argument("--command", required=True, help="the command that printed the lines")
    keep.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                      help="fields the lines lack (VALUE as JSON, else a string)")  # fmt: skip
    opts = parser.parse_args()
    if opts.command == "table":
        return tables(opts.check)
    fields = {}
    for pair in opts.set:
        key, sep, value = pair.partition("=")
        if not sep:
            parser.error(f"--set: KEY=VALUE, got {pair!r}")
        try:
            fields[key] = json.loads(value)
        except json.JSONDecodeError:
            fields[key] = value
    return save_lines(opts.lines, opts.into, opts.commit, opts.metric, opts.command, fields)


if __name__ == "__main__":
    sys.exit(main())
