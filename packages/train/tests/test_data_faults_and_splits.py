from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from polymimic_data import resolve_episodes, split_episodes
from polymimic_data.samples import BadDataError
from polymimic_data.synthetic import ensure_synthetic_episodes
from polymimic_train.callbacks.data_fault_monitor import DataFaultMonitor
from polymimic_train.lightning.data_module import EmbodimentDataModule
from polymimic_train.run_config import ConfigError


def _batch(bad: int, size: int = 10) -> dict:
    fault = {"episode": "e1", "key": "left.gripper", "frame": 3, "reason": "NaN or inf"}
    return {
        "embodiment": "eva_bimanual",
        "state": torch.zeros(size, 1, 16),
        "data_faults": [[fault]] * bad,
    }


def test_monitor_counts_bad_samples_across_embodiments_and_stops_past_the_limit() -> None:
    monitor = DataFaultMonitor(max_bad_fraction=0.1, min_samples=20)
    monitor.on_train_batch_end(None, None, None, {"eva": _batch(1), "aria": _batch(0)}, 0)  # type: ignore[arg-type]
    assert monitor.ledger.samples == 20 and monitor.ledger.bad_samples == 1
    with pytest.raises(BadDataError, match=r"e1  left\.gripper  NaN or inf"):
        monitor.on_train_batch_end(None, None, None, {"eva": _batch(5)}, 1)  # type: ignore[arg-type]


def test_validation_batches_are_counted_in_their_own_ledger() -> None:
    monitor = DataFaultMonitor(max_bad_fraction=0.5, min_samples=1)
    monitor.on_validation_batch_end(None, None, None, _batch(2), 0)  # type: ignore[arg-type]
    assert (monitor.val_ledger.bad_samples, monitor.ledger.bad_samples) == (2, 0)
    assert "e1" in monitor.val_ledger.end_epoch("in validation")


def _cfg(**overrides) -> dict:
    return {
        "synthetic": None,
        "roots": [],
        "image_size": [32, 40],
        "history": 1,
        "horizon": 4,
        "action_stride": 2,
        "batch_size": 4,
        "num_workers": 0,
        "filters": {},
        "splits": None,
        "val_fraction": 0.25,
        "val_frames_per_episode": "auto",
        "split_seed": 0,
        "faults": {"max_bad_fraction": 0.01, "max_bad_fraction_per_episode": 0.2},
        "norm": {"mode": "zscore", "num_samples": 40},
        "datasets": {"eva_bimanual": {"embodiment": "eva_bimanual", "cameras": ["front_1"]}},
    } | overrides


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return ensure_synthetic_episodes(
        tmp_path_factory.mktemp("d"),
        "eva_bimanual",
        episodes=8,
        frames=12,
        height=32,
        width=40,
        progress=False,
    )


def test_named_splits_come_from_filters_and_must_be_disjoint(root: Path, tmp_path: Path) -> None:
    hashes = sorted(p.name.removesuffix(".zarr") for p in root.glob("*.zarr"))
    splits = {"train": {}, "val": {}}
    dm = EmbodimentDataModule(
        _cfg(roots=[str(root)], splits=splits), data_root=str(tmp_path), cache_dir=str(tmp_path)
    )
    with pytest.raises(ValueError, match="both train and val"):
        dm.prepare()
    # Named splits by any attribute: here by the task name, one split per value.
    splits = {"train": {"task": "synthetic_reach"}, "val": {"task": "nothing"}}
    dm = EmbodimentDataModule(
        _cfg(roots=[str(root)], splits=splits), data_root=str(tmp_path), cache_dir=str(tmp_path)
    )
    with pytest.raises(FileNotFoundError, match="nothing"):
        dm.prepare()
    dm = EmbodimentDataModule(
        _cfg(roots=[str(root)]), data_root=str(tmp_path), cache_dir=str(tmp_path)
    )
    dm.prepare()
    train = {e.hash for e in dm.train_sets["eva_bimanual"].episodes}
    val = {e.hash for e in dm.val_episodes["eva_bimanual"]}
    assert train | val == set(hashes) and not train & val and len(val) == 2
    assert dm.train_sets["eva_bimanual"].action_stride == 2
    assert len(dm.val_sets["eva_bimanual"]) == 2 * 12  # auto: every frame of so few episodes


