"""Every model config trains on every data config for a few steps, through the app itself.

The configs are enumerated from the config tree, so a new model or data config cannot
land untested. A policy over 10M parameters trains on every data config cut to a CPU size
(`polymimic_train.testing.cpu_size`: width and depth only, every other choice of its config
kept), and at its own size once, on the default data (marked slow: `nox -s matrix` runs
it). Sizes of one config (hpt_3m, hpt_12m and hpt: the same config but for width and depth)
cut to the same model, which trains once per data config. Sizes over 100M are for GPUs: on
the CPU they are built on the meta device and counted (test_model_sizes), not trained.
"""

from __future__ import annotations

import math
from functools import cache
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

import polymimic_train.configs
from polymimic_data.embodiments import policy_embodiments
from polymimic_data.lerobot import import_lerobot
from polymimic_data.synthetic import ensure_synthetic_episodes
from polymimic_data.testing import write_lerobot_dataset
from polymimic_policies import build_policy
from polymimic_train import recorded_cameras
from polymimic_train.testing import cpu_size

CONFIGS = Path(polymimic_train.configs.__file__).parent
CUT_ABOVE, GPU_ONLY = 10e6, 100e6

TINY = [
    "name=matrix",
    "trainer.max_steps=2",
    "trainer.val_check_interval=2",
    "trainer.enable_progress_bar=false",
    "trainer.accelerator=cpu",
    "data.num_workers=0",
    "data.batch_size=4",
    "data.norm.num_samples=20",
    "data.val_frames_per_episode=2",
    "callbacks.trajectory_video.max_frames=4",
]


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def _compose(*overrides: str):
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        return compose("train", overrides=list(overrides))


@cache
def parameters(model: str) -> int:
    """The whole policy's parameters on eva (counted on the meta device).

    Pi at PaliGemma 3B needs a local PaliGemma to be built; without one (this machine) it
    is counted from PaliGemma 3B's config.
    """
    cfg = _compose(f"model={model}", "name=count")
    if cfg.model._target_.endswith("PiConfig") and cfg.model.paligemma_path is None:
        from polymimic_policies import paligemma_3b_config, pi_parameter_count

        counts = pi_parameter_count(
            paligemma_3b_config(),
            expert_width=cfg.model.expert_width,
            expert_mlp_dim=cfg.model.expert_mlp_dim,
            variant=cfg.model.variant,
        )
        return counts["total"]
    config = instantiate(cfg.model).without_initial_weights()
    with torch.device("meta"):  # a count: nothing allocated, no base weights read
        policy = build_policy(config, policy_embodiments(cfg.data))
    return sum(p.numel() for p in policy.parameters())


def _pi_overrides(model: str, data: str) -> list[str]:
    """Pi predicts rot6d only: eva datasets take eva's rot6d layout. pi0.5 writes the state
    into the prompt, and a person's 144 hand channels need about 600 byte-level tokens.
    Its image slots name cameras; LeRobot's are named otherwise."""
    if not _compose(f"model={model}", "name=count").model._target_.endswith("PiConfig"):
        return []
    datasets = _compose(f"data={data}", "name=count").data.datasets
    embodiments = {spec.embodiment for spec in datasets.values()}
    rot6d = [
        f"data.datasets.{name}.layout=eva_cartesian_rot6d"
        for name, spec in datasets.items()
        if spec.embodiment == "eva_bimanual"
    ]
    # an imported LeRobot arm's cameras (top, wrist) share slots with eva's
    slots = (
        [
            "model.image_slots.base_0_rgb=[front_1,top]",
            "model.image_slots.left_wrist_0_rgb=[left_wrist,wrist]",
        ]
        if data.startswith("lerobot")
        else ["model.image_slots.base_0_rgb=[front_1,top]"]  # ALOHA's top camera
        if data.startswith("sim_aloha")
        else ["model.image_slots.base_0_rgb=[front_1,top]"]  # the hands' and the robot's
        if data in ("sim_hands_transfer_cube", "sim_cotrain_transfer_cube")
        else ["model.image_slots.base_0_rgb=[front_1,corner2,corner4_fov40]"]  # MetaWorld's
        if data.startswith("sim_")
        else []
    )
    return rot6d + slots + (["model.max_token_len=640"] if embodiments - {"eva_bimanual"} else [])


