"""The import rules of shared/DESIGN.md: each package imports only what it may.

Two sources are checked against `ALLOWED`: what each package's source imports (statically,
and through `importlib.import_module` / `__import__` with a constant module name), and what
its pyproject declares (`dependencies` and every `optional-dependencies` group, parsed as
PEP 508 requirements, so operators, markers and extras cannot hide a name, and mapped from
the distribution name to the import name, so `pytorch-lightning` is Lightning).
"""

from __future__ import annotations

import ast
import sys
import tomllib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = {
    "lazy_loader",
    "numpy",
    "gymnasium",
    "metaworld",
    "mujoco",
    "gym_aloha",
    "dm_control",
    "msgpack",
    "websockets",
    "tensorboard",
    "zarr",
    "torchdata",
    "numcodecs",
    "google_crc32c",
    "torch",
    "simplejpeg",
    "tqdm",
    "torchvision",
    "safetensors",
    "transformers",
    "diffusers",
    "lightning",
    "av",
    "hydra",
    "omegaconf",
    "platformdirs",
    "torchmetrics",
    "pyarrow",
}
ALLOWED: dict[str, set[str]] = {
    # fsspec: the optional `s3` extra, imported only inside store.remote_episodes' functions.
    # numcodecs, google_crc32c: zarr's own codecs, used to read its chunks by byte range.
    # torchdata: its StatefulDataLoader, so that a resumed run continues the same order.
    # pyarrow, av, PIL: the optional `lerobot` extra (LeRobot v3 parquet, videos, images),
    # imported by polymimic_data.lerobot and testing.lerobot_format only.
    # lazy_loader: a package's public names load on first use, from the one table in its
    # __init__.pyi (data, serve, sim, train: a light user pays for no heavy import).
    # rerun: the optional `viz` extra (`polymimic-data view`), imported by episodes.viewer only.
    "data": {
        "rerun",
        "lazy_loader",
        "pyarrow",
        "av",
        "PIL",
        "numpy",
        "zarr",
        "numcodecs",
        "google_crc32c",
        "torch",
        "torchdata",
        "simplejpeg",
        "tqdm",
        "fsspec",
    },
    # tokenizers (the `pi` extra, transformers' own): the tiny PaliGemma's offline tokenizer.
    "policies": {"torch", "torchvision", "safetensors", "transformers", "tokenizers", "diffusers"},
    "strategies": {"torch", "lightning"},
    # PIL: the renderer's drawing and captions; matplotlib: the `plots` extra (horizon plot).
    "eval": {"numpy", "torch", "av", "PIL", "matplotlib", "polymimic_data"},
    # msgpack, websockets: openpi's wire and the server; safetensors: exports. No training
    # stack (lightning, hydra, torchdata, tensorboard, polymimic_train): a robot installs it.
    "serve": {
        "lazy_loader",
        "numpy",
        "torch",
        "safetensors",
        "msgpack",
        "websockets",
        "polymimic_data",
        "polymimic_policies",
    },
    # metaworld, mujoco: the `metaworld` extra; gym_aloha, dm_control: the `aloha` extra;
    # each imported inside its task module only. torchvision: loaded before MuJoCo's first
    # GL context (a Mesa EGL crash otherwise). polymimic_eval: the rollouts' videos.
    # rerun: the `viz` extra (`evaluate --rerun`), imported by rollout_recording only.
    "sim": {
        "rerun",
        "lazy_loader",
        "numpy",
        "torch",
        "gymnasium",
        "simplejpeg",
        "tqdm",
        "torchvision",
        "metaworld",
        "mujoco",
        "gym_aloha",
        "dm_control",
        "polymimic_data",
        "polymimic_serve",
        "polymimic_eval",
    },
    # tensorboard, PIL: clips and plots written to TensorBoard; wandb: logger=wandb (an
    # optional extra, imported only when that logger is built).
    "train": {
        "lazy_loader",
        "numpy",
        "tensorboard",
        "wandb",
        "PIL",
        "torch",
        "lightning",
        "hydra",
        "omegaconf",
        "platformdirs",
        "torchmetrics",
        "polymimic_data",
        "polymimic_policies",
        "polymimic_strategies",
        "polymimic_eval",
        "polymimic_serve",
        "polymimic_sim",
    },
}
OURS = {f"polymimic_{p}" for p in ALLOWED}
# Every import name some rule speaks of: a declared dependency on one of these that the
# package's ALLOWED set lacks is forbidden. (Others, e.g. s3fs, are runtime plugins.)
KNOWN = THIRD_PARTY | OURS | set().union(*ALLOWED.values())

