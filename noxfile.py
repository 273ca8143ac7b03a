"""Test, lint, type-check and benchmark sessions. `uv run nox` runs the default set.

Each `tests-<package>` session installs that one package (and only what it depends on)
from uv.lock into the session's venv, so a package that leans on another undeclared
fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import nox
from nox.command import CommandFailed

nox.options.default_venv_backend = "uv"
nox.options.reuse_existing_virtualenvs = True

PACKAGES = ("data", "policies", "strategies", "eval", "serve", "sim", "train")
# --durations: CI's log names the slowest tests, where its time goes
PYTEST = ("pytest", "--import-mode=importlib", "-p", "no:cacheprovider", "--durations=20")
ROOT = Path(__file__).resolve().parent
nox.options.sessions = [f"tests-{p}" for p in PACKAGES] + ["tests", "matrix", "tests-slurm"]
nox.options.sessions += ["gate-sim", "lint", "typecheck"]


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


# What a robot computer must not get with polymimic-serve (checked in tests-serve's venv).
TRAINING_STACK = ("lightning", "pytorch-lightning", "hydra-core", "torchdata", "tensorboard",
                  "polymimic-train", "polymimic-strategies")  # fmt: skip
_INSTALLED_CHECK = """
import sys
from importlib.metadata import distributions
installed = {d.metadata["Name"].lower() for d in distributions()}
found = sorted(installed & set(sys.argv[1:]))
if found:
    sys.exit(f"polymimic-serve brought the training stack: {found}")
print(f"polymimic-serve alone: {len(installed)} distributions, none of {sys.argv[1:]}")
"""


def _apt_install(session: nox.Session, program: str, packages: list[str]) -> None:
    """Install Debian's `packages` (as root, through apt) where `program` is missing."""
    if shutil.which(program, path=f"/usr/sbin:/usr/bin:/sbin:{os.environ.get('PATH', '')}"):
        return
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        session.error(f"{program} is not installed: apt-get install -y {' '.join(packages)}")
    session.run("apt-get", "update", "-qq", external=True)
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    session.run("apt-get", "install", "-y", "-qq", *packages, external=True, env=env)


def _package_session(package: str) -> None:
    @nox.session(name=f"tests-{package}")
    def tests_package(session: nox.Session) -> None:
        sync(session, "--package", f"polymimic-{package}", "--all-extras", "--group", "test")
        env = {}
        if package == "data":  # `view --web` is loaded in a real headless browser
            _apt_install(session, "chromium", ["chromium"])
            env["POLYMIMIC_REQUIRE_BROWSER"] = "1"
        if package == "serve":
            session.run("python", "-c", _INSTALLED_CHECK, *TRAINING_STACK)
        session.run(*PYTEST, f"packages/{package}/tests", *session.posargs, env=env)


for _package in PACKAGES:
    _package_session(_package)


@nox.session
def tests(session: nox.Session) -> None:
    """The cross-package tests (tests/), with every package and extra installed.

    Each package's own tests run in its `tests-<package>` session (nothing there is skipped
    for want of what only this session installs), so they are not run again here; nor is
    the matrix (tests/test_matrix.py), which `matrix` runs whole. The README's commands run
    here (tests/test_readme_commands.py), in a venv of their own.
    """
    unsessioned = sorted(
        {p.parent.name for p in ROOT.glob("packages/*/pyproject.toml")} - set(PACKAGES)
    )
    if unsessioned:
        session.error(f"packages without a tests-<package> session (PACKAGES): {unsessioned}")
    sync(session, "--all-packages", "--all-extras")
    session.run(
        *PYTEST,
        "-m",
        "not slow",
        "--ignore=tests/test_matrix.py",
        "--ignore=tests/slurm",
        "tests",
        *session.posargs,
    )


@nox.session
def matrix(session: nox.Session) -> None:
    """Every model config trained on every data config through the app (one over 10M cut to
    a CPU size), and each over 10M at its own size once."""
    sync(session, "--all-packages", "--all-extras")
    session.run(*PYTEST, "tests/test_matrix.py", *session.posargs)


SLURM_PACKAGES = ("slurm-wlm", "munge")


@nox.session(name="tests-slurm")
def tests_slurm(session: nox.Session) -> None:
    """`train -m hydra/launcher=slurm` on a real one-node SLURM the tests start themselves.

    Installs Debian's slurm-wlm and munge where they are missing (as root, through apt);
    the daemons run as the tests' own processes, in a folder of their own, and stop with
    them.
    """
    _apt_install(session, "slurmctld", list(SLURM_PACKAGES))
    sync(session, "--all-packages", "--all-extras")
    session.run(*PYTEST, "tests/slurm", *session.posargs)


