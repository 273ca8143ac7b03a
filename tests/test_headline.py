"""Headline figures as files (benchmarks/headline.py): a README's results table is what the
committed result files say, a saved result names its commit, machine and command, and a
result missing a figure is refused by name."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def headline() -> ModuleType:
    spec = importlib.util.spec_from_file_location("headline_benchmark", BENCHMARKS / "headline.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _cell(**changes) -> dict:
    """A success_rate line as benchmarks/h2r.py prints it."""
    line = {
        "benchmark": "h2r", "metric": "success_rate", "value": 0.34, "unit": "fraction",
        "cell": "cotrain_n10", "task": "aloha_ee/transfer_cube", "arm": "cotrain",
        "robot_demos": 10, "hands_demos": 500, "steps": 3000, "successes": 34,
        "episodes": 100, "wilson95": [0.2554, 0.4369], "strict_successes": 31,
        "strict_wilson95": [0.2277, 0.4059], "success_at_steps": {"300": 34, "400": 34},
        "mean_steps_to_success": 283.5, "expert_mean_steps_to_success": 291.0,
        "seeds": [1000, 1099], "train_s": 1811.0, "eval_s": 306.0,
    }  # fmt: skip
    return line | changes


def test_the_readmes_tables_are_the_committed_results(headline: ModuleType) -> None:
    for name, (readme, folder, renderer) in headline.TABLES.items():
        text = readme.read_text()
        assert f"<!-- results:{name} -->" in text
        assert headline.render(text, name, renderer(headline.load(folder))) == text, (
            f"{readme}'s {name} table is stale: python benchmarks/headline.py table"
        )


def test_a_saved_result_says_where_and_how_it_was_measured(
    headline: ModuleType, tmp_path: Path
) -> None:
    dest = tmp_path / "h2r" / "aloha_ee_transfer_cube" / "cotrain_n10.json"
    argv = ["h2r.py", "--robot-demos", "10"]
    headline.save(_cell(), dest, commit="abc1234", argv=argv)
    saved = json.loads(dest.read_text())
    assert saved["successes"] == 34 and saved["commit"] == "abc1234" and saved["argv"] == argv
    assert "CPU" in saved["machine"] and saved["saved_at"]
    assert [p.name for p in dest.parent.iterdir()] == ["cotrain_n10.json"]  # no partial left

    table = headline.h2r_table(headline.load(tmp_path / "h2r"))
    row = table.splitlines()[2]
    assert "**34/100** (25.5%-43.7%)" in row and "31/100 (22.8%-40.6%)" in row
    assert "283.5 (291.0)" in row and "1000-1099" in row and "abc1234" in row
    assert "| 34/100 by 300 |" in row  # within gym-aloha's registered 300 ticks, not the 400
    assert "`h2r.py --robot-demos 10`" in row


def test_a_saved_result_names_the_commit_its_process_began_at(
    headline: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A headline runs for an hour or more while the checkout moves on: its result names the
    code it ran, not HEAD when it saves."""
    monkeypatch.setattr(headline, "COMMIT_AT_START", "a" * 40)  # taken as it was imported
    monkeypatch.setattr(headline, "current_commit", lambda: "f" * 40)  # HEAD moved on since
    headline.save(_cell(), tmp_path / "r.json", argv=["h2r.py"])
    assert json.loads((tmp_path / "r.json").read_text())["commit"] == "a" * 40


def test_a_30_hz_cell_counts_success_within_its_own_registered_limit(
    headline: ModuleType, tmp_path: Path
) -> None:
    """The hands-alone cell runs in a person's 30 Hz frames: 180 of them, not tick 300."""
    line = _cell(cell="hands_n0", successes=3, success_at_steps={"180": 2, "240": 3})
    headline.save(line, tmp_path / "hands_n0.json", commit="c")
    row = headline.h2r_table(headline.load(tmp_path)).splitlines()[2]
    assert "| 2/100 by 180 |" in row


def test_rows_are_ordered_by_task_and_robot_demonstrations(
    headline: ModuleType, tmp_path: Path
) -> None:
    for cell, n in (("robot_n50", 50), ("robot_n10", 10), ("cotrain_n10", 10)):
        headline.save(_cell(cell=cell, robot_demos=n), tmp_path / f"{cell}.json", commit="c")
    rows = headline.h2r_table(headline.load(tmp_path)).splitlines()[2:]
    assert [row.split(" | ")[1] for row in rows] == ["cotrain_n10", "robot_n10", "robot_n50"]


