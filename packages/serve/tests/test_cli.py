"""`polymimic-serve`'s refusals: one line naming what is wrong, before any serving."""

from __future__ import annotations

from pathlib import Path

import pytest

from polymimic_serve.cli import main


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