@nox.session(name="gate-sim")
def gate_sim(session: nox.Session) -> None:
    """The closed-loop gate: a policy trained from scratch must still do its task.

    Records scripted demonstrations, trains a small policy for a fixed budget and fails when
    the lower end of its success rate's 95% interval falls below the threshold set from
    clean runs (benchmarks/gate_sim.py; `-- --plant NAME` plants a regression, `-- --runs
    20` measures the false-alarm rate).
    """
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/gate_sim.py", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    sync(session, "--only-group", "dev")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def typecheck(session: nox.Session) -> None:
    sync(session, "--all-packages", "--all-extras")
    session.run("pyright")


@nox.session(name="bench-data")
def bench_data(session: nox.Session) -> None:
    # s3 and the test group (moto's S3 server on 127.0.0.1): the remote loader's figure
    sync(session, "--package", "polymimic-data", "--extra", "lerobot", "--extra", "s3",
         "--extra", "loaders", "--extra", "viz", "--group", "test")  # fmt: skip
    session.run("python", "benchmarks/loader.py", *session.posargs)
    if not session.posargs:  # and at scale: 10,000 small episodes, generated once and kept
        session.run("python", "benchmarks/loader.py", "--episodes", "10000")
    session.run("python", "benchmarks/remote_loader.py")
    session.run("python", "benchmarks/data_transforms.py")
    session.run("python", "benchmarks/lerobot_import.py")
    session.run("python", "benchmarks/view_memory.py")


@nox.session(name="bench-policies")
def bench_policies(session: nox.Session) -> None:
    """Parameter counts of every model config (on the meta device); HPT-12M's CPU training
    speed and memory, eager and compiled; HPT-300M and 1B in bf16 where a GPU is."""
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/policies.py", *session.posargs)


@nox.session(name="bench-train")
def bench_train(session: nox.Session) -> None:
    """`train --help` and misconfigured runs: seconds to answer; `-- --default-run`: the
    default `train`'s time, throughput, data wait and learning."""
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/train_startup.py", *session.posargs)


@nox.session(name="bench-strategies")
def bench_strategies(session: nox.Session) -> None:
    """fp32 against bf16 gradient all-reduce, on loopback and on a link shaped to 1 Gbit/s."""
    sync(session, "--package", "polymimic-strategies")
    session.run("python", "benchmarks/allreduce.py", *session.posargs)


@nox.session(name="bench-serve")
def bench_serve(session: nox.Session) -> None:
    """The policy server against `predict` (loopback round trip, p50/p99), requests/s with 1,
    4 and 16 clients (one at a time and with the default batching), memory under abuse (the
    server's peak RSS while a client sends the largest message it accepts, another client's
    p99 meanwhile; a message over the cap), and rtc's chunk joins against chunk's, on the
    default run's policy (trained briefly first; `-- --checkpoint CKPT` to serve one)."""
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/serve.py", *session.posargs)


@nox.session(name="bench-sim")
def bench_sim(session: nox.Session) -> None:
    """The scripted expert's success rate and recording speed; a rollout's step rate against
    the bare task's (not in CI: simulators take minutes)."""
    sync(session, "--package", "polymimic-sim", "--all-extras")
    session.run("python", "benchmarks/sim.py", *session.posargs)


@nox.session(name="bench-h2r")
def bench_h2r(session: nox.Session) -> None:
    """Human-to-robot transfer in closed loop: the robot's success from N of its own
    demonstrations, alone and cotrained with a person's (not in CI: each cell trains for
    minutes to an hour; `-- --robot-demos 10 --steps 500` for a short one)."""
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/h2r.py", *session.posargs)


@nox.session(name="bench-closed-loop")
def bench_closed_loop(session: nox.Session) -> None:
    """A headline closed-loop figure from scratch: record, train, 200 held-out episodes,
    saved under benchmarks/results/closed_loop/ (`-- --headline transfer_cube`, `insertion`
    or `mt10`; not in CI: one to two and a quarter hours each on a 2-core CPU)."""
    sync(session, "--all-packages", "--all-extras")
    session.run("python", "benchmarks/closed_loop.py", *session.posargs)


def _project(package: str) -> dict:
    return tomllib.loads((ROOT / "packages" / package / "pyproject.toml").read_text())["project"]


def _workspace_closure(package: str) -> dict[str, set[str]]:
    """`package` (with all its extras) and every polymimic package it needs, with the extras
    asked of each: {"train": {...}, "policies": {"pi", "rdt"}, ...}."""
    needed: dict[str, set[str]] = {package: set(_project(package).get("optional-dependencies", {}))}
    todo = [package]
    while todo:
        project = _project(todo.pop())
        requirements = list(project.get("dependencies", []))
        for extra in needed.get(project["name"].removeprefix("polymimic-"), ()):
            requirements += project.get("optional-dependencies", {}).get(extra, [])
        for requirement in requirements:
            match = re.match(r"polymimic-(\w+)\s*(?:\[([^\]]*)\])?", requirement)
            if not match:
                continue
            name, extras = match[1], {e.strip() for e in (match[2] or "").split(",") if e.strip()}
            if name not in needed or not extras <= needed[name]:
                needed[name] = needed.get(name, set()) | extras
                todo.append(name)
    return needed