def test_the_grid_puts_each_cell_by_robot_demonstrations_and_arm_with_its_variants(
    headline: ModuleType, tmp_path: Path
) -> None:
    cells = [("robot_n50", "robot", 50, 97), ("cotrain_n10_shared_s1", "cotrain", 10, 76),
             ("cotrain_n10_shared", "cotrain", 10, 77), ("robot_n10", "robot", 10, 50)]  # fmt: skip
    for cell, arm, n, successes in cells:
        line = _cell(cell=cell, arm=arm, robot_demos=n, successes=successes)
        headline.save(line, tmp_path / f"{cell}.json", commit="c")
    lines = headline.h2r_grid(headline.load(tmp_path)).splitlines()
    assert lines[0].startswith("**aloha_ee/transfer_cube**")
    assert lines[2] == "| robot demos N | robot only | robot + hands (cotrain) |"
    ten, fifty = lines[4:]
    # both variants in their place, by name; the cell's interval as whole percents
    assert ten == "| 10 | **50** (26-44) | **77** (26-44) `shared`<br>**76** (26-44) `shared_s1` |"
    assert fifty == "| 50 | **97** (26-44) | - |"  # not measured: a dash, never a guess


def test_a_result_missing_a_figure_is_named(headline: ModuleType, tmp_path: Path) -> None:
    line = _cell()
    del line["strict_wilson95"]
    headline.save(line, tmp_path / "old.json", commit="c")
    with pytest.raises(SystemExit, match=r"old\.json: a result without \['strict_wilson95'\]"):
        headline.h2r_table(headline.load(tmp_path))