# Distribution name (PEP 503 normalised) -> the top-level module it provides, where the two
# differ. Anything not listed imports as its normalised name with "-" -> "_".
IMPORT_NAME: dict[str, str] = {
    "hydra-core": "hydra",
    "lightning": "lightning",
    "pytorch-lightning": "lightning",  # the same project under its older name
    "lightning-fabric": "lightning",  # Lightning's own core, forbidden wherever it is
    "pillow": "PIL",
    "google-crc32c": "google_crc32c",
    "torchdata": "torchdata",
    "hydra-submitit-launcher": "hydra_plugins",
    "rerun-sdk": "rerun",
}
# Imports that come with a declared distribution (an import of the second needs only the first).
TRANSITIVE: dict[str, set[str]] = {"hydra": {"omegaconf"}}
# Dynamic imports whose module name is computed at run time, so the scan cannot check them.
# Each must be reviewed: file (relative to ROOT) -> the calls, as ast.unparse writes them.
# (None today: a checkpoint names its policy by a registered name, never by a class path.)
UNRESOLVABLE_REVIEWED: dict[str, set[str]] = {}


def import_name(distribution: str) -> str:
    """The top-level module a distribution provides, by its PEP 503 normalised name."""
    name = canonicalize_name(distribution)
    return IMPORT_NAME.get(name, name.replace("-", "_"))


def declared_imports(project: Mapping[str, Any]) -> dict[str, list[str]]:
    """Import name -> the requirement strings (with where) that declare it, all groups."""
    groups: list[tuple[str, Iterable[str]]] = [("dependencies", project.get("dependencies", []))]
    groups += [
        (f"optional-dependencies.{extra}", reqs)
        for extra, reqs in project.get("optional-dependencies", {}).items()
    ]
    found: dict[str, list[str]] = {}
    for where, reqs in groups:
        for text in reqs:
            requirement = Requirement(text)  # InvalidRequirement fails the test, not skips it
            found.setdefault(import_name(requirement.name), []).append(f"{where}: {text!r}")
    return found


def forbidden_declared(package: str, project: Mapping[str, Any]) -> dict[str, list[str]]:
    """Declared dependencies DESIGN.md forbids this package."""
    own = f"polymimic_{package}"
    return {
        name: where
        for name, where in declared_imports(project).items()
        if name in KNOWN and name != own and name not in ALLOWED[package]
    }


def _dynamic_module(arg: ast.expr) -> str | None:
    """The module a dynamic import names, when it is a constant or an f-string's constant head."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        head = arg.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            if len(arg.values) == 1 or "." in head.value.lstrip("."):
                return head.value
            if head.value.startswith("."):
                return head.value  # relative either way
    return None


def scan_source(source: str) -> tuple[set[str], list[str]]:
    """Top-level modules a source file imports, and its dynamic imports that name no constant.

    Relative imports (the package's own modules) are left out.
    """
    tree = ast.parse(source)
    importlib_names = {"importlib"}
    import_module_names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            importlib_names |= {a.asname for a in node.names if a.name == "importlib" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "importlib" and node.level == 0:
            import_module_names |= {
                a.asname or a.name for a in node.names if a.name == "import_module"
            }
    modules: set[str] = set()
    unresolvable: list[str] = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif isinstance(node, ast.Call) and _is_dynamic_import(
            node.func, importlib_names, import_module_names
        ):
            arg = node.args[0] if node.args else None
            if arg is None:
                arg = next((k.value for k in node.keywords if k.arg in {"name", "module"}), None)
            name = _dynamic_module(arg) if arg is not None else None
            if name is None:
                unresolvable.append(ast.unparse(node))
            else:
                names = [name]
        modules |= {n.split(".")[0] for n in names if not n.startswith(".")}
    return modules, unresolvable


def _is_dynamic_import(
    func: ast.expr, importlib_names: set[str], import_module_names: set[str]
) -> bool:
    if isinstance(func, ast.Name):
        return func.id == "__import__" or func.id in import_module_names
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        return (func.attr == "import_module" and func.value.id in importlib_names) or (
            func.attr == "__import__" and func.value.id == "builtins"
        )
    return False


def _imports(package: str) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Module -> files importing it, and file -> its unresolvable dynamic imports."""
    found: dict[str, list[str]] = {}
    unresolvable: dict[str, list[str]] = {}
    for path in sorted((ROOT / "packages" / package / "src").rglob("*.py")):
        where = str(path.relative_to(ROOT))
        modules, dynamic = scan_source(path.read_text())
        for module in modules:
            found.setdefault(module, []).append(where)
        if dynamic:
            unresolvable[where] = dynamic
    return found, unresolvable


def forbidden_imports(package: str, modules: Iterable[str]) -> set[str]:
    """Imported modules DESIGN.md forbids this package (stdlib and its own are always fine)."""
    own = f"polymimic_{package}"
    return {
        m
        for m in modules
        if m != own and m not in sys.stdlib_module_names and m not in ALLOWED[package]
    }


def _project(package: str) -> dict[str, Any]:
    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]