def _with_extras(target: str, extras: set[str]) -> str:
    return f"{target}[{','.join(sorted(extras))}]" if extras else target


def readme_blocks(package: str) -> list[str]:
    """The ```python blocks of packages/<package>/README.md (as policies/tests/test_readme.py)."""
    readme = (ROOT / "packages" / package / "README.md").read_text()
    return re.findall(r"```python\n(.*?)```", readme, flags=re.DOTALL)


@nox.session(venv_backend="none")
def build(session: nox.Session) -> None:
    """Every package's wheel and sdist; then each wheel alone in a clean venv, our own
    dependencies found only among the built wheels (--find-links): it imports and its
    README's examples run."""
    tmp = Path(session.create_tmp()).resolve()
    dist = tmp / "dist"
    shutil.rmtree(dist, ignore_errors=True)
    session.run("uv", "build", "--all-packages", "--no-progress", "-o", str(dist), external=True)
    failed: list[str] = []
    for package in PACKAGES:
        module = f"polymimic_{package}"
        (wheel,) = dist.glob(f"{module}-*.whl")
        (sdist,) = dist.glob(f"{module}-*.tar.gz")
        session.log(f"{package}: {wheel.name}, {sdist.name}")
        venv = tmp / f"venv-{package}"
        shutil.rmtree(venv, ignore_errors=True)
        session.run(
            "uv", "venv", "--no-progress", "-q", str(venv), "--python", "3.11", external=True
        )
        python = str(venv / "bin" / "python")
        extras = set(_project(package).get("optional-dependencies", {}))
        session.run(
            "uv", "pip", "install", "--no-progress", "--python", python,
            "--find-links", str(dist), _with_extras(str(wheel), extras),
            external=True,
        )  # fmt: skip
        listed = session.run(
            "uv", "pip", "list", "--python", python, "--format", "json",
            external=True, silent=True, log=False, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        ours = {d["name"]: d for d in json.loads(str(listed)) if d["name"].startswith("polymimic")}
        for name, dist_info in ours.items():
            # polymimic-* are not on PyPI: each came from dist/, as a wheel, not editable
            if dist_info.get("editable_project_location") or not any(
                dist.glob(f"{name.replace('-', '_')}-{dist_info['version']}-*.whl")
            ):
                session.error(f"{package}: {name} {dist_info} did not come from {dist}")
        session.log(f"{package}: installed {sorted(ours)} from {dist.name}/")
        work = tmp / f"run-{package}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        with session.chdir(work):
            session.run(
                python, "-c", f"import {module}; print({module}.__version__)", external=True
            )
            for index, block in enumerate(readme_blocks(package)):
                script = work / f"readme_block{index}.py"
                script.write_text(block)
                block_dir = work / f"block{index}"
                block_dir.mkdir()
                with session.chdir(block_dir):
                    session.log(f"{package}: README block {index}")
                    try:
                        session.run(python, str(script), external=True)
                    except CommandFailed:
                        failed.append(f"packages/{package}/README.md block {index}")
    if failed:  # every package is tried first, so one run names all the broken examples
        session.error("README examples failed: " + ", ".join(failed))


@nox.session(name="tests-lowest")
@nox.parametrize("package", PACKAGES)
def tests_lowest(session: nox.Session, package: str) -> None:
    """One package's tests with its direct dependencies at their declared lower bounds.

    `uv pip compile --resolution lowest-direct` of the package (all extras) and its test
    group, our own packages it needs editable from their paths (not from uv.lock, which
    holds the highest versions); `uv pip sync` makes the venv exactly that.
    """
    tmp = Path(session.create_tmp()).resolve()
    requirements = tmp / "requirements.in"
    requirements.write_text(
        "".join(
            f"-e {_with_extras(str(ROOT / 'packages' / name), extras)}\n"
            for name, extras in _workspace_closure(package).items()
        )
    )
    python = str(Path(session.virtualenv.location) / "bin" / "python")
    lowest = tmp / "requirements-lowest.txt"
    session.run_install(
        "uv", "pip", "compile", "--no-progress", "-q", "--resolution", "lowest-direct",
        "--python", python, str(requirements),
        "--group", f"{ROOT / 'packages' / package / 'pyproject.toml'}:test",
        "--no-header", "--no-annotate", "-o", str(lowest),
        external=True,
    )  # fmt: skip
    session.run_install(
        "uv", "pip", "sync", "--no-progress", "--python", python, str(lowest), external=True
    )
    session.log("resolved: " + " ".join(
        line for line in lowest.read_text().split() if "==" in line and "nvidia" not in line
    ))  # fmt: skip
    session.run(*PYTEST, f"packages/{package}/tests", *session.posargs)
