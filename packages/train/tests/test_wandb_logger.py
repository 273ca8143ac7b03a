"""`train logger=wandb`: W&B beside CSV and TensorBoard, offline here, one W&B run per run
directory across resumes. The offline runs are read back from their transaction logs
(`wandb/offline-run-*/run-<id>.wandb`)."""

from __future__ import annotations

import csv
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_module

pytest.importorskip("wandb")

FAST = [
    "logger=wandb",
    "trainer.val_check_interval=2",
    "trainer.log_every_n_steps=1",
    "data.synthetic.episodes=3",
    "data.synthetic.frames=20",
    "callbacks.trajectory_video.max_frames=2",
]


def _offline_env(tmp: Path) -> dict[str, str]:
    """wandb offline, its own settings and caches under `tmp`, no credentials."""
    return {
        "WANDB_MODE": "offline",
        "WANDB_DIR": str(tmp / "wandb-dir"),
        "WANDB_CONFIG_DIR": str(tmp / "wandb-config"),
        "WANDB_CACHE_DIR": str(tmp / "wandb-cache"),
        "WANDB_DATA_DIR": str(tmp / "wandb-data"),
        "WANDB_SILENT": "true",
        "NETRC": str(tmp / "no-netrc"),
    }


# The transaction log: a 7-byte header, then records in blocks of 32 KiB, each chunk with
# a 7-byte header (checksum: 4, length: 2, little-endian, kind: 1); a record is one FULL
# chunk or FIRST, MIDDLE..., LAST.
_HEADER, _BLOCK = b":W&B\xe1\xbe\x00", 32768
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def _records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[: len(_HEADER)] == _HEADER, f"{path} is not a W&B transaction log"
    pos, parts = len(_HEADER), b""
    while pos + 7 <= len(data):
        if _BLOCK - pos % _BLOCK < 7:  # a block's trailer: too short for a chunk header
            pos += _BLOCK - pos % _BLOCK
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (_FULL, _FIRST):
            parts = chunk
        elif kind in (_MIDDLE, _LAST):
            parts += chunk
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()  # pyright: ignore[reportAttributeAccessIssue]
            record.ParseFromString(parts)
            yield record


def _key(item: Any) -> str:
    return item.key or "/".join(item.nested_key)


def _offline_run(path: Path) -> dict[str, Any]:
    """An offline run's id and name, its config updates and its history rows."""
    run: dict[str, Any] = {"config": {}, "history": []}
    for record in _records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run |= {"id": record.run.run_id, "name": record.run.display_name}
            run["project"] = record.run.project
        elif kind == "config":
            for item in record.config.update:
                run["config"][_key(item)] = json.loads(item.value_json)
        elif kind == "history":
            run["history"].append({_key(i): json.loads(i.value_json) for i in record.history.item})
    return run


