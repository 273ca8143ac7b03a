"""Code uses a polymimic package through its public names only.

`from polymimic_serve.observations import StateHistory` in polymimic-sim reached past
serve's interface: a rename inside serve broke sim. One rule for every package and every
reader of it (the other packages, their tests, the cross-package tests, the benchmarks and
every README's python blocks): an import of a polymimic package names the package or one of
its subpackages, never a module, and only names the package exports: the table of its
`__init__.pyi` (what `lazy_loader.attach_stub` loads) where it has one, else the `__all__`
of its `__init__.py`. A package's own tests may use its internals. The rule reads sources,
so it is shown to fail on planted violations.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ROOT / "packages"
NAMES = sorted(p.name for p in PACKAGES.iterdir() if (p / "src").is_dir())


def package_dir(top: str) -> Path | None:
    """The source folder of the polymimic package imported as `top`, or None."""
    folder = PACKAGES / top.removeprefix("polymimic_") / "src" / top
    return folder if top.startswith("polymimic_") and folder.is_dir() else None


@cache
def public_names(folder: Path) -> frozenset[str]:
    """A package's exports, read from its `__init__.pyi` table or its `__init__.py`'s `__all__`."""
    stub = folder / "__init__.pyi"
    if stub.is_file():
        return frozenset(
            alias.asname or alias.name
            for node in ast.parse(stub.read_text()).body
            if isinstance(node, ast.ImportFrom) and node.level == 1
            for alias in node.names
        )
    for node in ast.parse((folder / "__init__.py").read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return frozenset(ast.literal_eval(node.value))
    return frozenset()


def _imports(tree: ast.AST) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, names) of every absolute import in `tree`, nested ones too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [alias.name for alias in node.names]


def private_uses(sources: Iterable[tuple[str, str, str | None]]) -> list[str]:
    """Imports that reach past a polymimic package's exports.

    `sources` are (where, source, own): `own` is the package whose internals the source may
    use (its own library code and tests), or None.
    """
    bad: list[str] = []
    for where, source, own in sources:
        for line, module, names in _imports(ast.parse(source)):
            top = module.split(".")[0]
            folder = package_dir(top)
            if folder is None or top == own:
                continue
            target = folder.joinpath(*module.split(".")[1:])
            if not (target / "__init__.py").is_file():
                bad.append(f"{where}:{line} imports the module {module}: use its package")
                continue
            hidden = sorted(set(names) - public_names(target) - {"__version__"})
            if hidden:
                bad.append(f"{where}:{line} imports {hidden} from {module}, not in its exports")
    return bad


def _sources() -> Iterator[tuple[str, str, str | None]]:
    """(where, source, own package) of every reader of the packages."""
    for name in NAMES:
        for part in ("src", "tests"):
            for path in sorted((PACKAGES / name / part).rglob("*.py")):
                yield str(path.relative_to(ROOT)), path.read_text(), f"polymimic_{name}"
    for folder in ("tests", "benchmarks", "scripts"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text(), None
    for readme in [ROOT / "README.md", *sorted(PACKAGES.glob("*/README.md"))]:
        blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.DOTALL)
        for index, block in enumerate(blocks):
            yield f"{readme.relative_to(ROOT)} block {index}", block, None


def test_every_reader_imports_only_public_names() -> None:
    sources = list(_sources())
    assert any(where.startswith("benchmarks/") for where, _, _ in sources)  # the scan sees them
    assert any(" block " in where for where, _, _ in sources)
    assert private_uses(sources) == []


@pytest.mark.parametrize("name", NAMES)
def test_every_package_has_exports(name: str) -> None:
    folder = package_dir(f"polymimic_{name}")
    assert folder is not None and len(public_names(folder)) > 0


@pytest.mark.parametrize(
    ("planted", "own"),
    [
        ("from polymimic_serve.observations import StateHistory\n", "polymimic_sim"),
        ("import polymimic_serve.wire\n", "polymimic_sim"),
        ("from polymimic_serve import PolicyClient, _private\n", "polymimic_sim"),
        ("from polymimic_data.samples.dataset import EpisodeDataset\n", None),
        ("import polymimic_data.store.episode_store\n", None),
        ("from polymimic_data.samples import EpisodeCache as _, _tune_worker\n", None),
        ("from polymimic_data import dataset\n", "polymimic_train"),
        ("def f():\n    from polymimic_data.episodes.resolver import scan_episodes\n", None),
        ("from polymimic_policies.hpt import HPT\n", "polymimic_train"),
        ("from polymimic_train.runs import RunDirError\n", None),  # runs exports nothing
    ],
)
def test_a_planted_private_import_is_caught(planted: str, own: str | None) -> None:
    found = private_uses([("planted.py", planted, own)])
    assert len(found) == 1 and found[0].startswith("planted.py:"), found


def test_public_imports_and_own_internals_pass() -> None:
    source = (
        "import polymimic_data\n"
        "from polymimic_data import EpisodeDataset, __version__\n"
        "from polymimic_data.samples import Normalizer\n"
        "from polymimic_data.testing import S3TestServer, write_lerobot_dataset\n"
        "from polymimic_serve import PolicyClient\n"
        "import numpy.linalg\n"
    )
    assert private_uses([("ok.py", source, None)]) == []
    own = (
        "from polymimic_sim.rollouts.closed_loop import evaluate\n"
        "import polymimic_sim.rollouts.parallel\n"
    )
    assert private_uses([("sim.py", own, "polymimic_sim")]) == []
