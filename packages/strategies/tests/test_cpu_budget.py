"""torch's thread pool fits the CPUs a container's quota allows, not the host's cores."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from polymimic_strategies import cpu_budget


@pytest.fixture
def quota(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    path = tmp_path / "cpu.max"
    monkeypatch.setattr(cpu_budget, "_CGROUP_V2", path)
    monkeypatch.setattr(cpu_budget, "_CGROUP_V1", (tmp_path / "no", tmp_path / "no"))
    monkeypatch.setattr(cpu_budget.os, "sched_getaffinity", lambda pid: set(range(32)))
    return path


def test_a_quota_caps_the_usable_cpus(quota: Path) -> None:
    quota.write_text("150000 100000\n")  # 1.5 CPUs
    assert cpu_budget.usable_cpus() == 2
    quota.write_text("max 100000\n")
    assert cpu_budget.usable_cpus() == 32


def test_torch_threads_shrink_to_the_quota_and_never_grow(quota: Path) -> None:
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(8)
        quota.write_text("200000 100000\n")
        assert cpu_budget.fit_torch_threads() == 2 and torch.get_num_threads() == 2
        quota.write_text("max 100000\n")
        assert cpu_budget.fit_torch_threads() == 2  # more room does not grow the pool
    finally:
        torch.set_num_threads(before)
