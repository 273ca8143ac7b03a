"""A run killed with SIGKILL, then stopped with SIGTERM, and resumed ends exactly as an
uninterrupted one, in its own run directory, with one metrics timeline; the SIGTERM is a
failure to whoever waits on the process, never a success."""

from __future__ import annotations

import csv
import importlib
import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

RUN = [
    "trainer.max_steps=30",
    "trainer.val_check_interval=6",
    "trainer.log_every_n_steps=1",
    "data.num_workers=2",  # the loader's workers and prefetch must resume too
    "data.batch_size=8",
    "data.synthetic.episodes=6",
    "data.synthetic.frames=30",
]
TIMING_COLUMNS = {"samples_per_s", "data_wait"}  # wall-clock figures: never equal


def _wait_for(path: Path, process: subprocess.Popen[str], timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if process.poll() is not None:
            raise AssertionError(f"the run ended before {path} appeared (see its log)")
        if time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"{path} did not appear in {timeout} s")
        time.sleep(0.05)


def _kill(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    process.wait()


def _rows(run_dir: Path) -> list[dict[str, str]]:
    with (run_dir / "metrics" / "metrics.csv").open() as f:
        return [
            {k: v for k, v in row.items() if k not in TIMING_COLUMNS} for row in csv.DictReader(f)
        ]


def _weights(run_dir: Path) -> dict[str, torch.Tensor]:
    last = run_dir / "checkpoints" / "last.ckpt"
    return torch.load(last, map_location="cpu", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, train_app, train_process) -> dict:
    tmp = tmp_path_factory.mktemp("resume")
    whole = train_app(tmp, None, *RUN, "name=whole")
    assert whole.returncode == 0, whole.stderr[-3000:]

    first = train_process(tmp, *RUN, "name=killed")
    _wait_for(tmp / "runs" / "killed", first)
    (run_dir,) = (tmp / "runs" / "killed").iterdir()
    _wait_for(run_dir / "checkpoints" / "step000006.ckpt", first)
    _kill(first)  # just after the first checkpoint
    killed_at = [sorted(p.name for p in (run_dir / "checkpoints").iterdir())]

    second = train_process(tmp, *RUN, "name=killed", f"resume={run_dir}")
    _wait_for(run_dir / "checkpoints" / "step000018.ckpt", second)
    time.sleep(0.5)
    second.send_signal(signal.SIGTERM)  # later, mid-interval: a scheduler's or a user's stop
    try:
        second.wait(timeout=300)
    except subprocess.TimeoutExpired:
        _kill(second)
        raise
    log = tmp / "logs" / "train-1.log"  # the second process started (train_process names them)
    stopped = {"returncode": second.returncode, "output": log.read_text(),
               "record": json.loads((run_dir / "run.json").read_text())}  # fmt: skip
    killed_at.append(sorted(p.name for p in (run_dir / "checkpoints").iterdir()))

    last = train_app(tmp, None, *RUN, "name=killed", "resume=latest")
    assert last.returncode == 0, last.stderr[-3000:]
    return {
        "tmp": tmp,
        "whole": next((tmp / "runs" / "whole").iterdir()),
        "resumed": run_dir,
        "killed_at": killed_at,
        "stopped": stopped,
    }


def test_a_run_stopped_by_sigterm_exits_as_stopped_not_as_finished(runs) -> None:
    """Lightning ends a SIGTERM'd fit with a SystemExit without a code (status 0): a caller
    (a benchmark, a pipeline, a scheduler's epilogue) took the half-trained run as done."""
    stopped = runs["stopped"]
    assert stopped["returncode"] == 128 + signal.SIGTERM, stopped["output"][-3000:]
    assert "error: stopped by SIGTERM" in stopped["output"] and "resume=latest" in stopped["output"]
    assert stopped["record"]["state"] == "failed"
    assert stopped["record"]["error"] == "stopped by SIGTERM"


@pytest.mark.parametrize("package", ["lightning.pytorch", "pytorch_lightning"])
def test_either_lightnings_sigterm_exception_counts_as_a_stop(package: str) -> None:
    """A config's trainer may come from the standalone pytorch_lightning (lightning installs
    it); its SIGTERMException is another class, and a stop through it must not exit 0."""
    from polymimic_train.app import _sigterm

    pytest.importorskip(package)  # the standalone one comes with lightning, not by our choice
    exceptions = importlib.import_module(f"{package}.utilities.exceptions")
    ours = importlib.import_module("lightning.pytorch.utilities.exceptions")
    if package != "lightning.pytorch":  # else this case would test the first branch again
        assert exceptions.SIGTERMException is not ours.SIGTERMException
    assert _sigterm(exceptions.SIGTERMException())
    assert not _sigterm(SystemExit()) and not _sigterm(KeyboardInterrupt())


def test_resumed_weights_and_metrics_equal_the_uninterrupted_run(runs) -> None:
    whole, resumed = runs["whole"], runs["resumed"]
    ours, theirs = _weights(whole), _weights(resumed)
    assert ours.keys() == theirs.keys()
    for key in ours:  # bit for bit: same data order, same noise, same optimizer state
        assert torch.equal(ours[key], theirs[key]), key
    summaries = [json.loads((d / "summary.json").read_text()) for d in (whole, resumed)]
    assert summaries[0]["steps"] == summaries[1]["steps"] == 30
    assert summaries[0]["val_action_error"] == summaries[1]["val_action_error"]


def test_metrics_hold_every_step_once_and_keep_what_was_abandoned(runs) -> None:
    rows = _rows(runs["resumed"])
    assert rows == _rows(runs["whole"])
    trained = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert sorted(trained) == sorted(set(trained)) and len(trained) == 30
    assert list((runs["resumed"] / "metrics").glob("abandoned-*.csv"))


def test_everything_stayed_in_one_run_directory_with_its_history(runs) -> None:
    assert [p.name for p in (runs["tmp"] / "runs" / "killed").iterdir()] == [runs["resumed"].name]
    record = json.loads((runs["resumed"] / "run.json").read_text())
    assert record["state"] == "finished" and record["steps"] == 30
    assert record["resumed_from"].endswith("last.ckpt")
    checkpoints = runs["resumed"] / "checkpoints"
    names = sorted(p.name for p in checkpoints.iterdir())
    assert names == ["last.ckpt", "step000018.ckpt", "step000024.ckpt", "step000030.ckpt"]
    assert (checkpoints / "last.ckpt").readlink() == Path("step000030.ckpt")  # relative
    assert "step000006.ckpt" in runs["killed_at"][0]


PI_TINY = [
    "model=pi_tiny",
    "data=synthetic_eva_rot6d",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=20",
    "data.synthetic.episodes=3",
    "data.synthetic.frames=20",
    "callbacks.trajectory_video.max_frames=2",
]


def test_a_resumed_pi_run_does_not_read_paligemma_weights(
    tmp_path: Path, train_environment
) -> None:
    """The checkpoint has PaliGemma's weights; a resume reads only its config and tokenizer."""
    import sys

    def train(*overrides: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "polymimic_train", *PI_TINY, *overrides]
        return subprocess.run(
            command, env=train_environment(tmp_path), capture_output=True, text=True, timeout=600
        )

    run_dir = tmp_path / "run"
    first = train("trainer.max_steps=2", f"hydra.run.dir={run_dir}")
    assert first.returncode == 0, first.stderr[-3000:]
    weights = tmp_path / "cache" / "paligemma-tiny" / "model.safetensors"
    weights.write_bytes(b"not safetensors")  # reading it now would fail
    resumed = train("trainer.max_steps=4", f"hydra.run.dir={run_dir}", f"resume={run_dir}")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == 4
