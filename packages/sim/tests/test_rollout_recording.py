"""`evaluate --rerun`: one rerun recording of an evaluation, read back through rerun's own
dataframe query: each episode's frames, executed actions, every predicted chunk at the tick
it was asked (so chunk switches show), the reward and the outcome."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from polymimic_sim.cli import main

pytest.importorskip("rerun", reason="the viz extra (rerun-sdk) is not installed")
pytest.importorskip("datafusion", reason="reading a recording back needs rerun-sdk[catalog]")

TASK, STEPS, N_ACTION_STEPS = "metaworld/reach-v3", 10, 4


def _rows(store, entity: str, component: str) -> list[tuple[int, Any]]:
    table = store.reader(index="tick", contents=entity).to_pandas()
    column = f"{entity}:{component}"
    table = table.dropna(subset=[column])
    return list(zip(table["tick"].tolist(), table[column].tolist(), strict=True))


@pytest.mark.parametrize("workers", [1, 2])
def test_every_episode_its_frames_actions_and_predicted_chunks(
    untrained_sawyer: Path, tmp_path: Path, workers: int
) -> None:
    from rerun.chunk import RrdReader

    out = tmp_path / "eval"
    code = main(["evaluate", str(untrained_sawyer), TASK, "--episodes", "2", "--out", str(out),
                 "--workers", str(workers), "--max-steps", str(STEPS), "--n-action-steps",
                 str(N_ACTION_STEPS), "--rerun", "--videos", "0"])  # fmt: skip
    assert code == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rerun"] == str(out / "rollouts.rrd")
    assert not (out / "rollouts.rrd.partial").exists()
    store = RrdReader(out / "rollouts.rrd").store().stream().collect()
    for outcome in summary["outcomes"]:
        root = f"/episodes/{TASK}/seed{outcome['seed']}"
        ticks = outcome["steps"]
        frames = _rows(store, f"{root}/images/corner2", "EncodedImage:blob")
        assert [t for t, _ in frames] == list(range(ticks))  # what the policy saw, every tick
        actions = _rows(store, f"{root}/actions/0", "Scalars:scalars")
        assert [t for t, _ in actions] == list(range(ticks))
        state = _rows(store, f"{root}/state/0", "Scalars:scalars")
        assert [t for t, _ in state] == list(range(ticks))
        rewards = _rows(store, f"{root}/reward", "Scalars:scalars")
        assert [t for t, _ in rewards] == list(range(ticks))
        timed = store.reader(index="time", contents=f"{root}/reward").to_pandas()
        seconds = timed["time"].dt.total_seconds().to_numpy()  # the task's rate: 80 Hz here
        np.testing.assert_allclose(np.sort(seconds), np.arange(ticks) / 80.0)
        # a chunk asked every N_ACTION_STEPS ticks: its line starts at the tick it was asked
        chunks = _rows(store, f"{root}/chunks/0", "LineStrips2D:strips")
        assert [t for t, _ in chunks] == list(range(0, ticks, N_ACTION_STEPS))
        for tick, strips in chunks:
            line = np.asarray(strips[0].tolist(), dtype=np.float64)
            assert line.shape == (8, 2) and line[0, 0] == tick  # the export's 8-step chunks
        # the executed action is the chunk's first step at the tick it was asked
        executed = dict(actions)
        first = np.asarray(chunks[1][1][0].tolist())[0, 1]
        assert np.isclose(executed[N_ACTION_STEPS][0], first, atol=1e-5)
        (last,) = _rows(store, f"{root}/outcome", "TextLog:text")
        assert last[0] == ticks - 1
        verdict = "success" if outcome["success"] else "failure"
        assert last[1][0].startswith(f"{verdict} (strict: {outcome['strict_success']})")


def test_rerun_without_an_out_folder_is_refused(untrained_sawyer: Path) -> None:
    from polymimic_sim import RolloutSettings, evaluate_checkpoint

    with pytest.raises(ValueError, match=r"rerun: a recording goes beside summary\.json"):
        evaluate_checkpoint(untrained_sawyer, TASK, RolloutSettings(episodes=1, rerun=True))
