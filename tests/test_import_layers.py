"""The layers inside polymimic-data, and its public surface to everyone else.

Inside polymimic_data each subpackage imports only the layers below it (`DATA_LAYERS`):
the store knows nothing of samples, episodes, LeRobot or synthetic data, and only the CLI
reaches `lerobot` and `synthetic`. Outside it (the other packages, their tests, the
cross-package tests, the benchmarks and every README's python blocks) code imports only
public names: `polymimic_data` or one of its subpackages, and only names in its
`__all__`. Each rule is shown to fail on a planted violation.
"""

from __future__ import annotations

import ast
import re
import shutil
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "packages" / "data" / "src" / "polymimic_data"

# subpackage -> the subpackages of polymimic_data it may import (besides itself)
DATA_LAYERS: dict[str, set[str]] = {
    "geometry": set(),
    "embodiments": {"geometry"},
    "store": set(),
    "episodes": {"geometry", "embodiments", "store"},
    "samples": {"geometry", "embodiments", "store", "episodes"},
    "lerobot": {"geometry", "embodiments", "store"},
    "synthetic": {"geometry", "embodiments", "store"},
}
REACHED_BY_CLI_ONLY = {"lerobot", "synthetic"}


def _imported_modules(tree: ast.AST) -> Iterator[tuple[int, str, list[str]]]:
    """(line, module, names) for every absolute import in `tree`, nested ones too."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module, [a.name for a in node.names]


def layer_violations(package_dir: Path) -> list[str]:
    """Imports between polymimic_data's subpackages that DATA_LAYERS does not allow."""
    bad: list[str] = []
    for path in sorted(package_dir.rglob("*.py")):
        parts = path.relative_to(package_dir).parts
        top = parts[0]
        layer = top if len(parts) > 1 else None  # None: a top-level module
        for line, module, _ in _imported_modules(ast.parse(path.read_text())):
            if not module.startswith("polymimic_data."):
                continue
            target = module.split(".")[1]
            if target not in DATA_LAYERS or target == layer:
                continue
            if layer is None:
                allowed = target not in REACHED_BY_CLI_ONLY or top == "cli.py"
            else:
                allowed = target in DATA_LAYERS[layer]
            if not allowed:
                where = f"{path.relative_to(package_dir)}:{line}"
                bad.append(f"{where} ({layer or top}) imports {module}")
    return bad


def _public_names(package_dir: Path, subpackage: str | None) -> set[str]:
    """`__all__` of polymimic_data or one of its subpackages, read from its source."""
    init = package_dir / (subpackage or "") / "__init__.py"
    for node in ast.parse(init.read_text()).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets
        ):
            return set(ast.literal_eval(node.value))
    return set()


def _python_sources() -> Iterator[tuple[str, str]]:
    """(where, source) of everything outside polymimic-data that may use it."""
    for pattern in ("packages/*/src/**/*.py", "packages/*/tests/**/*.py"):
        for path in sorted(ROOT.glob(pattern)):
            if not path.is_relative_to(ROOT / "packages" / "data"):
                yield str(path.relative_to(ROOT)), path.read_text()
    for folder in ("tests", "benchmarks"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), path.read_text()
    for readme in [ROOT / "README.md", *sorted(ROOT.glob("packages/*/README.md"))]:
        blocks = re.findall(r"```python\n(.*?)```", readme.read_text(), flags=re.DOTALL)
        for index, block in enumerate(blocks):
            yield f"{readme.relative_to(ROOT)} block {index}", block


def private_uses(sources: Iterable[tuple[str, str]], package_dir: Path = DATA) -> list[str]:
    """Imports of polymimic_data modules, or of names outside an `__all__`, from outside it."""
    subpackages = {p.name for p in package_dir.iterdir() if (p / "__init__.py").is_file()}
    bad: list[str] = []
    for where, source in sources:
        for line, module, names in _imported_modules(ast.parse(source)):
            if module != "polymimic_data" and not module.startswith("polymimic_data."):
                continue
            parts = module.split(".")
            if len(parts) > 2 or (len(parts) == 2 and parts[1] not in subpackages):
                bad.append(f"{where}:{line} imports the module {module}")
                continue
            public = _public_names(package_dir, parts[1] if len(parts) == 2 else None)
            hidden = sorted(set(names) - public - {"__version__"})
            if hidden:
                bad.append(f"{where}:{line} imports {hidden} from {module}, not in its __all__")
    return bad


def test_data_subpackages_import_only_the_layers_below() -> None:
    assert layer_violations(DATA) == []


def test_outside_data_only_public_names_are_imported() -> None:
    assert private_uses(_python_sources()) == []


def test_top_level_of_data_stays_small() -> None:
    entries = [p.name for p in DATA.iterdir() if p.name != "__pycache__"]
    assert len(entries) <= 10, sorted(entries)


@pytest.mark.parametrize(
    ("where", "planted", "expected"),
    [
        ("store/planted.py", "from polymimic_data.samples import dataset\n", "(store) imports"),
        (
            "episodes/planted.py",
            "def f():\n    from polymimic_data.synthetic import generate_episode\n",
            "(episodes) imports polymimic_data.synthetic",
        ),
        ("planted.py", "import polymimic_data.lerobot.importer\n", "(planted.py) imports"),
        ("geometry/planted.py", "from polymimic_data.embodiments import get_embodiment\n", ""),
    ],
)
def test_a_planted_layer_violation_is_caught(
    tmp_path: Path, where: str, planted: str, expected: str
) -> None:
    copy = tmp_path / "polymimic_data"
    shutil.copytree(DATA, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / where).write_text(planted)
    found = layer_violations(copy)
    assert len(found) == 1 and found[0].startswith(where) and expected in found[0], found


@pytest.mark.parametrize(
    "planted",
    [
        "from polymimic_data.samples.dataset import EpisodeDataset\n",
        "import polymimic_data.store.episode_store\n",
        "from polymimic_data.samples import EpisodeCache as _, _tune_worker\n",
        "from polymimic_data import dataset\n",
        "def f():\n    from polymimic_data.episodes.resolver import scan_episodes\n",
    ],
)
def test_a_planted_private_import_is_caught(planted: str) -> None:
    assert len(private_uses([("planted.py", planted)])) == 1


def test_public_imports_pass() -> None:
    source = (
        "import polymimic_data\n"
        "from polymimic_data import EpisodeDataset, __version__\n"
        "from polymimic_data.samples import Normalizer\n"
        "from polymimic_data.synthetic import write_lerobot_dataset\n"
    )
    assert private_uses([("ok.py", source)]) == []
