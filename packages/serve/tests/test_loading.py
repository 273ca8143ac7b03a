"""A file that cannot be loaded is refused in one line naming it, before anything is built.

Before, the CLI on crafted files printed raw tracebacks (TypeError, RecursionError,
UnpicklingError repeating torch's advice to load with `weights_only=False`,
SafetensorError; "Expecting value" without the file), a Pi record's `paligemma_path` made
the loader read a folder anywhere, and a record of d_model 32768 was allocated unchecked.
Now every such file raises CheckpointError (one line: the file, what is wrong, what was
expected) and the CLI exits 2 with that line alone.
"""

from __future__ import annotations

import json
import pickle
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from polymimic_serve import CheckpointError, load_policy, trained_policy
from polymimic_serve import checkpoints as ckpt
from polymimic_serve.checkpoints import (
    EXPORT_CONFIG,
    EXPORT_WEIGHTS,
    local_weights_inside,
    open_trained,
    read_export,
    sized_policy,
    write_export,
)
from polymimic_serve.cli import main

Make = Callable[[Path, Path], Path]  # (tmp_path, tiny_export) -> the crafted path


def _export(tmp_path: Path, tiny_export: Path, change: Callable[[dict[str, Any]], Any]) -> Path:
    """A copy of the tiny export whose config.json `change` edited (the whole config)."""
    out = shutil.copytree(tiny_export, tmp_path / "export")
    config = json.loads((out / EXPORT_CONFIG).read_text())
    change(config)
    (out / EXPORT_CONFIG).write_text(json.dumps(config))
    return out


def _record(change: Callable[[dict[str, Any]], Any]) -> Make:
    return lambda tmp, export: _export(tmp, export, lambda config: change(config["record"]))


def _checkpoint(
    tmp_path: Path, tiny_export: Path, change: Callable[[dict[str, Any]], Any] | None = None
) -> Path:
    """The tiny export as a checkpoint of train (`change` edits the saved object)."""
    record, state, step = read_export(tiny_export)
    saved: dict[str, Any] = {"polymimic": record, "state_dict": state, "global_step": step}
    if change is not None:
        change(saved)
    path = tmp_path / "crafted.ckpt"
    torch.save(saved, path)
    return path


def _write(name: str, data: bytes) -> Make:
    def make(tmp: Path, export: Path) -> Path:
        (tmp / name).write_bytes(data)
        return tmp / name

    return make


def _truncated(tmp: Path, export: Path) -> Path:
    path = _checkpoint(tmp, export)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _unsafe(tmp: Path, export: Path) -> Path:
    """What loads only with `weights_only=False`: a pickled Path object."""
    return _checkpoint(tmp, export, lambda saved: saved.update(extra=Path("/")))


def _legacy_pickle(tmp: Path, export: Path) -> Path:
    (tmp / "legacy.ckpt").write_bytes(pickle.dumps({"polymimic": {}}, protocol=4))
    return tmp / "legacy.ckpt"