# A pressed button needs no gripper: the demonstrations' gripper channel is constant, and
# the normaliser says so (a UserWarning, an error under pytest's settings).
SIM_MARKS = [pytest.mark.filterwarnings(r"ignore:.*are \(nearly\) constant:UserWarning")]


def _same_model_as_an_earlier(models: list[str], overrides=lambda model: []) -> dict[str, str]:
    """Each of `models` whose model node (composed with `overrides(model)`) an earlier one's
    already is -> that earlier one."""
    from omegaconf import OmegaConf

    first: dict[str, str] = {}
    found = {}
    for model in models:
        node = OmegaConf.to_yaml(_compose(f"model={model}", "name=count", *overrides(model)).model)
        if node in first:
            found[model] = first[node]
        else:
            first[node] = model
    return found


@cache
def twins() -> dict[str, str]:
    """Model configs that compose to exactly another's model node -> that other config.

    A twin (hpt_50m names the size hpt.yaml already is) would train exactly as its
    original does on every data config, so the matrix trains the original only."""
    return _same_model_as_an_earlier(_options("model"))


def cut(model: str) -> list[str]:
    """The overrides a model trains with on every data config: none, or its CPU size."""
    return cpu_size(model) if parameters(model) > CUT_ABOVE else []


@cache
def cut_twins() -> dict[str, str]:
    """Models over 10M whose CPU size composes to the model node of an earlier one's -> it."""
    return _same_model_as_an_earlier(_over_10m(), cut)


def _pairs() -> list:
    pairs = []
    for model in _options("model"):
        if model in twins() or model in cut_twins() or parameters(model) > GPU_ONLY:
            continue
        pairs += [
            pytest.param(model, data, marks=SIM_MARKS if data.startswith("sim_") else [])
            for data in _options("data")
        ]
    return pairs


def _over_10m() -> list[str]:
    """Models over 10M a CPU trains: each at its own size once; cut, on every data config
    as itself or as the model its cut twins."""
    return [
        m for m in _options("model") if m not in twins() and CUT_ABOVE < parameters(m) <= GPU_ONLY
    ]


