"""The same weights give the same validation metrics under every CPU-capable trainer config.

Tolerance: 1e-5 relative. Per-sample noise makes predictions independent of how samples
are batched or sharded; what differs is only the order of floating-point sums across
ranks. Multi-process configs run as two CPU processes forked on gloo.

The overlay videos agree too: under DDP each rank renders a share of the frames and rank
0 alone writes them, in order, once.
"""

from __future__ import annotations

import copy
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch
from hydra import compose, initialize_config_module
from hydra.utils import instantiate
from omegaconf import OmegaConf

import polymimic_train.configs
from polymimic_data.embodiments import policy_embodiments
from polymimic_data.samples import ShuffledOrder
from polymimic_eval import read_video_frames
from polymimic_policies import build_policy
from polymimic_train.callbacks import TrajectoryVideoCallback
from polymimic_train.lightning import PolicyModule

CONFIGS = Path(polymimic_train.configs.__file__).parent
TRAINERS = sorted(p.stem for p in (CONFIGS / "trainer").glob("*.yaml"))


# Each policy at a size that validates in seconds, on data it accepts (Pi: rot6d).
MODELS = {
    "hpt_small": ["model.d_model=32", "model.num_heads=2", "model.image_tokens=2"],
    "rdt_small": [
        "model.d_model=32",
        "model.num_heads=2",
        "model.image_tokens=2",
        "model.rdt_width=32",
        "model.rdt_heads=2",
        "model.rdt_layers=2",
    ],
    "pi_tiny": ["data=synthetic_eva_rot6d"],
}


@pytest.fixture(scope="module", params=sorted(MODELS))
def setup(request, tmp_path_factory: pytest.TempPathFactory, compose_train, prepared_data):
    tmp = tmp_path_factory.mktemp("agree")
    cfg = compose_train(
        tmp,
        f"model={request.param}",
        *MODELS[request.param],
        "data.synthetic.episodes=6",
        "data.synthetic.frames=20",
        "data.val_fraction=0.34",
        "data.num_workers=0",
        "data.batch_size=8",
        "data.norm.num_samples=50",
    )
    datamodule = prepared_data(cfg)
    assert datamodule.normalizer is not None
    torch.manual_seed(0)
    policy = build_policy(instantiate(cfg.model), policy_embodiments(cfg.data))
    module = PolicyModule(policy, datamodule.normalizer, datamodule.layouts, **cfg.optim)
    return cfg, datamodule, module


def _trainer(cfg, trainer_name: str, root: Path, **settings):
    """The named trainer config on the CPU, forked ranks, no logger or checkpoints."""
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        full = compose(
            "train", overrides=[f"trainer={trainer_name}", f"paths.run_dir={cfg.paths.run_dir}"]
        )
    trainer_cfg = OmegaConf.to_container(full.trainer, resolve=True)
    assert isinstance(trainer_cfg, dict)
    trainer_cfg |= {"accelerator": "cpu", "default_root_dir": str(root)} | settings
    if isinstance(trainer_cfg["strategy"], dict):
        trainer_cfg["strategy"]["start_method"] = "fork"  # rank 1 forks from pytest
    return instantiate(
        trainer_cfg,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )


def _validate(cfg, datamodule, module, trainer_name: str, root: Path) -> float:
    trainer = _trainer(
        cfg,
        trainer_name,
        root,
        callbacks=[TrajectoryVideoCallback(max_frames=7, batch_size=2)],
    )
    trainer.validate(copy.deepcopy(module), datamodule=datamodule, verbose=False)
    return float(trainer.callback_metrics["val_action_error"])


class _RanksDrawTheirOwnSamples(pl.Callback):
    """Fails a rank whose training samples another rank also drew (each rank must take
    its share of the one shuffled order, not all of it)."""

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        loaders = trainer.train_dataloader
        assert loaders is not None
        for name, b in batch.items():
            sampler = loaders[name].sampler
            assert isinstance(sampler, ShuffledOrder), type(sampler)
            assert (sampler.rank, sampler.num_replicas) == (trainer.global_rank, 2)
            mine = set(zip(b["episode"], b["frame"].tolist(), strict=True))
            everyone: list[set | None] = [None, None]
            torch.distributed.all_gather_object(everyone, mine)
            assert everyone[0] and everyone[1] and not everyone[0] & everyone[1], "ranks overlap"


