"""`polymimic-serve`'s refusals: one line naming what is wrong, before any serving.

And what it passes on: the limits (`--max-batch`, by default 8, batching across clients;
`--max-message-mb`; `--max-parameters`) and the weights folder; and how it stops.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest

from polymimic_serve import server, trained_policy
from polymimic_serve.checkpoints import DEFAULT_MAX_PARAMETERS
from polymimic_serve.cli import main
from polymimic_serve.trained_policy import TrainedPolicy
from polymimic_serve.trained_policy import load_policy as real_load


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["{missing}"], "no such checkpoint or export"),
        (["{export}", "--camera-map", "cam_high"], "'cam_high' is not ROBOT_CAMERA=POLICY_CAMERA"),
        (["{export}", "--camera-map", "cam_high=top"], r"['top'] are not cameras of this policy"),
        (["{export}", "--max-batch", "0"], "--max-batch: a positive integer, got 0"),
        (["{export}", "--threads", "0"], "--threads: a positive integer, got 0"),
        (
            ["{export}", "--embodiment", "aria_bimanual"],
            "trained on ['eva_bimanual'], not 'aria_bimanual'",
        ),
    ],
)
def test_a_bad_invocation_is_named(
    tiny_export: Path, tmp_path: Path, capsys, args, message
) -> None:
    filled = [a.format(missing=tmp_path / "none.ckpt", export=tiny_export) for a in args]
    assert main(filled) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-message-mb", "0"], "--max-message-mb: a positive number, got 0.0"),
        (["--max-message-mb", "nan"], "--max-message-mb: a positive number, got nan"),
        (["--max-parameters", "1000"], "over what max_parameters=1,000 allows"),
        (["--weights-dir", "{missing}"], "weights_dir: {missing} is not a folder"),
        (["--device", "cuda:64"], "--device cuda:64: this machine has"),
        (["--device", "toaster"], "--device: 'toaster' is not a device"),
    ],
)
def test_a_bad_limit_or_folder_is_named_in_one_line(
    tiny_export: Path, tmp_path: Path, capsys, args, message
) -> None:
    missing = tmp_path / "none"
    assert main([str(tiny_export), *(a.format(missing=missing) for a in args)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert message.format(missing=missing) in err


@pytest.mark.parametrize("count", ["many", "0", "1.5", "-3"])
def test_max_parameters_is_a_positive_count(tiny_export: Path, capsys, count: str) -> None:
    with pytest.raises(SystemExit) as stopped:
        main([str(tiny_export), "--max-parameters", count])
    assert stopped.value.code == 2
    assert "a positive integer such as 5e9" in capsys.readouterr().err


class _Server:
    """PolicyServer's stand-in: what the CLI built it with; serving returns at once."""

    made: ClassVar[dict[str, Any]] = {}

    def __init__(self, policy: Any, **kwargs: Any) -> None:
        _Server.made = {"policy": policy, **kwargs}
        self.metadata: dict[str, Any] = {}

    async def serve(self, on_ready: Any = None) -> None:
        return None


def _served(monkeypatch: pytest.MonkeyPatch, argv: list[str]) -> tuple[dict, dict]:
    """What `main(argv)` asked of load_policy and of the server."""
    loaded: dict[str, Any] = {}

    def load(path: Any, **kwargs: Any) -> TrainedPolicy:
        loaded.update(kwargs, path=path)
        return real_load(path, **kwargs)

    monkeypatch.setattr(server, "PolicyServer", _Server)
    monkeypatch.setattr(trained_policy, "load_policy", load)
    assert main(argv) == 0
    return loaded, _Server.made


def test_batching_across_clients_is_the_default(tiny_export: Path, monkeypatch) -> None:
    loaded, made = _served(monkeypatch, [str(tiny_export)])
    assert made["max_batch"] == server.DEFAULT_MAX_BATCH == 8
    assert made["max_message_bytes"] is None  # the server's own default
    assert loaded["max_parameters"] == DEFAULT_MAX_PARAMETERS and loaded["weights_dir"] is None


def test_the_limits_and_the_weights_folder_reach_the_loader_and_the_server(
    tiny_export: Path, tmp_path: Path, monkeypatch
) -> None:
    argv = [str(tiny_export), "--max-batch", "1", "--max-message-mb", "1.5"]
    argv += ["--max-parameters", "2e10", "--weights-dir", str(tmp_path)]
    loaded, made = _served(monkeypatch, argv)
    assert made["max_batch"] == 1 and made["max_message_bytes"] == 3 * 2**19
    assert loaded["max_parameters"] == 20_000_000_000 and loaded["weights_dir"] == str(tmp_path)


def _ignore_sigint() -> None:
    """What a process started in the background by a script (`polymimic-serve ... &`) has."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")
@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_a_server_started_in_the_background_stops_cleanly(
    tiny_export: Path, tmp_path: Path, stop: str
) -> None:
    log = tmp_path / "serve.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "polymimic_serve.cli", str(tiny_export), "--port", "0"],
            stdout=out, stderr=subprocess.STDOUT, preexec_fn=_ignore_sigint,
        )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while "serving" not in log.read_text():
            assert process.poll() is None, log.read_text()[-2000:]
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.2)
        process.send_signal(getattr(signal, stop))
        assert process.wait(timeout=30) == 0, log.read_text()[-2000:]
        assert log.read_text().rstrip().endswith("stopped")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