@pytest.fixture(scope="module")
def wandb_runs(tmp_path_factory: pytest.TempPathFactory, train_app) -> dict[str, Any]:
    """Two steps of a run with logger=wandb, then the same run directory resumed to four."""
    tmp = tmp_path_factory.mktemp("wandb")
    run_dir = tmp / "run"
    with pytest.MonkeyPatch.context() as env:
        for key, value in _offline_env(tmp).items():
            env.setenv(key, value)
        env.delenv("WANDB_API_KEY", raising=False)
        first = train_app(tmp, run_dir, *FAST, "trainer.max_steps=2")
        assert first.returncode == 0, first.stderr[-3000:]
        offline = sorted((run_dir / "wandb").glob("offline-run-*"))
        second = train_app(tmp, run_dir, *FAST, "trainer.max_steps=4", f"resume={run_dir}")
        assert second.returncode == 0, second.stderr[-3000:]
    lives = sorted((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and len(lives) == 2, lives
    (resumed,) = set(lives) - set(offline)
    return {"run_dir": run_dir, "lives": [offline[0], resumed]}


def _log(life: Path) -> Path:
    (log,) = life.glob("run-*.wandb")
    return log


def test_the_offline_run_holds_config_metrics_videos_and_the_plot(wandb_runs) -> None:
    run_dir, life = wandb_runs["run_dir"], wandb_runs["lives"][0]
    run = _offline_run(_log(life))
    assert run["name"] == run_dir.name and run["project"] == "hpt_small-synthetic_eva"
    config = run["config"]
    assert config["name"] == "hpt_small-synthetic_eva"  # the composed config, resolved
    assert config["trainer"]["max_steps"] == 2 and config["paths"]["run_dir"] == str(run_dir)
    rows = run["history"]
    losses = [r for r in rows if "train/loss" in r]
    assert losses and all(r["train/loss"] > 0 for r in losses)
    assert {r["trainer/global_step"] for r in losses} == {0, 1}
    (validated,) = [r for r in rows if "val_action_error" in r]
    with (run_dir / "metrics" / "metrics.csv").open() as f:  # the same row as the CSV's
        (in_csv,) = [r for r in csv.DictReader(f) if r["val_action_error"] and r["step"] == "1"]
    assert validated["val_action_error"] == pytest.approx(float(in_csv["val_action_error"]))
    assert validated["trainer/global_step"] == 1
    assert validated["val/eva_bimanual/step_error/000"] >= 0
    for split in ("val", "train"):
        (video,) = [r for r in rows if f"videos/eva_bimanual/{split}/_type" in r]
        assert video[f"videos/eva_bimanual/{split}/_type"] == "videos"
        (clip,) = video[f"videos/eva_bimanual/{split}/videos"]
        assert clip["_type"] == "video-file" and clip["path"].endswith(".mp4")
        assert (life / "files" / clip["path"]).stat().st_size > 0
    (plot,) = [r for r in rows if "val/step_error/_type" in r]
    (image,) = plot["val/step_error/filenames"]
    assert image.endswith(".png") and (life / "files" / image).is_file()
    assert plot["trainer/global_step"] == 2


def test_a_resumed_run_directory_continues_the_same_wandb_run(wandb_runs) -> None:
    run_dir, lives = wandb_runs["run_dir"], wandb_runs["lives"]
    recorded = json.loads((run_dir / "wandb_run.json").read_text())
    runs = [_offline_run(_log(life)) for life in lives]
    assert runs[0]["id"] == runs[1]["id"] == recorded["id"]
    assert [_log(life).name for life in lives] == [f"run-{recorded['id']}.wandb"] * 2
    assert runs[1]["config"]["trainer"]["max_steps"] == 4
    steps = {r["trainer/global_step"] for r in runs[1]["history"] if "train/loss" in r}
    assert steps == {2, 3}  # the resumed life logs where the first stopped


def test_csv_and_tensorboard_log_as_before(wandb_runs) -> None:
    run_dir = wandb_runs["run_dir"]
    assert "train/loss" in (run_dir / "metrics" / "metrics.csv").read_text()
    assert list((run_dir / "tensorboard").glob("events.out.tfevents.*"))


def test_only_global_rank_zero_starts_a_wandb_run(tmp_path: Path, monkeypatch) -> None:
    from lightning.pytorch.utilities import rank_zero_only

    from polymimic_train.runs.wandb_run import RunWandbLogger

    monkeypatch.setattr(rank_zero_only, "rank", 1)
    logger = RunWandbLogger(tmp_path / "run", project="p", mode="offline")
    logger.log_metrics({"x": 1.0}, step=0)
    assert type(logger.experiment).__name__ == "_DummyExperiment"
    assert not (tmp_path / "run").exists()  # no id file, no wandb folder


def test_the_mode_follows_an_explicit_choice_then_wandb_mode_then_credentials(
    tmp_path: Path, monkeypatch
) -> None:
    from polymimic_train.runs.wandb_run import run_mode

    for key in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "WANDB_BASE_URL"):
        monkeypatch.delenv(key, raising=False)
    netrc = tmp_path / "netrc"
    monkeypatch.setenv("NETRC", str(netrc))
    assert run_mode(None) == "offline"  # no credentials anywhere
    assert run_mode("disabled") == "disabled"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password " + "k" * 40 + "\n")
    netrc.chmod(0o600)
    assert run_mode(None) == "online"
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.org")
    assert run_mode(None) == "offline"  # that login is for another host
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    assert run_mode(None) == "online"
    monkeypatch.setenv("WANDB_MODE", "offline")
    assert run_mode(None) is None  # wandb reads WANDB_MODE itself
    assert run_mode("online") == "online"
    with pytest.raises(ValueError, match="'live' is not one of"):
        run_mode("live")


def _compose(tmp: Path, *overrides: str):
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        return compose(
            "train",
            overrides=[f"paths.run_dir={tmp / 'run'}", "name=fold", "logger=wandb", *overrides],
        )


def test_logger_wandb_keeps_csv_and_tensorboard(tmp_path: Path) -> None:
    cfg = _compose(tmp_path)
    assert set(cfg.logger) == {"csv", "tensorboard", "wandb"}
    assert cfg.logger.wandb.project == "fold" and cfg.logger.wandb.entity is None  # `name`
    assert _compose(tmp_path, "logger.wandb.project=arms").logger.wandb.project == "arms"


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("logger.wandb.mode=live", "logger.wandb.mode: 'live' is not one of"),
        ("logger.wandb.project=a/b", "logger.wandb.project: 1 to 128 characters"),
    ],
)
def test_a_bad_wandb_setting_is_one_line_naming_the_field(
    tmp_path: Path, override: str, expected: str
) -> None:
    from polymimic_train.run_config import ConfigError, check_config

    with pytest.raises(ConfigError, match="^" + expected.replace("(", r"\(")):
        check_config(_compose(tmp_path, override))


def test_without_wandb_installed_the_error_says_what_to_install(
    tmp_path: Path, monkeypatch
) -> None:
    from polymimic_train.run_config import ConfigError, check_config
    from polymimic_train.runs.wandb_run import RunWandbLogger

    cfg = _compose(tmp_path)
    monkeypatch.setitem(sys.modules, "wandb", None)  # import wandb fails, find_spec is None
    with pytest.raises(ConfigError) as error:
        check_config(cfg)
    assert str(error.value).startswith("logger.wandb: W&B logging needs wandb; ")
    assert "pip install 'polymimic-train[wandb]'" in str(error.value)
    with pytest.raises(ModuleNotFoundError, match=r"polymimic-train\[wandb\]"):
        RunWandbLogger(tmp_path / "run", project="p")


def test_train_without_wandb_fails_at_once_in_one_line(
    tmp_path: Path, train_app, monkeypatch
) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(
        "import sys\nsys.modules['wandb'] = None  # as if the extra were not installed\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"), prepend=os.pathsep)
    result = train_app(tmp_path, None, "logger=wandb")
    assert result.returncode == 2, result.stderr[-2000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [
        "error: logger.wandb: W&B logging needs wandb; pip install 'polymimic-train[wandb]' "
        "(in a checkout: uv sync --extra wandb)"
    ]
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data").exists() and not list(tmp_path.glob("runs/*/*"))