# ---- the real packages -------------------------------------------------------------------


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_design_allows(package: str) -> None:
    found, _ = _imports(package)
    bad = {m: found[m] for m in forbidden_imports(package, found)}
    assert bad == {}, f"polymimic-{package} imports what DESIGN.md forbids: {bad}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_dynamic_imports_are_resolvable_or_reviewed(package: str) -> None:
    _, unresolvable = _imports(package)
    unreviewed = {
        where: sorted(set(calls) - UNRESOLVABLE_REVIEWED.get(where, set()))
        for where, calls in unresolvable.items()
    }
    unreviewed = {where: calls for where, calls in unreviewed.items() if calls}
    assert unreviewed == {}, (
        f"polymimic-{package} imports modules named at run time, which this test cannot check; "
        f"name the module with a constant, or review and add to UNRESOLVABLE_REVIEWED: {unreviewed}"
    )
    prefix = f"packages/{package}/"
    stale = {
        where: sorted(calls - set(unresolvable.get(where, [])))
        for where, calls in UNRESOLVABLE_REVIEWED.items()
        if where.startswith(prefix) and calls - set(unresolvable.get(where, []))
    }
    assert stale == {}, f"UNRESOLVABLE_REVIEWED lists calls no longer there: {stale}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_declared_dependencies_cover_imports_and_no_forbidden_package(package: str) -> None:
    project = _project(package)
    declared = set(declared_imports(project))
    found, _ = _imports(package)
    used = {m for m in found if m in KNOWN} - {f"polymimic_{package}"}
    transitive = set().union(*(TRANSITIVE.get(d, set()) for d in declared))
    missing = {m: found[m] for m in used - declared - transitive}
    assert missing == {}, f"polymimic-{package} imports but does not declare: {missing}"
    forbidden = forbidden_declared(package, project)
    assert forbidden == {}, f"polymimic-{package} declares what DESIGN.md forbids: {forbidden}"


# ---- the parser catches what a split(">") parser missed ----------------------------------