@pytest.mark.filterwarnings("ignore:Using `DistributedSampler`")
def test_every_policy_trains_under_plain_ddp(setup, tmp_path: Path) -> None:
    """No trainable parameter is left without a gradient (Pi freezes what it never reads):
    plain DDP, which does not look for unused parameters, takes steps without an error.
    Each rank trains on its own share of the samples."""
    cfg, datamodule, module = setup
    trained = copy.deepcopy(module)
    before = {k: v.clone() for k, v in trained.policy.state_dict().items()}
    trainer = _trainer(
        cfg,
        "ddp",
        tmp_path,
        max_steps=3,
        limit_val_batches=0,
        callbacks=[_RanksDrawTheirOwnSamples()],
    )
    trainer.fit(trained, datamodule=datamodule)
    changed = [k for k, v in trained.policy.state_dict().items() if not torch.equal(v, before[k])]
    assert changed  # rank 0's trained weights, brought back from the forked processes


def test_a_rank_logs_every_step_error_whatever_steps_its_samples_reach(setup) -> None:
    """Under DDP every rank must log the same keys, or the reductions at the epoch's end wait
    on each other for ever (two ranks hung with `data.val_frames_per_episode=2`, one rank's
    samples reaching steps the other's did not). A batch whose samples end before the
    horizon logs every step too, with weight 0 where none reaches it."""
    _, datamodule, module = setup
    module = copy.deepcopy(module).eval()
    batch = next(iter(datamodule.val_dataloader()[0]))
    horizon = batch["action_mask"].shape[1]
    short = dict(batch, action_mask=batch["action_mask"].clone())
    short["action_mask"][:, horizon // 2 :] = False  # every sample ends halfway
    logged: dict[str, int] = {}

    def log(name: str, value: torch.Tensor, *, batch_size: int, **_: object) -> None:
        assert torch.isfinite(value), name  # a weight-0 value must not poison the sum
        logged[name] = batch_size

    module.log = log  # type: ignore[method-assign]
    module.log_dict = lambda *args, **kwargs: None  # type: ignore[method-assign]
    weights = []
    with torch.no_grad():
        for b in (batch, short):
            logged.clear()
            module.validation_step(b, 0)
            weights.append(dict(logged))
    assert sorted(weights[0]) == sorted(weights[1])
    assert len([k for k in weights[1] if "/step_error/" in k]) == horizon
    last = f"val/{batch['embodiment']}/step_error/{horizon - 1:03d}"
    assert weights[1][last] == 0 and weights[0][last] > 0


# Lightning warns that DistributedSampler may pad; the sizes here are even, so it does not.
@pytest.mark.filterwarnings("ignore:Using `DistributedSampler`")
def test_every_cpu_trainer_config_reports_the_same_validation_metrics_and_videos(
    setup, tmp_path: Path
) -> None:
    cfg, datamodule, module = setup
    assert len(datamodule.val_sets["eva_bimanual"]) % 2 == 0  # no padding duplicates on 2 ranks
    results = {}
    for name in TRAINERS:
        with initialize_config_module("polymimic_train.configs", version_base="1.3"):
            accelerator = compose("train", overrides=[f"trainer={name}"]).trainer.accelerator
        if accelerator != "gpu":
            results[name] = _validate(cfg, datamodule, module, name, tmp_path / name)
    assert {
        "default",
        "ddp",
        "ddp_bf16_compress",
        "ddp_find_unused_parameters_true",
    } <= results.keys()
    reference = results["default"]
    for name, value in results.items():
        assert value == pytest.approx(reference, rel=1e-5), (
            f"trainer={name}: {value} vs {reference}"
        )
    reference_frames = _videos(tmp_path / "default")
    for name in results:
        frames = _videos(tmp_path / name)
        assert frames.keys() == reference_frames.keys(), name
        for video, ours in frames.items():
            assert len(ours) == 7, (name, video)  # every rank's share, none twice
            theirs = reference_frames[video]
            # Predictions agree to float rounding, which an untrained model's wild chunks
            # can turn into a line drawn a few pixels away (how far depends on the CPU's
            # kernels: a frame 1.02 grey levels off its counterpart has been seen). So the
            # bound is relative: each frame is at least twice as close to its own
            # counterpart as to any other frame, which still fails for a frame that is
            # missing, duplicated, out of order or from another model.
            distance = np.array([[np.abs(a.astype(int) - b).mean() for b in theirs] for a in ours])
            others = np.where(np.eye(7, dtype=bool), np.inf, distance).min(1)
            assert (distance.diagonal() < 0.5 * others).all(), (name, video, distance.round(2))


def _videos(root: Path) -> dict[str, list[np.ndarray]]:
    """Every video under a trainer's root, decoded; no stray temporaries beside them."""
    files = sorted(p for p in (root / "videos").rglob("*") if p.is_file())
    assert all(p.suffix == ".mp4" for p in files), files
    return {str(p.relative_to(root)): read_video_frames(p) for p in files}