@cache
def _recorded(task: str) -> Path:
    """Scripted demonstrations recorded once per test process, removed when it exits.

    Recorded with every camera that a data config training on them reads, so one recording
    serves every config (an episode is refused a camera it was not recorded with).
    """
    import atexit
    import shutil
    from tempfile import mkdtemp

    from polymimic_sim import default_cameras, record

    root = Path(mkdtemp(prefix="polymimic-matrix-sim-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    dest = root / task.replace("/", "_")
    read = [  # None: the task's own
        recorded_cameras(_compose(f"data={d}", "name=count").data) or default_cameras(task)
        for d, t in SIM_DATA.items()
        if task in t
    ]
    cameras = {c: None for r in read for c in r or ()}  # each of them once, in order
    record(task, dest, episodes=2, image_size=(48, 64), cameras=list(cameras) or None,
           progress=False)  # fmt: skip
    return dest


SIM_DATA = {  # data config -> the tasks its demonstrations come from (mt10: one of its tasks)
    "sim_metaworld": ["metaworld/button-press-v3"],
    "sim_metaworld_mt10": ["metaworld/button-press-v3"],
    "sim_aloha_transfer_cube": ["aloha/transfer_cube"],
    "sim_aloha_ee_transfer_cube": ["aloha_ee/transfer_cube"],
    "sim_hands_transfer_cube": ["hands/transfer_cube"],
    "sim_cotrain_transfer_cube": ["aloha_ee/transfer_cube", "hands/transfer_cube"],
}


def _data_overrides(tmp: Path, data: str) -> list[str]:
    if data.startswith("synthetic"):
        size = ["episodes=3", "frames=20", "height=48", "width=64"]
        return [f"data.synthetic.{s}" for s in size]
    if data in SIM_DATA:  # demonstrations as polymimic-sim records them
        roots = ",".join(str(_recorded(task)) for task in SIM_DATA[data])
        return [f"data.roots=[{roots}]", "data.image_size=[48,64]"]
    roots = []
    if not data.startswith("lerobot") or "eva" in data:
        roots.append(  # a real data config: episodes on disk
            ensure_synthetic_episodes(
                tmp / "eva",
                "eva_bimanual",
                episodes=3,
                frames=20,
                height=48,
                width=64,
                progress=False,
            )
        )
    if data.startswith("lerobot"):  # a LeRobot dataset as lerobot writes it, imported
        write_lerobot_dataset(tmp / "lerobot_src", episodes=3, frames=20)
        import_lerobot(tmp / "lerobot_src", tmp / "lerobot", progress=False)
        roots.append(tmp / "lerobot")
    return [f"data.roots=[{','.join(map(str, roots))}]"]


def test_the_matrix_covers_every_config_a_cpu_can_train() -> None:
    pairs = {tuple(p.values) for p in _pairs()}
    datas = {d for _, d in pairs}
    assert {"synthetic_eva", "synthetic_aria", "synthetic_mecka", "synthetic_scale"} <= datas
    assert {"synthetic_cotrain", "episodes", "lerobot", "lerobot_cotrain_eva"} <= datas
    assert set(SIM_DATA) <= datas
    trained = {m for m, _ in pairs}
    assert {"hpt_small", "hpt_eva", "hpt_human", "hpt_cotrain_shared_heads"} <= trained
    assert {"pi_tiny", "rdt_small"} <= trained
    gpu_only = {m for m in _options("model") if parameters(m) > GPU_ONLY}
    assert trained | set(twins()) | set(cut_twins()) | gpu_only == set(_options("model"))
    assert not set(twins()) & trained  # each twin is trained as its original, once
    assert set(_over_10m()) == {"hpt", "hpt_12m", "hpt_3m"}  # each at its own size, once


def test_sizes_of_one_config_cut_to_one_model_and_only_they() -> None:
    """hpt_3m and hpt_12m are hpt but for width and depth: cut, they train as hpt does."""
    assert cut_twins() == {"hpt_12m": "hpt", "hpt_3m": "hpt"}
    cut_hpt = _compose("model=hpt", "name=count", *cpu_size("hpt")).model
    small = _compose("model=hpt_small", "name=count").model
    assert cut_hpt.d_model == small.d_model and cut_hpt.trunk_layers == small.trunk_layers
    # hpt's own choices are kept, cut: they are what the cut model checks on every data
    assert cut_hpt.resnet_blocks != small.resnet_blocks
    assert cut_hpt.image_tokens != small.image_tokens


def test_a_twin_is_skipped_only_when_its_config_is_its_originals() -> None:
    assert twins() == {"hpt_50m": "hpt"}
    twin, original = (_compose(f"model={m}", "name=count").model for m in ("hpt_50m", "hpt"))
    assert twin == original
    assert "hpt_12m" not in twins()  # a size apart is not a twin


@pytest.mark.parametrize(("model", "data"), _pairs())
def test_every_model_trains_on_every_data_config(
    tmp_path: Path, model: str, data: str, compose_train
) -> None:
    overrides = [
        f"model={model}",
        f"data={data}",
        *TINY,
        *_data_overrides(tmp_path, data),
        *_pi_overrides(model, data),
    ]
    _trains(compose_train(tmp_path, *overrides, *cut(model)))


@pytest.mark.slow
@pytest.mark.parametrize("model", _over_10m())
def test_a_model_over_10m_trains_at_its_own_size(tmp_path: Path, model: str, compose_train) -> None:
    data = "synthetic_eva"
    overrides = [f"model={model}", f"data={data}", *TINY, *_data_overrides(tmp_path, data)]
    _trains(compose_train(tmp_path, *overrides, *_pi_overrides(model, data)))


def _trains(cfg) -> None:
    summary = polymimic_train.run(cfg)
    assert summary["steps"] == 2
    assert math.isfinite(summary["val_action_error"]) and summary["val_action_error"] > 0
    assert (Path(cfg.paths.run_dir) / "checkpoints" / "last.ckpt").exists()
