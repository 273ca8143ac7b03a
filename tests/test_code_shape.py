"""Habits the code keeps: no function in any package's src runs over 80 lines.

(Complexity is ruff's C901 at 15, in `nox -s lint`; this is the length ruff cannot check.)
A function over the limit is split where its concerns already have homes.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 80


def long_functions(source: str, where: str) -> list[str]:
    """`where:line name (N lines)` for every function or method over MAX_LINES lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start = node.decorator_list[0].lineno if node.decorator_list else node.lineno
            lines = (node.end_lineno or node.lineno) - start + 1
            if lines > MAX_LINES:
                found.append(f"{where}:{node.lineno} {node.name} ({lines} lines)")
    return found


def test_no_function_in_src_is_over_80_lines() -> None:
    found = []
    for path in sorted(ROOT.glob("packages/*/src/**/*.py")):
        found += long_functions(path.read_text(), str(path.relative_to(ROOT)))
    assert found == []


def test_a_long_function_is_found() -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_LINES))  # 81 lines with its def
    assert long_functions("def f():\n" + body, "a.py") == ["a.py:1 f (81 lines)"]
    assert long_functions("def f():\n" + body[: -len("    x79 = 79\n")], "a.py") == []
    method = "".join("    " + line + "\n" for line in ("def g(self):\n" + body).splitlines())
    assert long_functions("class A:\n" + method, "b.py") == ["b.py:2 g (81 lines)"]