def _cotrained(root: Path, tmp_path: Path, eva: float, aria: float) -> EmbodimentDataModule:
    """A prepared data module of eva (`root`) and generated aria episodes, by these weights."""
    aria_root = ensure_synthetic_episodes(
        tmp_path / "aria", "aria_bimanual", episodes=4, frames=12, height=32, width=40,
        progress=False,
    )  # fmt: skip
    cfg = _cfg(
        roots=[str(root), str(aria_root)],
        batch_size=8,
        datasets={
            name: {"embodiment": name, "cameras": ["front_1"], "weight": weight}
            for name, weight in (("eva_bimanual", eva), ("aria_bimanual", aria))
        },
    )
    dm = EmbodimentDataModule(cfg, data_root=str(tmp_path), cache_dir=str(tmp_path))
    dm.prepare()
    return dm


def test_cotraining_weights_hold_over_an_epoch(root: Path, tmp_path: Path) -> None:
    dm = _cotrained(root, tmp_path, 3.0, 1.0)
    assert dm.batch_sizes() == {"eva_bimanual": 6, "aria_bimanual": 2}
    counts = {"eva_bimanual": 0, "aria_bimanual": 0}
    steps = 0
    for batch, _, _ in iter(dm.train_dataloader()):
        steps += 1
        for name, part in batch.items():
            assert part["embodiment"] == name  # one batch per embodiment, every step
            counts[name] += len(part["state"])
    # An epoch runs until the loader with the most batches is done; the others cycle.
    assert steps == max(
        len(dm.train_sets["eva_bimanual"]) // 6, len(dm.train_sets["aria_bimanual"]) // 2
    )
    share = counts["eva_bimanual"] / sum(counts.values())
    assert abs(share - 0.75) <= 0.01


def test_balance_by_gives_each_task_an_equal_share_of_an_epoch(root: Path, tmp_path: Path) -> None:
    """data.balance_by: a task of 12-frame episodes beside one of 36-frame episodes trains as
    often; a uniform shuffle trains it 40% of the time (96 of 240 samples). Episodes without
    the attribute are named as the run resolves them, before statistics or loaders."""
    long = ensure_synthetic_episodes(
        tmp_path / "long", "eva_bimanual", episodes=4, frames=36, height=32, width=40,
        progress=False,
    )  # fmt: skip
    for meta in long.glob("*.zarr/zarr.json"):
        doc = json.loads(meta.read_text())
        doc["attributes"]["task_name"] = "long_task"
        meta.write_text(json.dumps(doc))

    def tasks_of_an_epoch(**overrides) -> dict[str, int]:
        dm = EmbodimentDataModule(
            _cfg(roots=[str(root), str(long)], val_fraction=0.0, **overrides),
            data_root=str(tmp_path),
            cache_dir=str(tmp_path / f"cache{len(overrides)}"),
        )
        dm.prepare()
        dataset = dm.train_sets["eva_bimanual"]
        task = {e.path.name: e.attrs["task_name"] for e in dataset.episodes}
        loader = dm.train_dataloader().iterables["eva_bimanual"]
        counts = {"synthetic_reach": 0, "long_task": 0}
        for index in loader.sampler:
            counts[task[dataset.episodes[dataset.locate(index)[0]].path.name]] += 1
        return counts

    uniform = tasks_of_an_epoch()
    assert uniform["synthetic_reach"] / sum(uniform.values()) == pytest.approx(0.4, abs=0.01)
    balanced = tasks_of_an_epoch(balance_by="task_name")
    assert sum(balanced.values()) == sum(uniform.values())  # an epoch as long as before
    assert abs(balanced["synthetic_reach"] - balanced["long_task"]) <= 4  # one batch's rounding
    dm = EmbodimentDataModule(
        _cfg(roots=[str(root)], balance_by="operator"),
        data_root=str(tmp_path),
        cache_dir=str(tmp_path / "nostats"),
    )
    with pytest.raises(ConfigError, match=r"data.balance_by of data.datasets.eva_bimanual: "
                       r"'operator' is not an attribute of 8 episode\(s\), e.g. .*\.zarr; it "
                       r"holds \[.*'task_name'"):  # fmt: skip
        dm.prepare()
    assert not (tmp_path / "nostats" / "norm_stats").exists()


