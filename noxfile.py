"""Test, lint, type-check and benchmark sessions. `uv run nox` runs the default set.

Each `tests-<package>` session installs that one package (and only what it depends on)
from uv.lock into the session's venv, so a package that leans on another undeclared
fails here.
"""

from __future__ import annotations

import nox

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ("data", "policies", "strategies", "eval", "train")
PYTEST = ("pytest", "--import-mode=importlib", "-p", "no:cacheprovider")
nox.options.sessions = [f"tests-{p}" for p in PACKAGES] + ["tests", "matrix", "lint", "typecheck"]


def sync(session: nox.Session, *args: str) -> None:
    """`uv sync --locked` into this session's venv (not the project's .venv)."""
    session.run_install(
        "uv",
        "sync",
        "--locked",
        "--no-progress",
        *args,
        env={"UV_PROJECT_ENVIRONMENT": session.virtualenv.location},
        external=True,
    )


def _package_session(package: str) -> None:
    @nox.session(name=f"tests-{package}")
    def tests_package(session: nox.Session) -> None:
        sync(session, "--package", f"polymimic-{package}", "--all-extras", "--group", "test")
        session.run(*PYTEST, f"packages/{package}/tests", *session.posargs)


for _package in PACKAGES:
    _package_session(_package)


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests and the cross-package tests, with everything installed.

    Tests marked slow (real-size models in the matrix) are left to `matrix`.
    """
    sync(session, "--all-packages")
    packages = (f"packages/{p}/tests" for p in PACKAGES)
    session.run(*PYTEST, "-m", "not slow", *packages, "tests", *session.posargs)


@nox.session
def matrix(session: nox.Session) -> None:
    """Every model config trained on every data config through the app, real sizes too."""
    sync(session, "--all-packages")
    session.run(*PYTEST, "tests/test_matrix.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    sync(session, "--only-group", "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    sync(session, "--all-packages")
    session.run("pyright")


@nox.session(name="bench-data")
def bench_data(session: nox.Session) -> None:
    sync(session, "--package", "polymimic-data")
    session.run("python", "benchmarks/loader.py", *session.posargs)
    session.run("python", "benchmarks/data_transforms.py")


@nox.session(name="bench-policies")
def bench_policies(session: nox.Session) -> None:
    """Parameter counts of every model config (on the meta device); HPT-12M's CPU training
    speed and memory, eager and compiled; HPT-300M and 1B in bf16 where a GPU is."""
    sync(session, "--all-packages")
    session.run("python", "benchmarks/policies.py", *session.posargs)


@nox.session(name="bench-train")
def bench_train(session: nox.Session) -> None:
    """`train --help` and misconfigured runs: seconds to answer; `-- --default-run`: the
    default `train`'s time, throughput, data wait and learning."""
    sync(session, "--all-packages")
    session.run("python", "benchmarks/train_startup.py", *session.posargs)


@nox.session(name="bench-strategies")
def bench_strategies(session: nox.Session) -> None:
    """fp32 against bf16 gradient all-reduce, on loopback and on a link shaped to 1 Gbit/s."""
    sync(session, "--package", "polymimic-strategies")
    session.run("python", "benchmarks/allreduce.py", *session.posargs)
