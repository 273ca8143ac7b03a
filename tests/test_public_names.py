"""A package uses another polymimic package through its public names only.

`from polymimic_serve.observations import StateHistory` in polymimic-sim reached past
serve's interface: a rename inside serve broke sim. Every import of another polymimic
package must name a package (its top level or a subpackage, never a module) and only
names that package exports (`__all__`; for the lazily loading packages, the table in
their `__init__.pyi`).
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = sorted(p.name for p in (ROOT / "packages").iterdir() if (p / "src").is_dir())


def foreign_imports(source: str, own: str) -> Iterator[tuple[str, str]]:
    """(module, name) of every import of another polymimic package; name "*" for `import`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.startswith("polymimic_") and node.module.split(".")[0] != own:
                yield from ((node.module, alias.name) for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top.startswith("polymimic_") and top != own and "." in alias.name:
                    yield alias.name, "*"


def unexported(module: str, name: str) -> str | None:
    """Why `from module import name` reaches past a package's interface, or None."""
    imported = importlib.import_module(module)
    if not hasattr(imported, "__path__"):
        return f"{module} is a module, not a package: import {name} from its package"
    if name != "*" and name not in getattr(imported, "__all__", ()):
        return f"{module} does not export {name}"
    return None


@pytest.mark.parametrize("package", PACKAGES)
def test_a_package_imports_only_what_the_others_export(package: str) -> None:
    own = f"polymimic_{package}"
    found = {}
    for path in sorted((ROOT / "packages" / package / "src").rglob("*.py")):
        for module, name in foreign_imports(path.read_text(), own):
            why = unexported(module, name)
            if why is not None:
                found[f"{path.relative_to(ROOT)}: {module}.{name}"] = why
    assert found == {}, f"polymimic-{package} reaches past another package's exports: {found}"


def test_the_rule_bites() -> None:
    source = (
        "from polymimic_serve.observations import StateHistory\n"
        "from polymimic_serve import PolicyClient, _private\n"
        "import polymimic_serve.wire\n"
        "from polymimic_sim.rollouts import x\n"  # its own package: not this rule's business
    )
    imports = list(foreign_imports(source, "polymimic_sim"))
    assert ("polymimic_sim.rollouts", "x") not in imports
    reasons = {f"{m}.{n}": unexported(m, n) for m, n in imports}
    assert reasons == {
        "polymimic_serve.observations.StateHistory": (
            "polymimic_serve.observations is a module, not a package: import StateHistory "
            "from its package"
        ),
        "polymimic_serve.PolicyClient": None,
        "polymimic_serve._private": "polymimic_serve does not export _private",
        "polymimic_serve.wire.*": (
            "polymimic_serve.wire is a module, not a package: import * from its package"
        ),
    }