def _nested(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def _deep_record(tmp: Path, export: Path) -> Path:
    """A record nested deeper than Python's recursion limit (saved with a higher one)."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        return _checkpoint(
            tmp,
            export,
            lambda saved: saved["polymimic"]["policy"]["config"].update(d_model=_nested(3000)),
        )
    finally:
        sys.setrecursionlimit(limit)


def _bad_weights(data: bytes) -> Make:
    def make(tmp: Path, export: Path) -> Path:
        out = shutil.copytree(export, tmp / "export")
        (out / EXPORT_WEIGHTS).write_bytes(data)
        return out

    return make


def _config_text(text: str) -> Make:
    def make(tmp: Path, export: Path) -> Path:
        out = shutil.copytree(export, tmp / "export")
        (out / EXPORT_CONFIG).write_text(text)
        return out

    return make


def _tensors(change: Callable[[dict[str, torch.Tensor]], Any]) -> Make:
    def make(tmp: Path, export: Path) -> Path:
        out = shutil.copytree(export, tmp / "export")
        state = load_file(out / EXPORT_WEIGHTS)
        change(state)
        save_file(state, out / EXPORT_WEIGHTS)
        return out

    return make


def _reshape(state: dict[str, torch.Tensor]) -> None:
    state["policy.trunk.blocks.0.norm1.weight"] = torch.zeros(7)


def _pi(path: str) -> Callable[[dict[str, Any]], None]:
    def change(record: dict[str, Any]) -> None:
        record["policy"] = {"name": "pi", "config": {"paligemma_path": path, "expert_width": 64}}

    return change


def _outside(tmp: Path) -> Path:
    """A folder outside the export that looks like a PaliGemma (it must never be read)."""
    folder = tmp / "elsewhere" / "paligemma"
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    return folder


def _pi_outside(tmp: Path, export: Path) -> Path:
    return _record(_pi(str(_outside(tmp))))(tmp, export)


def _pi_dotdot(tmp: Path, export: Path) -> Path:
    _outside(tmp)
    return _record(_pi("../elsewhere/paligemma"))(tmp, export)


def _pi_symlink(tmp: Path, export: Path) -> Path:
    out = _record(_pi("paligemma"))(tmp, export)
    (out / "paligemma").symlink_to(_outside(tmp), target_is_directory=True)
    return out


def _pi_file_symlink(tmp: Path, export: Path) -> Path:
    out = _record(_pi("paligemma"))(tmp, export)
    (out / "paligemma").mkdir()
    (out / "paligemma" / "config.json").symlink_to(_outside(tmp) / "config.json")
    return out


CASES: dict[str, tuple[Make, tuple[str, ...]]] = {
    "garbage": (
        _write("garbage.ckpt", b"no checkpoint at all " * 4),
        ("garbage.ckpt", "is not in torch's zip format"),
    ),
    "empty": (_write("empty.ckpt", b""), ("empty.ckpt", "is truncated or corrupt")),
    "truncated": (_truncated, ("crafted.ckpt", "is truncated or corrupt", "zip archive")),
    "needs weights_only=False": (
        _unsafe,
        ("crafted.ckpt", "holds objects other than tensors and plain data", "pathlib"),
    ),
    "legacy pickle": (_legacy_pickle, ("legacy.ckpt", "is not in torch's zip format")),
    "nested too deeply (ckpt)": (
        _deep_record,
        ("crafted.ckpt", "record.policy ('hpt') cannot be built", "RecursionError"),
    ),
    "config.json not JSON": (
        _config_text('{"format": nope}'),
        ("config.json: not valid JSON", "Expecting value at line 1 column 12"),
    ),
    "config.json nested too deeply": (
        _config_text("[" * 100_000 + "]" * 100_000),
        ("config.json: not valid JSON (nested too deeply)",),
    ),
    "config.json not an object": (_config_text("[1, 2]"), ("config.json: the file is a list",)),
    "bad safetensors": (
        _bad_weights(b"\xff" * 64),
        ("model.safetensors: not a safetensors file", "SafetensorError"),
    ),
    "empty safetensors": (_bad_weights(b""), ("model.safetensors: not a safetensors file",)),
    "record not a mapping": (
        lambda tmp, export: _export(tmp, export, lambda config: config.update(record=[1, 2])),
        ("config.json: the 'polymimic' record is a list of 2; expected a mapping",),
    ),
    "record without norm": (
        _record(lambda record: record.pop("norm")),
        ("config.json: the record has no norm; expected policy, embodiments",),
    ),
    "policy a string": (
        _record(lambda record: record.update(policy="hpt")),
        ("record.policy is str 'hpt'; expected {name",),
    ),
    "history a string": (
        _record(lambda record: record["embodiments"]["eva_bimanual"].update(history="2")),
        ("eva_bimanual.history is str '2'; expected an integer from 1 to 10000",),
    ),
    "horizon huge": (
        _record(lambda record: record["embodiments"]["eva_bimanual"].update(horizon=10**9)),
        ("record.embodiments.eva_bimanual.horizon is int 1000000000; expected an integer from 1",),
    ),
    "cameras not a list": (
        _record(lambda record: record["embodiments"]["eva_bimanual"].update(cameras="front_1")),
        ("record.embodiments.eva_bimanual.cameras is str 'front_1'; expected a list",),
    ),
    "no layout": (
        _record(lambda record: record.update(layouts={})),
        ("record.layouts: no layout for embodiment 'eva_bimanual'",),
    ),
    "layout of a huge channel": (
        _record(lambda record: record["layouts"]["eva_bimanual"]["groups"][-1].update(stop=10**12)),
        ("eva_bimanual.state_dim is int 16; expected 1000000000000 (its layout",),
    ),
    "statistics of the wrong width": (
        _record(lambda record: record["norm"]["stats"]["eva_bimanual"]["state"]["mean"].pop()),
        ("stats.eva_bimanual.state.mean is a list of 15; expected a list of 16 numbers",),
    ),
    "norm mode unknown": (
        _record(lambda record: record["norm"].update(mode="exec")),
        ("record.norm.mode is str 'exec'; expected one of ['zscore', 'minmax', 'quantile']",),
    ),
    "image_size huge": (
        _record(lambda record: record.update(image_size=[100_000, 100_000])),
        ("record.image_size[0] is int 100000; expected an integer from 1 to 4096",),
    ),
    "image_size of one side": (
        _record(lambda record: record.update(image_size=[64])),
        ("record.image_size is a list of 1; expected [height, width]",),
    ),
    "fps negative": (
        _record(lambda record: record["fps"].update(eva_bimanual=-30)),
        ("record.fps.eva_bimanual is int -30; expected a positive number",),
    ),
    "step not an integer": (
        lambda tmp, export: _export(tmp, export, lambda config: config.update(step="last")),
        ("config.json: the step is str 'last'; expected an integer >= 0",),
    ),
    "state_dict not a mapping": (
        lambda tmp, export: _checkpoint(tmp, export, lambda saved: saved.update(state_dict=[1])),
        ("crafted.ckpt: state_dict is a list of 1; expected a mapping of names to tensors",),
    ),
    "policy config unknown field": (
        _record(lambda record: record["policy"]["config"].update(d_modle=32)),
        ("record.policy ('hpt') cannot be built: ValueError: d_modle: not a field of HPTConfig",),
    ),
    "tensor of the wrong shape": (
        _tensors(_reshape),
        (
            "model.safetensors: tensor policy.trunk.blocks.0.norm1.weight has shape (7,); "
            "the policy the record describes expects (32,)",
        ),
    ),
    "tensor missing": (
        _tensors(lambda state: state.pop("policy.trunk.blocks.0.norm1.weight")),
        (
            "model.safetensors: no tensor policy.trunk.blocks.0.norm1.weight; the policy "
            "the record describes has it, of shape (32,)",
        ),
    ),
    "tensor unexpected": (
        _tensors(lambda state: state.update({"policy.extra": torch.zeros(2)})),
        ("model.safetensors: tensor policy.extra is not one of the policy",),
    ),
    "d_model 32768": (
        _record(lambda record: record["policy"]["config"].update(d_model=32768)),
        (
            "config.json: the 'hpt' policy the record describes has",
            "parameters and buffers",
            "over what max_parameters=5,000,000,000 allows; nothing was allocated",
        ),
    ),
    "paligemma_path outside": (
        _pi_outside,
        (
            "config.json: record.policy.config.paligemma_path",
            "elsewhere/paligemma, outside the checkpoint's folder",
            "(no weights folder given)",
        ),
    ),
    "paligemma_path ../ outside": (
        _pi_dotdot,
        (
            "record.policy.config.paligemma_path: str '../elsewhere/paligemma' resolves to",
            "elsewhere/paligemma, outside the checkpoint's folder",
        ),
    ),
    "paligemma_path a symlink out": (
        _pi_symlink,
        (
            "record.policy.config.paligemma_path: str 'paligemma' resolves to",
            "elsewhere/paligemma, outside",
        ),
    ),
    "paligemma_path holds a symlink out": (
        _pi_file_symlink,
        (
            "record.policy.config.paligemma_path: str 'paligemma' holds an entry that resolves to",
            "elsewhere/paligemma/config.json, outside",
        ),
    ),
}


@pytest.fixture
def never_built(monkeypatch: pytest.MonkeyPatch) -> None:
    """No policy is built for real: every refusal comes before any allocation."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a crafted file got as far as building the policy")

    monkeypatch.setattr(trained_policy, "_build", refuse)


