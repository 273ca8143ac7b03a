"""The import rules of shared/DESIGN.md: each package imports only what it may."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIRD_PARTY = {
    "numpy",
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
}
ALLOWED: dict[str, set[str]] = {
    # fsspec: the optional `s3` extra, imported only inside remote_episodes' functions.
    # numcodecs, google_crc32c: zarr's own codecs, used to read its chunks by byte range.
    # torchdata: its StatefulDataLoader, so that a resumed run continues the same order.
    "data": {
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
    # safetensors: `export`; tensorboard, PIL: clips and plots written to TensorBoard.
    "train": {
        "numpy",
        "safetensors",
        "tensorboard",
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
    },
}
OURS = {f"polymimic_{p}" for p in ALLOWED}


def _imports(package: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in (ROOT / "packages" / package / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                found.setdefault(name.split(".")[0], []).append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_package_imports_only_what_design_allows(package: str) -> None:
    own = f"polymimic_{package}"
    bad = {
        mod: where
        for mod, where in _imports(package).items()
        if mod != own and mod not in sys.stdlib_module_names and mod not in ALLOWED[package]
    }
    assert bad == {}, f"polymimic-{package} imports what DESIGN.md forbids: {bad}"


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_declared_dependencies_cover_imports_and_no_forbidden_package(package: str) -> None:
    project = tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]
    optional = [d for extra in project.get("optional-dependencies", {}).values() for d in extra]
    declared = {
        d.split(">")[0].split("=")[0].split("[")[0].strip().replace("-", "_")
        for d in [*project["dependencies"], *optional]
    }
    declared = {"hydra" if d == "hydra_core" else d for d in declared}
    used = {m for m in _imports(package) if m in THIRD_PARTY or m in OURS} - {
        f"polymimic_{package}"
    }
    transitive = {"omegaconf"} if "hydra" in declared else set()
    assert used - declared - transitive == set(), "imported but not declared"
    forbidden = declared & (THIRD_PARTY | OURS) - ALLOWED[package] - {"tensorboard"}
    assert forbidden == set()
