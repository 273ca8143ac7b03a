"""Policy sizes and training speed.

    python benchmarks/policies.py                # counts; 12M on the CPU, eager and compiled
    python benchmarks/policies.py --skip-speed   # counts only

Prints one JSON line per figure (DESIGN.md):
- the trunk and whole-policy parameters of every model config, counted on the meta device
  (Pi at PaliGemma 3B from its config when no local PaliGemma is set: pi05, pi0);
- for HPT-12M on the CPU, at batch 32 on eva (one 64x80 camera): training steps/s and the
  process's peak RSS, eager against compiled (torch.compile of trunk and heads), each in a
  process of its own so the peaks are its own;
- on the CPU, training steps/s of pi_tiny and rdt_small at batch 8;
- where a GPU is available: step time, samples/s and peak memory of HPT-300M and HPT-1B
  in bf16 at batch 64, of pi05 in bf16 at batch 32 (needs POLYMIMIC_PALIGEMMA_DIR, or a
  randomly initialised PaliGemma 3B of the same shapes without it) and of rdt_1b at 32.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import torch
from figure_lines import figure_printer  # benchmarks/ is on sys.path when run
from hydra import compose, initialize_config_module
from hydra.utils import instantiate

import polymimic_train.configs
from polymimic_data.embodiments import policy_embodiments
from polymimic_policies import HPTPolicy, build_policy

emit = figure_printer("policies")
CONFIGS = Path(polymimic_train.configs.__file__).parent / "model"


def _model_cfg(model: str) -> tuple:
    rot6d = ["data=synthetic_eva_rot6d"] if model.startswith("pi") else []  # Pi: rot6d only
    with initialize_config_module("polymimic_train.configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"model={model}", "name=bench", *rot6d])
    return cfg.model, policy_embodiments(cfg.data)


def _without_local_paligemma(model_cfg) -> bool:
    return "paligemma_path" in model_cfg and model_cfg.paligemma_path is None


def _pi_3b_count(model_cfg) -> int:
    from polymimic_policies import paligemma_3b_config, pi_parameter_count

    counts = pi_parameter_count(
        paligemma_3b_config(),
        expert_width=model_cfg.expert_width,
        expert_mlp_dim=model_cfg.expert_mlp_dim,
        variant=model_cfg.variant,
    )
    return counts["total"]


def count_figures() -> None:
    for model in sorted(p.stem for p in CONFIGS.glob("*.yaml")):
        model_cfg, specs = _model_cfg(model)
        if _without_local_paligemma(model_cfg):
            total = _pi_3b_count(model_cfg)
            emit("policy_parameters", total, "parameters", model=model, paligemma="3b config")
            continue
        no_weights = {"load_base_weights": False} if "load_base_weights" in model_cfg else {}
        with torch.device("meta"):
            policy = build_policy(instantiate(model_cfg, **no_weights), specs)
        total = sum(p.numel() for p in policy.parameters())
        if isinstance(policy, HPTPolicy):  # HPT and RDT
            trunk = sum(p.numel() for p in policy.trunk.parameters())
            emit(
                "trunk_parameters", trunk, "parameters", model=model, millions=round(trunk / 1e6, 1)
            )
        emit("policy_parameters", total, "parameters", model=model, embodiment="eva_bimanual")


_STEP_PROBE = """
import json, resource, sys, time, torch
from hydra.utils import instantiate
from omegaconf import OmegaConf
from polymimic_policies import build_policy
model_cfg, specs, device, dtype, batch, steps = json.loads(sys.argv[1])
policy = build_policy(instantiate(OmegaConf.create(model_cfg)), specs).to(device)
optimizer = torch.optim.AdamW(policy.parameters(), lr=1e-4)
spec = specs["eva_bimanual"]
data = {
    "embodiment": "eva_bimanual",
    "images.front_1": torch.randint(0, 256, (batch, 3, 64, 80), dtype=torch.uint8, device=device),
    "state": torch.randn(batch, spec["history"], spec["state_dim"], device=device),
    "actions": torch.randn(batch, spec["horizon"], spec["action_dim"], device=device),
    "action_mask": torch.ones(batch, spec["horizon"], dtype=torch.bool, device=device),
    "action_anchor": torch.randn(batch, 1, spec["action_dim"], device=device),  # residual actions
    "prompt": ["reach the red and blue targets"] * batch,
}
autocast = torch.autocast(device, dtype=getattr(torch, dtype), enabled=dtype != "float32")
def step():
    with autocast:
        loss = policy.compute_loss(data)["loss"]
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
for _ in range(3):  # warm: compilation, allocator
    step()