@pytest.mark.parametrize("case", list(CASES))
def test_a_file_that_cannot_be_loaded_is_refused_in_one_line_naming_it(
    case: str, tmp_path: Path, tiny_export: Path, never_built: None
) -> None:
    make, phrases = CASES[case]
    path = make(tmp_path, tiny_export)
    with pytest.raises(CheckpointError) as refused:
        load_policy(path)
    message = str(refused.value)
    assert "\n" not in message and "weights_only" not in message
    assert message.startswith(str(tmp_path)), message  # the file it is about, first
    for phrase in phrases:
        assert phrase in message, message


@pytest.mark.parametrize("case", list(CASES))
def test_the_cli_refuses_a_file_that_cannot_be_loaded_with_one_line(
    case: str, tmp_path: Path, tiny_export: Path, never_built: None, capsys
) -> None:
    make, phrases = CASES[case]
    path = make(tmp_path, tiny_export)
    assert main([str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err and "weights_only" not in err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"polymimic-serve: {tmp_path}"), err
    assert phrases[-1] in err


def test_the_parameter_bound_is_exact_and_checked_before_allocating(
    tmp_path: Path, tiny_export: Path
) -> None:
    opened = open_trained(tiny_export)
    shell = sized_policy(
        local_weights_inside(opened), opened.record["embodiments"], source=opened.source
    )
    count = sum(t.numel() for t in [*shell.parameters(), *shell.buffers()])
    assert {t.device.type for t in shell.parameters()} == {"meta"}
    assert load_policy(tiny_export, max_parameters=count).policy is not None
    with pytest.raises(
        CheckpointError,
        match=f"has {count:,} parameters and buffers, over what max_parameters={count - 1:,}",
    ):
        load_policy(tiny_export, max_parameters=count - 1)


def test_a_record_of_a_million_layers_stops_counting_at_the_module_bound(
    tmp_path: Path, tiny_export: Path, never_built: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ckpt, "MIN_MODULES", 300)
    monkeypatch.setattr(ckpt, "PARAMETERS_PER_MODULE", 10**12)  # the bound: 300 modules
    layers = _record(lambda record: record["policy"]["config"].update(trunk_layers=10**6))
    with pytest.raises(
        CheckpointError, match="has more than 300 modules, over what max_parameters"
    ):
        load_policy(layers(tmp_path, tiny_export))


def test_a_refused_record_states_what_was_named_not_the_whole_of_it(
    tmp_path: Path, tiny_export: Path, never_built: None
) -> None:
    long = _record(lambda record: record["embodiments"]["eva_bimanual"].update(history="x" * 10**6))
    with pytest.raises(CheckpointError) as refused:
        load_policy(long(tmp_path, tiny_export))
    assert len(str(refused.value)) < 400


def test_weights_dir_must_be_a_folder(tiny_export: Path, tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"weights_dir: .* is not a folder"):
        load_policy(tiny_export, weights_dir=tmp_path / "none")


def test_a_missing_path_is_a_checkpoint_error_and_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="no such checkpoint or export") as refused:
        load_policy(tmp_path / "none.ckpt")
    assert isinstance(refused.value, FileNotFoundError)