@pytest.mark.parametrize(
    ("package", "project", "name"),
    [
        ("policies", {"dependencies": ["pytorch-lightning<3"]}, "lightning"),
        ("policies", {"dependencies": ["pytorch_lightning"]}, "lightning"),
        ("policies", {"dependencies": ["PyTorch.Lightning>=2"]}, "lightning"),
        ("policies", {"dependencies": ["lightning ; python_version>='3.11'"]}, "lightning"),
        ("policies", {"dependencies": ['lightning; python_version < "3.12"']}, "lightning"),
        ("policies", {"dependencies": ["Lightning==2.5"]}, "lightning"),
        ("policies", {"dependencies": ["lightning!=2.5.0"]}, "lightning"),
        ("policies", {"dependencies": ["lightning~=2.5"]}, "lightning"),
        ("policies", {"dependencies": ["lightning<3"]}, "lightning"),
        ("policies", {"dependencies": ["lightning[extra]>=2.4"]}, "lightning"),
        ("policies", {"dependencies": ["lightning @ https://example.com/l.whl"]}, "lightning"),
        ("policies", {"dependencies": ["lightning-fabric"]}, "lightning"),
        (
            "policies",
            {"dependencies": ["torch>=2.4"], "optional-dependencies": {"cfg": ["hydra-core~=1.3"]}},
            "hydra",
        ),
        ("strategies", {"dependencies": ["Hydra_Core==1.3.2"]}, "hydra"),
        ("data", {"optional-dependencies": {"x": ["polymimic-train"]}}, "polymimic_train"),
        ("data", {"dependencies": ["polymimic_eval~=0.2"]}, "polymimic_eval"),
        (
            "eval",
            {"dependencies": ["polymimic-policies[pi]~=0.2 ; sys_platform=='linux'"]},
            "polymimic_policies",
        ),
        ("policies", {"dependencies": ["matplotlib>=3.8"]}, "matplotlib"),
    ],
)
def test_forbidden_dependency_is_flagged_however_written(
    package: str, project: dict[str, Any], name: str
) -> None:
    assert name in forbidden_declared(package, project)


def test_allowed_dependencies_are_not_flagged_however_written() -> None:
    project = {
        "dependencies": [
            "torch>=2.4,<3 ; python_version >= '3.11'",
            "Lightning[extra]~=2.6",
            "pytorch-lightning!=2.5.0",
        ],
        "optional-dependencies": {"x": ["TORCH==2.15.0"]},
    }
    assert forbidden_declared("strategies", project) == {}
    assert forbidden_declared("train", {"dependencies": ["Pillow>=10", "hydra-core"]}) == {}


def test_an_unparseable_requirement_fails_rather_than_passes() -> None:
    from packaging.requirements import InvalidRequirement

    with pytest.raises(InvalidRequirement):
        declared_imports({"dependencies": ["lightning >>> 2"]})


@pytest.mark.parametrize(
    ("package", "source", "name"),
    [
        ("policies", 'import importlib\nimportlib.import_module("lightning")', "lightning"),
        ("policies", 'importlib.import_module("lightning.pytorch.strategies")', "lightning"),
        ("policies", 'import importlib as il\nil.import_module(name="hydra")', "hydra"),
        ("policies", '__import__("hydra")', "hydra"),
        ("policies", 'import builtins\nbuiltins.__import__("hydra.utils")', "hydra"),
        (
            "data",
            'from importlib import import_module\nimport_module("polymimic_train")',
            "polymimic_train",
        ),
        (
            "data",
            'from importlib import import_module as load\nload("polymimic_eval.metrics")',
            "polymimic_eval",
        ),
        ("strategies", 'importlib.import_module(f"hydra.{part}")', "hydra"),
        ("strategies", 'importlib.import_module(f"polymimic_train")', "polymimic_train"),
        ("eval", "def f():\n    import lightning\n", "lightning"),
        (
            "eval",
            "if TYPE_CHECKING:\n    from polymimic_policies import pi\n",
            "polymimic_policies",
        ),
    ],
)
def test_forbidden_import_is_flagged_static_or_dynamic(
    package: str, source: str, name: str
) -> None:
    modules, unresolvable = scan_source(source)
    assert name in forbidden_imports(package, modules)
    assert unresolvable == []


@pytest.mark.parametrize(
    "source",
    [
        "importlib.import_module(module_name)",
        'importlib.import_module(f"{root}.policies")',
        'importlib.import_module(f"polymimic_{name}")',
        "__import__(name)",
        "importlib.import_module()",
    ],
)
def test_dynamic_import_of_a_computed_name_is_reported_not_crashed_on(source: str) -> None:
    modules, unresolvable = scan_source(source)
    assert modules == set()
    assert unresolvable == [ast.unparse(ast.parse(source))]


def test_relative_and_unrelated_calls_are_not_imports() -> None:
    source = (
        "import importlib\n"
        'importlib.import_module(".hpt", __package__)\n'
        'importlib.import_module(f".{name}", __package__)\n'
        'other.import_module("lightning")\n'
        "importlib.reload(x)\n"
    )
    assert scan_source(source) == ({"importlib"}, [])
