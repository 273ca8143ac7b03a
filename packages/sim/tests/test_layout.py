"""The package's layers: tasks/ builds on nothing that runs or records them."""

from __future__ import annotations

import ast
from pathlib import Path

import polymimic_sim

PACKAGE = Path(polymimic_sim.__file__).parent
ABOVE_TASKS = ("polymimic_sim.rollouts", "polymimic_sim.recording", "polymimic_sim.cli")


def imports_above_tasks(source: str, module: str) -> list[str]:
    """What `source` (the module `module` of tasks/) imports from rollouts, recording or cli."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = module.rsplit(".", node.level)[0] + "." if node.level else ""
            names = [base + (node.module or "")]
            if node.module in (None, "polymimic_sim") or base == "polymimic_sim.":
                names += [f"polymimic_sim.{alias.name}" for alias in node.names]
        else:
            continue
        found += [n for n in names if n.startswith(ABOVE_TASKS)]
    return found


def test_tasks_import_nothing_that_runs_or_records_them() -> None:
    found = {
        path.name: hits
        for path in sorted((PACKAGE / "tasks").glob("*.py"))
        if (hits := imports_above_tasks(path.read_text(), f"polymimic_sim.tasks.{path.stem}"))
    }
    assert found == {}


def test_the_layer_check_sees_each_form_of_import() -> None:
    module = "polymimic_sim.tasks.registry"
    for planted in ("import polymimic_sim.rollouts.parallel\n",
                    "from polymimic_sim.recording import record\n",
                    "from polymimic_sim import rollouts\n",
                    "from ..rollouts import closed_loop\n",
                    "from .. import recording\n"):  # fmt: skip
        assert imports_above_tasks(planted, module), planted
    assert imports_above_tasks("from .task_types import Step\n", module) == []
    assert imports_above_tasks("from polymimic_sim import make_task\n", module) == []