if device == "cuda":
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
start = time.perf_counter()
for _ in range(steps):
    step()
if device == "cuda":
    torch.cuda.synchronize()
seconds = (time.perf_counter() - start) / steps
peak = (torch.cuda.max_memory_allocated() / 2**20 if device == "cuda"
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
print(json.dumps({"step_s": seconds, "peak_mb": peak}))
"""


def _step_figures(model: str, *, device: str, dtype: str, batch: int, steps: int, **extra) -> dict:
    model_cfg, specs = _model_cfg(model)
    from omegaconf import OmegaConf

    plain = OmegaConf.to_container(model_cfg, resolve=True)
    assert isinstance(plain, dict)
    plain |= extra
    arguments = json.dumps([plain, specs, device, dtype, batch, steps])
    out = subprocess.run(
        [sys.executable, "-c", _STEP_PROBE, arguments], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_figures() -> None:
    for compiled in (False, True):
        mode = "compiled" if compiled else "eager"
        figures = _step_figures(
            "hpt_12m", device="cpu", dtype="float32", batch=32, steps=5, compile=compiled
        )
        emit("hpt_12m_cpu_steps_per_s", 1 / figures["step_s"], "steps/s", mode=mode, batch=32)
        emit("hpt_12m_cpu_peak_rss_mb", figures["peak_mb"], "MB", mode=mode)
    for model in ("pi_tiny", "rdt_small"):
        figures = _step_figures(model, device="cpu", dtype="float32", batch=8, steps=5)
        emit(f"{model}_cpu_steps_per_s", 1 / figures["step_s"], "steps/s", batch=8)
        emit(f"{model}_cpu_peak_rss_mb", figures["peak_mb"], "MB")


def gpu_figures() -> None:
    runs = [("hpt_300m", 64, {}), ("hpt_1b", 64, {}), ("rdt_1b", 32, {}), ("pi05", 32, {})]
    for model, batch, extra in runs:
        if model == "pi05" and _without_local_paligemma(_model_cfg(model)[0]):
            extra = {"paligemma_path": _random_paligemma_3b(), "load_base_weights": False}
        figures = _step_figures(
            model, device="cuda", dtype="bfloat16", batch=batch, steps=10, **extra
        )
        emit(f"{model}_gpu_step_ms", figures["step_s"] * 1e3, "ms", dtype="bf16", batch=batch)
        emit(f"{model}_gpu_samples_per_s", batch / figures["step_s"], "samples/s")
        emit(f"{model}_gpu_peak_memory_mb", figures["peak_mb"], "MB")


def _random_paligemma_3b() -> str:
    """A config-only PaliGemma 3B directory (built with random weights: the same shapes)."""
    import shutil
    import tempfile

    from polymimic_policies import ensure_tiny_paligemma, paligemma_3b_config

    directory = Path(tempfile.mkdtemp()) / "paligemma-3b-config"
    directory.mkdir()
    paligemma_3b_config().save_pretrained(directory)
    tiny = ensure_tiny_paligemma(tempfile.mkdtemp())
    for name in ("tokenizer.json", "tokenizer_config.json"):  # a byte-level tokenizer
        shutil.copy(tiny / name, directory / name)
    return str(directory)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--skip-speed", action="store_true")
    args = parser.parse_args()
    count_figures()
    if args.skip_speed:
        return
    cpu_figures()
    if torch.cuda.is_available():
        gpu_figures()


if __name__ == "__main__":
    main()