def test_auto_workers_share_the_cores_among_the_training_loaders(
    root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """num_workers: auto gives each training loader its share of this process's cores."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(4)))
    monkeypatch.setattr(os, "cpu_count", lambda: 4)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    dm = _cotrained(root, tmp_path, 3.0, 1.0)
    dm.cfg["num_workers"] = "auto"
    assert {loader.num_workers for loader in dm.train_dataloader().iterables.values()} == {2}
    dm.cfg["datasets"]["aria_bimanual"]["weight"] = 0  # one loader trains: every core its own
    assert [loader.num_workers for loader in dm.train_dataloader().iterables.values()] == [4]
    dm.cfg["num_workers"] = 1  # a number is taken as it is
    assert [loader.num_workers for loader in dm.train_dataloader().iterables.values()] == [1]


def test_a_dataset_of_weight_zero_is_validated_and_normalised_but_never_trained_on(
    root: Path, tmp_path: Path
) -> None:
    """weight: 0 holds an embodiment out of training (validated on, never trained on)."""
    dm = _cotrained(root, tmp_path, 0, 1.0)
    assert dm.batch_sizes() == {"eva_bimanual": 0, "aria_bimanual": 8}
    seen = {name for batch, _, _ in iter(dm.train_dataloader()) for name in batch}
    assert seen == {"aria_bimanual"}
    # held out of training, not out of the run: its statistics and its validation stay
    assert {"eva_bimanual", "aria_bimanual"} <= set(dm.norm_stats)
    assert [b["embodiment"] for b in (next(iter(v)) for v in dm.val_dataloader())] == [
        "eva_bimanual",
        "aria_bimanual",
    ]
    dm.cfg["datasets"]["aria_bimanual"]["weight"] = 0
    with pytest.raises(ValueError, match=r"one at least positive, got \{'eva_bimanual': 0\.0, "):
        dm.batch_sizes()


def test_a_run_meeting_truncated_shards_reports_them_and_finishes(
    tmp_path: Path, train_app
) -> None:
    """One broken episode in each split: both reported, by key and episode, and the run ends."""
    root = ensure_synthetic_episodes(
        tmp_path / "data",
        "eva_bimanual",
        episodes=8,
        frames=20,
        height=32,
        width=40,
        progress=False,
    )
    train, val = split_episodes(resolve_episodes(root), val_fraction=0.25, seed=0)
    broken = [train[0], val[0]]
    for episode in broken:
        shard = episode.path / "images.front_1" / "c" / "0"
        shard.write_bytes(shard.read_bytes()[:-500])
    run_dir = tmp_path / "run"
    result = train_app(
        tmp_path,
        run_dir,
        "data=episodes",
        f"data.roots=[{root}]",
        "data.val_fraction=0.25",
        "data.image_size=[32,40]",
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    for episode in broken:
        assert f"bad data replaced: episode {episode.hash}, key images.front_1" in output
    # The first episode of each split is broken: each video shows the next one instead.
    assert f"no video of val episode {val[0].hash} of eva_bimanual" in output
    assert f"no video of train episode {train[0].hash} of eva_bimanual" in output
    assert len(list((run_dir / "videos" / "eva_bimanual").glob("*.mp4"))) == 4
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == 4
    assert summary["data_faults"]["train_bad_samples"] >= 1
    assert summary["data_faults"]["val_bad_samples"] >= 1
