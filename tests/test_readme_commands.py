"""The front door: every command in the root README's ```sh blocks runs as written.

The commands run as subprocesses, from the checkout, in a venv made as `uv run` makes one
on a fresh clone (`uv sync --locked` into a new environment: the root project's
dependencies and the dev group, no other extras), so a README command that needs an
extra the workspace does not install fails here as it would for a new user. The venv's
executables are called directly (`uv run X` -> `<venv>/bin/X`): the venv is synced once
and never again. No data, cache or run is written into the checkout (only Python's
bytecode caches, which git ignores): POLYMIMIC_DATA_ROOT, POLYMIMIC_CACHE_DIR and
POLYMIMIC_RUNS_ROOT are in a tmp dir, and nothing is downloaded (HF_HUB_OFFLINE).

Each command must match a rule below; a command no rule knows fails its test, so a README
that grows a command grows a rule, and one that rots (a renamed override or option, a
missing extra, a wrong CLI flag, a session nox does not have) fails. The rules:

- Placeholders become generated data: `/data/eva` synthetic eva episodes
  (`polymimic_data.synthetic.ensure_synthetic_episodes`), `/data/lerobot/aloha_cube` a
  LeRobot v3 dataset as lerobot writes it (`polymimic_data.testing.write_lerobot_dataset`),
  `/data/polymimic/...` a tmp folder, `/models/paligemma-3b-pt-224` a tiny PaliGemma
  (`polymimic_policies.make_tiny_paligemma`), and
  `runs/<name>/<date>_<time>_<id>` the run directory an earlier command made. Any other
  `/data/...`, `/models/...` or `<...>` is unknown.
- `train` runs shortened by appended overrides (Hydra: the last value wins, so the README's
  own overrides are still parsed and checked): SHORT, and SYNTHETIC_SIZE for synthetic data.
  Every run is on the CPU. A GPU line (`trainer.accelerator=gpu`) is for a model at a GPU
  size: its config is kept and cut to a CPU size (`polymimic_train.testing.cpu_size`); Pi at
  PaliGemma 3B gets the tiny PaliGemma for its POLYMIMIC_PALIGEMMA_DIR. A completed run must
  print its run directory.
- Runs that a later README line resumes (`name=fold`, then `resume=...`) are killed
  (SIGKILL, as a crash or a preemption would) once they have written a checkpoint, each
  resume continuing two steps further; the last one completes and must print the run
  directory it continued in place.
- `polymimic-data` commands run as written (on the generated data).
- `polymimic-sim record` runs with `--episodes 2` appended, into a tmp folder for
  `/data/sim/...`, before the commands that read that folder; `evaluate ... sim=<task>` on
  a run's checkpoint runs after the command that makes the run, with `sim.episodes=1`.
- `polymimic-serve` on a run's checkpoint (`runs/<name>/<date>_<time>_<id>/...`) runs after
  the README's command that makes that run, on a free port (`--port 0` appended): once it
  says where it serves, a client reads the metadata and sends one observation with the
  README's robot cameras; it must answer a chunk, and stop cleanly on Ctrl-C.
- `uv run nox ...` lines run with `--list` appended: nox parses the line as written and
  names the sessions it selects (an unknown session fails) without running them. Running
  them here would build a venv per session and take the whole CI's time, and `tests`
  would run this test inside itself.
- Install lines (`curl ... | sh`, `pip install uv`) are skipped: the test runs under uv.

Commands without a dependency between them run two at a time (this machine's two cores),
each on one torch thread (OMP_NUM_THREADS=1: two runs of two threads each on two cores took
twice as long); a chain (the LeRobot import and what reads it; a run and its resumes) runs
in order. A command running past TIMEOUT_S is killed and fails.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from polymimic_train.testing import cpu_size

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
TIMEOUT_S = 300  # per command; a hung run (e.g. a DDP collective mismatch) fails, not waits

SHORT = [
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=20",
    "callbacks.trajectory_video.max_frames=4",
]
SYNTHETIC_SIZE = [
    "data.synthetic.episodes=3",
    "data.synthetic.frames=20",
    "data.synthetic.height=48",
    "data.synthetic.width=64",
]
DEFAULT_DATA = "synthetic_eva"  # configs/train.yaml's defaults
DEFAULT_MODEL = "hpt_small"
PALIGEMMA_DIR = "POLYMIMIC_PALIGEMMA_DIR"
RUN_PLACEHOLDER = re.compile(r"^runs/([\w.-]+)/<date>_<time>_<id>$")
RUN_FILE_PLACEHOLDER = re.compile(r"^runs/([\w.-]+)/<date>_<time>_<id>(/[\w./-]+)$")
PATH_PLACEHOLDER = re.compile(r"/(?:data|models)/[^\],\s]*")


class UnknownCommand(Exception):
    """A README command no rule of this test knows how to run."""


@dataclass(frozen=True)
class Command:
    """One README command: its text (comment dropped), leading VAR=value, then argv."""

    text: str
    env: dict[str, str]
    argv: list[str]


def readme_commands(readme: str) -> list[Command]:
    """Every command in the ```sh blocks, once each, in order (continuations joined)."""
    commands: dict[str, Command] = {}
    for block in re.findall(r"```sh\n(.*?)```", readme, flags=re.DOTALL):
        for line in re.sub(r"\\\n", " ", block).splitlines():
            tokens = shlex.split(line, comments=True)
            if not tokens:
                continue
            env = {}
            while tokens and re.match(r"^[A-Za-z_]\w*=", tokens[0]):
                key, _, value = tokens.pop(0).partition("=")
                env[key] = value
            text = shlex.join([f"{k}={v}" for k, v in env.items()] + tokens)
            commands.setdefault(text, Command(text, env, tokens))
    return list(commands.values())


COMMANDS = readme_commands(README.read_text())


@dataclass
class Data:
    """The generated stand-ins for the README's placeholders, and where runs go."""

    tmp: Path
    eva: Path
    lerobot: Path
    paligemma: Path

    @property
    def runs(self) -> Path:
        return self.tmp / "runs"

    def path(self, placeholder: str) -> str:
        if placeholder == "/data/eva":
            return str(self.eva)
        if placeholder == "/data/lerobot/aloha_cube":
            return str(self.lerobot)
        if placeholder.startswith(("/data/polymimic/", "/data/sim/")):
            return str(self.tmp / placeholder.removeprefix("/data/"))
        if placeholder == "/models/paligemma-3b-pt-224":
            return str(self.paligemma)
        raise UnknownCommand(f"no generated data stands in for {placeholder}")


@dataclass
class Step:
    """What runs for one README command."""

    command: Command
    program: str  # the executable in the README venv's bin/
    args: list[str]  # may hold runs/<name>/<...> placeholders, resolved when it runs
    env: dict[str, str] = field(default_factory=dict)
    check: Callable[[str], None] = lambda output: None  # on a completed command's output
    killed_after_checkpoint: str | None = None  # a run name: SIGKILL once it checkpoints
    chain: str | None = None  # steps of one chain run in order, in one worker
    serves: Callable[[str], None] | None = None  # a server: called with its URL, then stopped


def _choice(args: list[str], group: str, default: str) -> str:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{group}=")]
    return values[-1] if values else default


def _with_placeholders(value: str, data: Data) -> str:
    run = value.split("=", 1)[-1]
    if "<" in value and not (RUN_PLACEHOLDER.match(run) or RUN_FILE_PLACEHOLDER.match(run)):
        raise UnknownCommand(f"unknown placeholder in {value!r}")
    return PATH_PLACEHOLDER.sub(lambda m: data.path(m.group(0)), value)


def _prints_run_dir(output: str) -> None:
    assert re.search(r"^run dir: ", output, flags=re.MULTILINE), "no 'run dir:' printed"


def _resumed(args: list[str]) -> str | None:
    """The run name a train command resumes (resume=runs/<name>/..., or name= beside it)."""
    resume = _choice(args, "resume", "auto")
    if resume == "auto":
        return None
    if match := RUN_PLACEHOLDER.match(resume):
        return match[1]
    return _choice(args, "name", "") or None


def _shortened(command: Command, data: Data) -> tuple[list[str], dict[str, str]]:
    """A train command's overrides and environment: placeholders filled, shortened, on the
    CPU, a GPU line's model at a CPU size."""
    args = [_with_placeholders(a, data) for a in command.argv[3:]]
    env = {k: _with_placeholders(v, data) for k, v in command.env.items()}
    gpu_line = "trainer.accelerator=gpu" in args
    if set(env) - {PALIGEMMA_DIR} or (env and not gpu_line):
        raise UnknownCommand(f"no rule for the environment {sorted(env)} here")
    args += SHORT
    if _choice(args, "data", DEFAULT_DATA).startswith("synthetic"):
        args += SYNTHETIC_SIZE
    if gpu_line:
        try:  # the README's config still composes, builds and trains through the app
            args += cpu_size(_choice(args, "model", DEFAULT_MODEL))
        except KeyError as exc:
            raise UnknownCommand(f"on a GPU line: {exc.args[0]}") from None
    return args, env


def train_steps(commands: list[Command], data: Data) -> dict[str, Step | UnknownCommand]:
    """The `uv run train` commands: shortened, on the CPU; a run that is resumed later is
    killed once it has a checkpoint."""
    steps: dict[str, Step | UnknownCommand] = {}
    train = [c for c in commands if c.argv[:3] == ["uv", "run", "train"]]
    killed: dict[str, int] = {}  # run name -> runs killed so far
    for index, command in enumerate(train):
        if command.argv[3:] == ["--help"] and not command.env:
            steps[command.text] = Step(command, "train", ["--help"], check=_has_groups)
            continue
        try:
            args, env = _shortened(command, data)
        except UnknownCommand as exc:
            steps[command.text] = exc
            continue
        step = Step(command, "train", args, env, check=_prints_run_dir)
        name = _resumed(args) or _choice(args, "name", "")
        if name and name in {_resumed(c.argv[3:]) for c in train[index + 1 :]}:
            step.chain, step.killed_after_checkpoint = f"run {name}", name
            step.args.append("trainer.max_steps=1000")  # never reached: it is killed
            killed[name] = killed.get(name, 0) + 1
        elif name and _resumed(args):  # two steps past the checkpoint of the last kill
            step.chain, step.check = f"run {name}", _continued_in_place(data, name)
            step.args.append(f"trainer.max_steps={2 * (killed.get(name, 0) + 1)}")
        steps[command.text] = step
    return steps


def _has_groups(output: str) -> None:
    assert "== Configuration groups ==" in output and "model:" in output, output[-2000:]


def _continued_in_place(data: Data, name: str) -> Callable[[str], None]:
    def check(output: str) -> None:
        (run_dir,) = [p for p in (data.runs / name).iterdir() if p.is_dir()]
        printed = re.findall(r"^run dir: (.*)$", output, flags=re.MULTILINE)
        assert printed == [str(run_dir.resolve())], (printed, run_dir)

    return check


def nox_step(command: Command) -> Step:
    args = command.argv[3:]
    if command.env or "--" in args:
        raise UnknownCommand("nox with an environment or posargs")
    named = args[args.index("-s") + 1 :] if "-s" in args else []
    if any(a.startswith("-") for a in named) or (args and "-s" not in args):
        raise UnknownCommand(f"nox options this test does not parse: {args}")

    def check(output: str) -> None:
        selected = re.findall(r"^\* (\S+)", output, flags=re.MULTILINE)
        assert selected, output[-2000:]
        assert set(named) <= set(selected), (named, selected)

    return Step(command, "nox", [*args, "--list"], check=check)


def data_step(command: Command, data: Data) -> Step:
    if command.env:
        raise UnknownCommand("polymimic-data with an environment")
    return Step(command, "polymimic-data", [_with_placeholders(a, data) for a in command.argv[3:]])


def _run_name(args: list[str]) -> str:
    """The name of the run a train command makes (train.yaml: <model>-<data> by default)."""
    default = f"{_choice(args, 'model', DEFAULT_MODEL)}-{_choice(args, 'data', DEFAULT_DATA)}"
    return _choice(args, "name", "") or default


def sim_record_step(command: Command, data: Data) -> Step:
    if command.env or command.argv[3:4] != ["record"]:
        raise UnknownCommand("polymimic-sim other than record, or with an environment")
    args = [_with_placeholders(a, data) for a in command.argv[3:]]
    return Step(command, "polymimic-sim", [*args, "--episodes", "2"])


def evaluate_sim_step(command: Command, data: Data) -> Step:
    args = [_with_placeholders(a, data) for a in command.argv[3:]]
    runs = [m[1] for a in args if (m := RUN_FILE_PLACEHOLDER.match(a.split("=", 1)[-1]))]
    if command.env or len(runs) != 1 or not any(a.startswith("sim=") for a in args):
        raise UnknownCommand("evaluate other than sim=<task> on one run's checkpoint")

    def check(output: str) -> None:
        assert re.search(r"\d+/1 succeeded \(\d+%, 95% interval", output), output[-2000:]

    return Step(command, "evaluate", [*args, "sim.episodes=1"], check=check, chain=f"run {runs[0]}")


def serve_step(command: Command, data: Data) -> Step:
    if command.env:
        raise UnknownCommand("polymimic-serve with an environment")
    args = [_with_placeholders(a, data) for a in command.argv[3:]]
    runs = [m[1] for a in args if (m := RUN_FILE_PLACEHOLDER.match(a))]
    if len(runs) != 1:
        raise UnknownCommand("polymimic-serve of anything but one run's checkpoint")
    cameras = []  # the robot's camera names the README maps, else the policy's own
    if "--camera-map" in args:
        cameras = [
            pair.partition("=")[0] for pair in args[args.index("--camera-map") + 1].split(",")
        ]

    def answers(url: str) -> None:
        import numpy as np

        from polymimic_serve import PolicyClient

        with PolicyClient(url) as client:
            meta = client.get_server_metadata()
            names = cameras or meta["cameras"]
            observation = {
                "state": np.zeros(meta["state_dim"]),
                "images": {name: np.zeros((3, 480, 640), np.uint8) for name in names},
            }
            actions = client.infer(observation)["actions"]
            assert actions.shape == (meta["chunk_length"], meta["action_dim"]), actions.shape

    return Step(command, "polymimic-serve", [*args, "--port", "0"], chain=f"run {runs[0]}",
                serves=answers)  # fmt: skip


@dataclass(frozen=True)
class Skipped:
    why: str


# Commands that read what another writes: the LeRobot dataset, then the episodes imported
# from it (`/data/polymimic/...`) run in one chain, in the README's order.
WRITTEN_BY_A_COMMAND = ("/data/lerobot/", "/data/polymimic/")
RECORDED_BY_A_COMMAND = "/data/sim/"  # recorded by polymimic-sim, read by a run: one chain


def _step(command: Command, data: Data) -> Step | Skipped:
    argv = command.argv
    if argv[:3] == ["uv", "run", "nox"]:
        return nox_step(command)
    if argv[:3] == ["uv", "run", "polymimic-data"]:
        return data_step(command, data)
    if argv[:3] == ["uv", "run", "polymimic-serve"]:
        return serve_step(command, data)
    if argv[:3] == ["uv", "run", "polymimic-sim"]:
        return sim_record_step(command, data)
    if argv[:3] == ["uv", "run", "evaluate"]:
        return evaluate_sim_step(command, data)
    if (argv[:1] == ["curl"] and argv[-2:] == ["|", "sh"]) or argv[:2] == ["pip", "install"]:
        return Skipped("installs uv, which runs this test")
    raise UnknownCommand("no rule for this program")


def plan(commands: list[Command], data: Data) -> dict[str, Step | UnknownCommand | Skipped]:
    """Each command's step, or why it is skipped, or why no rule knows it; README order."""
    trains = train_steps(commands, data)
    plans: dict[str, Step | UnknownCommand | Skipped] = {}
    for command in commands:
        try:
            planned = trains.get(command.text) or _step(command, data)
            if isinstance(planned, Step) and any(RECORDED_BY_A_COMMAND in a for a in command.argv):
                planned.chain = planned.chain or "sim data"
            elif isinstance(planned, Step) and any(
                p in a for a in command.argv for p in WRITTEN_BY_A_COMMAND
            ):
                if planned.chain:
                    raise UnknownCommand(f"in two chains: {planned.chain} and the LeRobot data")
                planned.chain = "lerobot data"
        except UnknownCommand as exc:
            planned = exc
        plans[command.text] = planned
    for planned in list(plans.values()):  # a served or evaluated run: made first, one chain
        if (
            isinstance(planned, Step)
            and planned.program in ("polymimic-serve", "evaluate")
            and planned.chain
        ):
            name = planned.chain.removeprefix("run ")
            makers = [
                p for p in plans.values()
                if isinstance(p, Step) and p.program == "train" and p.args[:1] != ["--help"]
                and _run_name(p.args) == name and not p.killed_after_checkpoint
            ]  # fmt: skip
            if not makers:
                plans[planned.command.text] = UnknownCommand(f"no README command makes {name}")
            elif makers[0].chain and makers[0].chain != planned.chain:
                planned.chain = makers[0].chain
            else:
                makers[0].chain = planned.chain
    return plans


def _checkpoints(runs: Path, name: str | None) -> set[Path]:
    """The checkpoints the `last.ckpt` of each run named `name` points to."""
    if not name:
        return set()
    return {p.resolve() for p in (runs / name).glob("*/checkpoints/last.ckpt") if p.exists()}


def _resolve_runs(args: list[str], data: Data) -> list[str]:
    def resolve(arg: str) -> str:
        key, sep, value = arg.rpartition("=")
        match = RUN_PLACEHOLDER.match(value) or RUN_FILE_PLACEHOLDER.match(value)
        if not match:
            return arg
        tail = match[2] if match.re is RUN_FILE_PLACEHOLDER else ""
        # the newest run of that name holding the file (another run of the name, started by
        # a command running beside this chain, may not have written it yet)
        made = sorted(
            p for p in (data.runs / match[1]).glob("*") if p.is_dir() and (p / tail[1:]).exists()
        )
        assert made, f"no run named {match[1]} was made before {arg}"
        return f"{key}{sep}{made[-1]}{tail}"

    return [resolve(a) for a in args]


def run_step(step: Step, venv: Path, env: dict[str, str], data: Data, log: Path) -> str:
    """Run one step; its output, or an AssertionError naming what went wrong."""
    argv = [str(venv / "bin" / step.program), *_resolve_runs(step.args, data)]
    before = _checkpoints(data.runs, step.killed_after_checkpoint or "")
    start = time.monotonic()
    with log.open("w") as out:
        process = subprocess.Popen(
            argv, cwd=ROOT, env=env | step.env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        try:
            if step.serves is not None:
                return _serve(step, process, log, start)
            while process.poll() is None:
                if time.monotonic() - start > TIMEOUT_S:
                    raise AssertionError(f"still running after {TIMEOUT_S} s")
                if (
                    step.killed_after_checkpoint
                    and _checkpoints(data.runs, step.killed_after_checkpoint) - before
                ):
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
                    return log.read_text()
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
    output = log.read_text()
    if step.killed_after_checkpoint:
        raise AssertionError(f"ended (exit {process.returncode}) before any checkpoint")
    assert process.returncode == 0, f"exit {process.returncode}"
    step.check(output)
    return output


def _serve(step: Step, process: subprocess.Popen[bytes], log: Path, start: float) -> str:
    """Wait for the server's address, let `step.serves` speak to it, stop it with Ctrl-C."""
    assert step.serves is not None
    while not (found := re.search(r"on (ws://[\w.]+:\d+)", log.read_text())):
        assert process.poll() is None, f"exit {process.returncode} before serving"
        assert time.monotonic() - start < TIMEOUT_S, f"not serving after {TIMEOUT_S} s"
        time.sleep(0.2)
    step.serves(found[1])
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=30) == 0, f"exit {process.returncode} after Ctrl-C"
    return log.read_text()


@pytest.fixture(scope="module")
def readme_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv as `uv run` makes it on a fresh clone: the root project's locked dependencies
    (with the extras it names, no others) and the dev group. Hard links from uv's cache
    make this take about a second."""
    uv = os.environ.get("UV") or shutil.which("uv")
    assert uv, "uv is needed (the README's setup)"
    venv = tmp_path_factory.mktemp("readme") / "venv"
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
    subprocess.run(
        [uv, "sync", "--locked", "--no-progress", "-q", "--python", sys.executable],
        cwd=ROOT, env=env | {"UV_PROJECT_ENVIRONMENT": str(venv)}, check=True,
    )  # fmt: skip
    return venv


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Data:
    from polymimic_data.synthetic import ensure_synthetic_episodes
    from polymimic_data.testing import write_lerobot_dataset
    from polymimic_policies import make_tiny_paligemma

    tmp = tmp_path_factory.mktemp("readme_data")
    eva = ensure_synthetic_episodes(
        tmp / "eva", "eva_bimanual", episodes=3, frames=20, height=48, width=64, progress=False
    )
    lerobot = tmp / "lerobot" / "aloha_cube"
    write_lerobot_dataset(lerobot, episodes=3, frames=20)
    return Data(tmp, eva, lerobot, make_tiny_paligemma(tmp / "paligemma-tiny"))


@pytest.fixture(scope="module")
def outcomes(readme_venv: Path, data: Data) -> dict[str, str | Exception | Skipped]:
    """Every README command, run: its output, its AssertionError, or why it did not run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("POLYMIMIC_")}
    env |= {
        "PATH": f"{readme_venv / 'bin'}{os.pathsep}{env.get('PATH', '')}",
        "VIRTUAL_ENV": str(readme_venv),
        "POLYMIMIC_DATA_ROOT": str(data.tmp / "data_root"),
        "POLYMIMIC_CACHE_DIR": str(data.tmp / "cache"),
        "POLYMIMIC_RUNS_ROOT": str(data.runs),
        "CUDA_VISIBLE_DEVICES": "",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
    }
    results: dict[str, str | Exception | Skipped] = {}
    jobs: dict[str, list[Step]] = {}
    for text, planned in plan(COMMANDS, data).items():
        if isinstance(planned, Step):
            jobs.setdefault(planned.chain or text, []).append(planned)
        else:
            results[text] = planned
    logs = data.tmp / "logs"
    logs.mkdir()

    def run_job(steps: list[Step]) -> None:
        for step in steps:
            log = logs / f"{COMMANDS.index(step.command):02d}.log"
            try:
                results[step.command.text] = run_step(step, readme_venv, env, data, log)
            except Exception as exc:  # an AssertionError of run_step's, or an OSError
                tail = log.read_text()[-4000:] if log.exists() else ""
                results[step.command.text] = AssertionError(f"{exc!r}\n--- output:\n{tail}")
                for later in steps[steps.index(step) + 1 :]:
                    results[later.command.text] = AssertionError(
                        f"not run: it needs {step.command.text!r}, which failed"
                    )
                return

    started = time.monotonic()
    with ThreadPoolExecutor(max_workers=2) as pool:  # the longest chains first
        list(pool.map(run_job, sorted(jobs.values(), key=len, reverse=True)))
    print(f"{len(COMMANDS)} README commands in {time.monotonic() - started:.0f} s")
    return results


def test_the_readme_has_commands_of_every_kind() -> None:
    """The commands were found: none hide in a block of another shell tag."""
    assert not re.findall(r"^```(?:bash|shell|console|zsh)\s*$", README.read_text(), re.MULTILINE)
    programs = {tuple(c.argv[:3]) for c in COMMANDS}
    assert {("uv", "run", "train"), ("uv", "run", "nox"), ("uv", "run", "polymimic-data")} <= (
        programs
    )


@pytest.mark.parametrize("text", [c.text for c in COMMANDS])
def test_readme_command_runs(text: str, outcomes: dict[str, str | Exception | Skipped]) -> None:
    outcome = outcomes[text]
    if isinstance(outcome, UnknownCommand):
        pytest.fail(f"no rule in this test runs the README's {text!r}: {outcome}", pytrace=False)
    if isinstance(outcome, Exception):
        pytest.fail(f"the README's {text!r} failed: {outcome}", pytrace=False)
    if isinstance(outcome, Skipped):
        pytest.skip(outcome.why)
