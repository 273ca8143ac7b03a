"""A robot computer installs polymimic-serve alone: no training stack comes with it."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.metadata import PackageNotFoundError, requires
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

TRAINING_STACK = {
    "lightning",
    "pytorch-lightning",
    "lightning-fabric",
    "hydra-core",
    "omegaconf",
    "torchdata",
    "tensorboard",
    "polymimic-train",
    "polymimic-strategies",
}
TRAINING_MODULES = (
    "lightning",
    "pytorch_lightning",
    "hydra",
    "omegaconf",
    "torchdata",
    "tensorboard",
    "polymimic_train",
    "polymimic_strategies",
)


def dependency_closure(name: str, extras: frozenset[str] = frozenset()) -> set[str]:
    """Every distribution installing `name[extras]` brings, from the installed metadata."""
    seen: dict[str, frozenset[str]] = {}  # name -> the extras walked for it
    todo = [(canonicalize_name(name), extras)]
    while todo:
        current, wanted = todo.pop()
        if current in seen and wanted <= seen[current]:
            continue
        wanted = seen[current] = seen.get(current, frozenset()) | wanted
        try:
            listed = requires(current) or []
        except PackageNotFoundError:
            continue  # not installed here (a platform's own, say): nothing more to walk
        for text in listed:
            requirement = Requirement(text)
            markers = [{"extra": e} for e in wanted] or [{"extra": ""}]
            if requirement.marker is None or any(requirement.marker.evaluate(m) for m in markers):
                todo.append((canonicalize_name(requirement.name), frozenset(requirement.extras)))
    return set(seen)


def test_polymimic_serve_and_its_extras_bring_no_training_stack() -> None:
    closure = dependency_closure("polymimic-serve", frozenset({"pi", "rdt"}))
    assert {"polymimic-data", "polymimic-policies", "torch", "websockets", "msgpack"} <= closure
    assert closure & TRAINING_STACK == set()
    # and the walk follows extras: polymimic-data's loaders extra is what brings torchdata
    assert "torchdata" in dependency_closure("polymimic-data", frozenset({"loaders"}))
    assert "torchdata" not in dependency_closure("polymimic-data")


_SERVE = """
import json, sys
import numpy as np
from polymimic_serve import LocalPolicy, PolicyClient, PolicyServer, RunningServer
from polymimic_serve import load_policy, make_executor
policy = load_policy(sys.argv[1])
observation = {"state": np.zeros(16), "images": {"front_1": np.zeros((3, 24, 32), np.uint8)}}
with RunningServer(PolicyServer(policy, port=0)) as running, PolicyClient(running.url) as client:
    executor = make_executor("rtc", client, n_action_steps=4, delay=1)
    actions = [executor.act(observation) for _ in range(10)]
LocalPolicy(policy).infer(observation)
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def test_serving_imports_no_training_module(tiny_export: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", _SERVE, str(tiny_export)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = set(json.loads(result.stdout.strip().splitlines()[-1]))
    assert "polymimic_serve" in loaded and "websockets" in loaded
    assert loaded & set(TRAINING_MODULES) == set()