def test_printed_lines_are_saved_with_the_fields_they_lack(
    headline: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    line = _cell()
    del line["task"]
    lines = tmp_path / "bench.jsonl"
    other = {"benchmark": "h2r", "metric": "robot_record_s", "value": 52.1}
    lines.write_text(f"{json.dumps(other)}\n{json.dumps(line)}\n")
    command = "python benchmarks/h2r.py --robot-demos 10 --tag bs48"
    monkeypatch.setattr(sys, "argv", [
        "headline.py", "save", str(lines), "--into", str(tmp_path / "out"), "--commit", "20005f3",
        "--command", command, "--set", "task=aloha_ee/transfer_cube", "robot_demos=10",
    ])  # fmt: skip
    assert headline.main() == 0
    saved = json.loads((tmp_path / "out" / "cotrain_n10.json").read_text())
    assert saved["task"] == "aloha_ee/transfer_cube" and saved["commit"] == "20005f3"
    assert saved["argv"] == command.split()
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["cotrain_n10.json"]

    lines.write_text(json.dumps(other) + "\n")
    with pytest.raises(SystemExit, match="no 'success_rate' lines"):
        headline.main()


def test_a_headline_row_names_its_model_executor_anchor_and_a_suites_lowest_task(
    headline: ModuleType, tmp_path: Path
) -> None:
    assert headline.closed_loop_table([]).startswith("No headline result recorded yet")
    common = {"model": "hpt_small", "demos": 50, "record_s": 99.0, "steps": 7000}
    cube = _cell(headline="transfer_cube", task="aloha/transfer_cube", anchor="ACT ~90%")
    suite = _cell(
        headline="mt10", task="metaworld/mt10", anchor="SmolVLA 68% (MT50)",
        success_at_steps={}, mean_steps_to_success=None, expert_mean_steps_to_success=None,
        success_rate_per_task={"reach-v3": 0.95, "peg-insert-side-v3": 0.45},
        executor="temporal_ensemble", trained_commit="54cbd0f30425-dirty",
        experts={"metaworld/reach-v3": "fingertips_to_goal", "metaworld/push-v3": "stock",
                 "metaworld/pick-place-v3": "fingertips_to_goal"},
    )  # fmt: skip
    for line in (cube, suite):
        headline.save(line | common, tmp_path / f"{line['headline']}.json", commit="c0ffee1")
    rows = headline.closed_loop_table(headline.load(tmp_path)).splitlines()
    assert len({row.count("|") for row in rows}) == 1  # every row as wide as the header
    mt10, cube_row = rows[2:]
    # the tasks whose expert was not the stock one; a result without `experts` predates them,
    # one without `executor` the key (evaluated through chunk, polymimic-sim's default)
    assert mt10.startswith(
        "| mt10 | metaworld/mt10 | hpt_small (temporal_ensemble) | 50 (pick-place: "
        "fingertips_to_goal; reach: fingertips_to_goal) | 7000 |"
    )
    assert cube_row.startswith(
        "| transfer_cube | aloha/transfer_cube | hpt_small (chunk) | 50 | 7000 |"
    )
    assert "| peg-insert-side-v3 45% | SmolVLA 68% (MT50) |" in mt10
    assert "| - | - (-) |" in mt10  # no step figures for a suite
    assert "| - | ACT ~90% | 2 min / 30 min / 5 min |" in cube_row
    # a run trained before and evaluated at another commit names both; one trained in the same
    # run (or a result older than the key), its one commit
    assert "| c0ffee1 (trained at 54cbd0f), " in mt10 and "| c0ffee1, " in cube_row

    del suite["anchor"]
    headline.save(suite | common, tmp_path / "mt10.json", commit="c")
    with pytest.raises(SystemExit, match=r"mt10\.json: a result without \['anchor'\]"):
        headline.closed_loop_table(headline.load(tmp_path))


def _closed_loop() -> ModuleType:
    sys.path.insert(0, str(BENCHMARKS))
    try:
        spec = importlib.util.spec_from_file_location("closed_loop_bench",
                                                      BENCHMARKS / "closed_loop.py")  # fmt: skip
        assert spec and spec.loader
        closed_loop = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(closed_loop)  # (its dataclasses look themselves up there)
    finally:
        sys.path.remove(str(BENCHMARKS))
        sys.modules.pop("closed_loop_bench", None)
    return closed_loop


def test_a_headline_records_the_cameras_its_training_run_reads() -> None:
    trained_cameras = _closed_loop().trained_cameras
    assert trained_cameras("sim_metaworld_mt10", []) == ("corner4_fov40",)  # the config's
    moved = ["data.datasets.metaworld.cameras=[corner4]"]
    assert trained_cameras("sim_metaworld_mt10", moved) == ("corner4",)  # --train-args'
    assert trained_cameras("sim_cotrain_transfer_cube", []) is None  # each task its own
    auto = ["data.datasets.metaworld.cameras=auto"]
    assert trained_cameras("sim_metaworld_mt10", auto) is None  # the episodes' own
    unnamed = ["~data.datasets.metaworld.cameras"]
    assert trained_cameras("sim_metaworld_mt10", unnamed) == ("front_1",)  # what training reads
    one = ["data.datasets.metaworld.cameras=corner4"]  # a string, not a list: not 7 cameras
    with pytest.raises(ValueError, match=r"data.datasets.metaworld.cameras: a list of camera"):
        trained_cameras("sim_metaworld_mt10", one)


def test_a_resumed_recording_counts_the_time_of_every_run_that_recorded(tmp_path: Path) -> None:
    """closed_loop.py's record_s: an interrupted recording resumed (or one made ahead of the
    training) is the time of both runs, not of the one that found it nearly done."""
    closed_loop = _closed_loop()
    demos = tmp_path / "reach" / "demos"
    _, first_s = closed_loop.record_resumed("metaworld/reach-v3", demos, 1, 1)
    second, total_s = closed_loop.record_resumed("metaworld/reach-v3", demos, 2, 1)
    log = json.loads((tmp_path / "reach" / "record_log.json").read_text())
    assert [(e["written"], e["kept"]) for e in log] == [(1, 0), (1, 1)]
    assert first_s == log[0]["seconds"] > 0 and total_s == first_s + log[1]["seconds"]
    assert len(second.kept) == 1 and len(second.written) == 1
    frames = [json.loads((p / "zarr.json").read_text())["attributes"]["total_frames"]
              for p in sorted(demos.glob("*.zarr"))]  # fmt: skip
    assert closed_loop.frames_by_task(demos) == {  # read from what record wrote
        "metaworld/reach-v3": {
            "episodes": 2,
            "mean_frames": sum(frames) / 2,
            "share_over_even": 1.0,
        }
    }


def test_each_tasks_share_of_the_demonstrations_frames_is_over_an_even_share(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    closed_loop = _closed_loop()
    episodes = [SimpleNamespace(attrs={"sim_task": task}, total_frames=n)
                for task, n in (("a", 10), ("b", 60), ("a", 30))]  # fmt: skip
    monkeypatch.setattr(closed_loop, "resolve_episodes", lambda root: episodes)
    assert closed_loop.frames_by_task(Path("demos")) == {
        "a": {"episodes": 2, "mean_frames": 20.0, "share_over_even": 0.8},  # 40 of 100, 2 tasks
        "b": {"episodes": 1, "mean_frames": 60.0, "share_over_even": 1.2},
    }


@pytest.mark.parametrize(
    ("executor", "suffix"), [("chunk", ""), ("temporal_ensemble", "-temporal_ensemble")]
)
def test_a_cell_is_evaluated_through_the_executor_it_names(
    executor: str, suffix: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """cells.train_and_evaluate (closed_loop.py --executor): polymimic-sim evaluate is told
    the executor, its result says which one the evaluation ran, and a non-chunk one writes
    beside the chunk evaluation rather than over it."""
    train_and_evaluate = _closed_loop().train_and_evaluate
    cells = train_and_evaluate.__globals__  # the benchmarks' cells module
    commands: list[tuple[list[str], Path]] = []

    def evaluate(args: list[str], log: Path) -> float:  # polymimic-sim evaluate's summary
        commands.append((args, log))
        ran = args[args.index("--executor") + 1]
        out = Path(args[args.index("--out") + 1])
        out.mkdir(parents=True)
        (out / "summary.json").write_text(json.dumps({
            "executor": ran, "successes": 3, "episodes": 4,
            "success_rate_wilson95": [0.3, 0.95],
            "strict_success": {"successes": 2, "wilson95": [0.15, 0.85]},
        }))  # fmt: skip
        return 1.0

    monkeypatch.setitem(cells, "finished_run", lambda run_dir, steps: True)  # trained before
    monkeypatch.setitem(cells, "run_logged", evaluate)
    runs = tmp_path / "runs" / "cell"
    runs.mkdir(parents=True)
    (runs / "summary.json").write_text("{}")
    (runs / "git_commit.txt").write_text("54cbd0f\n")  # the train app's record of its commit
    result = train_and_evaluate("cell", [tmp_path / "demos"], "sim_metaworld", tmp_path,
                                task="metaworld/reach-v3", steps=10, episodes=4, workers=1,
                                overrides=[], executor=executor)  # fmt: skip
    ((command, log),) = commands
    assert result["executor"] == executor and result["trained_commit"] == "54cbd0f"
    assert command[command.index("--executor") + 1] == executor  # named, even the default
    out = command[command.index("--out") + 1]
    assert out == str(tmp_path / "eval" / f"cell{suffix}")
    assert log == tmp_path / f"cell{suffix}.eval.log"  # its log beside, not over, chunk's


@pytest.mark.parametrize(("given", "evaluated"), [([], "temporal_ensemble"), (["chunk"], "chunk")])
def test_a_headline_is_evaluated_through_its_own_executor_unless_told_another(
    given: list[str], evaluated: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """closed_loop.py's mt10 evaluates through the temporal ensemble (its Headline's), and
    `--executor` overrides it; the recording and training are stood in for."""
    closed_loop = _closed_loop()
    report = SimpleNamespace(written=[], kept=[], success_rate=1.0)
    monkeypatch.setattr(closed_loop, "record_resumed", lambda *args: (report, 1.0))
    monkeypatch.setattr(closed_loop, "frames_by_task", lambda demos: {})
    asked: dict = {}

    def train_and_evaluate(*args, **kwargs):
        asked.update(kwargs)
        raise SystemExit("stood in")

    monkeypatch.setattr(closed_loop, "train_and_evaluate", train_and_evaluate)
    flags = ["--executor", *given] if given else []
    argv = ["closed_loop.py", "--headline", "mt10", "--workdir", str(tmp_path), *flags]
    monkeypatch.setattr(sys, "argv", [*argv, "--no-results"])
    with pytest.raises(SystemExit, match="stood in"):
        closed_loop.main()
    assert asked["executor"] == evaluated


def test_a_cell_whose_training_exits_0_unfinished_is_not_evaluated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A training process that exits 0 without its run finished (as Lightning's SIGTERM once
    made the app do) stops the cell before a half-trained checkpoint is evaluated."""
    train_and_evaluate = _closed_loop().train_and_evaluate
    cells = train_and_evaluate.__globals__
    ran: list[list[str]] = []
    monkeypatch.setitem(cells, "run_logged", lambda args, log: ran.append(args) or 1.0)
    runs = tmp_path / "runs" / "cell"
    runs.mkdir(parents=True)
    (runs / "run.json").write_text(json.dumps({"state": "failed", "error": "stopped by SIGTERM"}))
    with pytest.raises(SystemExit, match=r"runs/cell: the training run did not finish"):
        train_and_evaluate("cell", [tmp_path / "demos"], "sim_metaworld", tmp_path,
                           task="metaworld/reach-v3", steps=10, episodes=4, workers=1,
                           overrides=[])  # fmt: skip
    assert len(ran) == 1 and "polymimic_train" in ran[0]  # trained; never evaluated
