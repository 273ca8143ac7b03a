"""A crafted checkpoint cannot run code when loaded: only registered policies are built.

Before, `load_policy` imported whatever class path the record held and called it with the
record's arguments: a file that loads with `weights_only=True` and names
`hydra.utils.instantiate` with a nested `pathlib.Path.write_text` target wrote a file of
its choosing. Now the record names a policy by its registered name, and any other name is
refused before anything is imported or called.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from polymimic_policies import UnregisteredPolicyError
from polymimic_serve import load_policy


def _crafted(tmp_path: Path, policy: dict[str, Any]) -> Path:
    record = {
        "policy": policy,
        "embodiments": {
            "eva_bimanual": {"state_dim": 2, "action_dim": 2, "history": 1, "horizon": 2}
        },
        "layouts": {},
        "norm": {"mode": "zscore", "stats": {}},
        "image_size": [8, 8],
    }
    path = tmp_path / "crafted.ckpt"
    torch.save({"polymimic": record, "state_dict": {}, "global_step": 0}, path)
    torch.load(path, weights_only=True)  # the file is what a safe loader accepts
    return path


def _payload(target: Path) -> dict[str, Any]:
    """What the old loader turned into `Path(target).write_text("pwned")` on load."""
    return {
        "_target_": "pathlib.Path.write_text",
        "self": {"_target_": "pathlib.Path", "_args_": [str(target)]},
        "data": "pwned",
    }


@pytest.mark.parametrize(
    "policy",
    [
        lambda target: {"name": "hydra.utils.instantiate", "config": {"config": _payload(target)}},
        lambda target: {"class": "hydra.utils.instantiate", "kwargs": {"config": _payload(target)}},
        lambda target: {"name": "pathlib.Path", "config": _payload(target)},
        lambda target: {"name": "polymimic_sentinel_module.Policy", "config": {}},
    ],
)
def test_a_checkpoint_naming_anything_but_a_registered_policy_is_refused(
    tmp_path: Path, policy: Any
) -> None:
    target = tmp_path / "written_by_the_checkpoint.txt"
    path = _crafted(tmp_path, policy(target))
    modules = set(sys.modules)
    with pytest.raises(UnregisteredPolicyError, match=r"not a registered policy|no registered"):
        load_policy(path, embodiment="eva_bimanual")
    assert not target.exists()
    assert "polymimic_sentinel_module" not in sys.modules
    assert {m for m in set(sys.modules) - modules if m.startswith(("hydra", "pathlib"))} == set()


def test_the_refusal_names_what_the_file_asked_for(tmp_path: Path) -> None:
    path = _crafted(tmp_path, {"name": "hydra.utils.instantiate", "config": {}})
    with pytest.raises(UnregisteredPolicyError) as refused:
        load_policy(path, embodiment="eva_bimanual")
    assert "'hydra.utils.instantiate'" in str(refused.value)
    assert "'hpt'" in str(refused.value)  # and what would have been accepted