@pytest.fixture(scope="module")
def pi_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Pi export, written from a config naming a PaliGemma folder outside it."""
    from polymimic_policies import PiConfig, make_tiny_paligemma
    from polymimic_serve import write_untrained_export

    root = tmp_path_factory.mktemp("pi")
    paligemma = make_tiny_paligemma(root / "models" / "paligemma-tiny")
    config = PiConfig(
        paligemma_path=str(paligemma), expert_width=64, expert_mlp_dim=128, sample_steps=2
    )
    return write_untrained_export(
        root / "export",
        layout="eva_cartesian_rot6d",
        history=1,
        horizon=4,
        image_size=(32, 32),
        config=config,
    )


def test_a_pi_export_holds_paligemmas_config_and_tokenizer_never_its_weights(
    pi_export: Path, tmp_path: Path
) -> None:
    models = pi_export.parent / "models" / "paligemma-tiny"
    assert (models / "model.safetensors").is_file()
    held = sorted(p.name for p in (pi_export / "paligemma").iterdir())
    assert {"config.json", "tokenizer.json"} <= set(held)
    assert held == sorted(p.name for p in models.iterdir() if p.name != "model.safetensors")
    # A robot computer gets the export alone: it loads with nothing else and no weights_dir.
    alone = shutil.copytree(pi_export, tmp_path / "alone")
    path = load_policy(alone).policy.config.to_dict()["paligemma_path"]
    assert path == str((alone / "paligemma").resolve())


def test_pi_reads_its_paligemma_only_from_the_export_or_the_weights_dir(
    pi_export: Path, tmp_path: Path
) -> None:
    models = pi_export.parent / "models"
    outside = shutil.copytree(pi_export, tmp_path / "outside")
    shutil.rmtree(outside / "paligemma")
    config = json.loads((outside / EXPORT_CONFIG).read_text())
    config["record"]["policy"]["config"]["paligemma_path"] = str(models / "paligemma-tiny")
    (outside / EXPORT_CONFIG).write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match=r"paligemma_path: .* outside the checkpoint's"):
        load_policy(outside)
    loaded = load_policy(outside, weights_dir=models)
    path = loaded.policy.config.to_dict()["paligemma_path"]
    assert path == str((models / "paligemma-tiny").resolve())


def test_an_export_of_a_record_whose_folder_is_gone_says_how_to_serve_it(
    pi_export: Path, tmp_path: Path
) -> None:
    record, state, step = read_export(pi_export)
    with pytest.warns(UserWarning, match=r"paligemma_path: .* not a folder here.*--weights-dir"):
        out = write_export(record, state, step, tmp_path / "copy", base=tmp_path)
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    again = write_export(record, state, step, tmp_path / "again", base=pi_export)
    assert sorted(p.name for p in (again / "paligemma").iterdir()) == sorted(
        p.name for p in (pi_export / "paligemma").iterdir()
    )
