"""The reaper's decisions, on nvidia-smi output recorded from a shared 4-GPU node."""

from __future__ import annotations

from polymimic_strategies.gpu_reaper import (
    GpuProcess,
    job_gpu_uuids,
    parse_compute_apps,
    parse_gpus,
    stale_processes,
)

GPUS = """\
0, GPU-6a1f8c1e-0d3b-4e51-9a1c-2f1d2c3b4a50
1, GPU-7b2e9d2f-1e4c-4f62-8b2d-3e2e3d4c5b61
2, GPU-8c3fae30-2f5d-4a73-9c3e-4f3f4e5d6c72
3, GPU-9d40bf41-306e-4b84-8d4f-504050607d83
"""
APPS = """\
41230, GPU-6a1f8c1e-0d3b-4e51-9a1c-2f1d2c3b4a50, 30512
41231, GPU-7b2e9d2f-1e4c-4f62-8b2d-3e2e3d4c5b61, 30498
52001, GPU-8c3fae30-2f5d-4a73-9c3e-4f3f4e5d6c72, 70210
60100, GPU-6a1f8c1e-0d3b-4e51-9a1c-2f1d2c3b4a50, 1024
"""
OWNERS = {41230: 1000, 41231: 1000, 52001: 1000, 60100: 1001}


def test_parsing_recorded_output() -> None:
    gpus = parse_gpus(GPUS)
    assert gpus["2"] == "GPU-8c3fae30-2f5d-4a73-9c3e-4f3f4e5d6c72" and len(gpus) == 4
    apps = parse_compute_apps(APPS)
    assert apps[0] == GpuProcess(41230, "GPU-6a1f8c1e-0d3b-4e51-9a1c-2f1d2c3b4a50", 30512)
    assert parse_compute_apps("") == [] and parse_compute_apps("No running processes found\n") == []


def test_only_this_users_other_processes_on_this_jobs_gpus_are_stale() -> None:
    gpus = parse_gpus(GPUS)
    job = job_gpu_uuids("0,1", gpus)
    stale = stale_processes(
        parse_compute_apps(APPS), job, own_pids={41231}, owner_of=OWNERS.get, uid=1000
    )
    # 41231 is this job, 52001 is on another job's GPU, 60100 belongs to someone else.
    assert [p.pid for p in stale] == [41230]


def test_visible_devices_by_uuid_and_unset() -> None:
    gpus = parse_gpus(GPUS)
    uuid = gpus["3"]
    assert job_gpu_uuids(uuid, gpus) == {uuid}
    assert job_gpu_uuids(None, gpus) == set(gpus.values())
