"""Fingerprints of HPT, RDT and Pi built from fixed seeds: a restructuring must not move them.

For each policy (HPT with a flow head and a regression head, RDT, Pi as pi0 and pi05) it
builds the model from seed 0, then records a SHA-256 of the state dict (names, dtypes,
shapes and bytes), the loss and a SHA-256 of the gradients on a fixed batch and seed, and
SHA-256s of chunks sampled with a fixed generator, with and without a real-time-chunking
prefix. Run it before and after a change that should change nothing:

    uv run python scripts/model_fingerprint.py --out before.json      # on the old commit
    uv run python scripts/model_fingerprint.py --compare before.json  # on the new one

`--compare` exits 1 naming every entry that differs. Bit-identical is the bar: the same
machine and the same locked torch, the same operations in the same order.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from polymimic_policies import (
    ActionPrefix,
    HPTConfig,
    HPTPolicy,
    PiConfig,
    PiPolicy,
    RDTConfig,
    RDTPolicy,
    ensure_tiny_paligemma,
)

GROUPS = [("left_position", 3), ("left_rotation", 4), ("left_gripper", 1), ("right", 8)]
SPECS = {
    "eva_bimanual": {
        "state_dim": 16,
        "action_dim": 16,
        "history": 2,
        "horizon": 4,
        "cameras": ["front_1"],
        "action_groups": GROUPS,
    },
    "aria_bimanual": {
        "state_dim": 12,
        "action_dim": 12,
        "history": 1,
        "horizon": 3,
        "cameras": ["front_1"],
    },
}
TRUNK = {"d_model": 32, "num_heads": 2, "image_tokens": 2, "resnet_blocks": (1, 1, 1, 1)}
RDT = {"rdt_width": 24, "rdt_layers": 4, "rdt_heads": 2, "train_timesteps": 100}
PI = {"expert_width": 32, "expert_mlp_dim": 64, "max_token_len": 64}


def _digest(tensors: dict[str, torch.Tensor]) -> str:
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().contiguous().cpu()
        h.update(f"{name}:{t.dtype}:{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


def _batch(embodiment: str, size: int = 2, seed: int = 1) -> dict[str, Any]:
    spec = SPECS[embodiment]
    g = torch.Generator().manual_seed(seed)
    return {
        "embodiment": embodiment,
        "images.front_1": torch.randint(0, 256, (size, 3, 32, 40), generator=g).to(torch.uint8),
        "state": torch.randn(size, spec["history"], spec["state_dim"], generator=g),
        "actions": torch.randn(size, spec["horizon"], spec["action_dim"], generator=g),
        "action_mask": torch.ones(size, spec["horizon"], dtype=torch.bool),
        "prompt": ["pick up the cup", "fold"][:size],
    }


def fingerprint(model: torch.nn.Module) -> dict[str, str]:
    """The state dict, loss, gradients and sampled chunks of one policy, as hex digests."""
    out = {"state_dict": _digest(model.state_dict())}
    for embodiment, spec in SPECS.items():
        data = _batch(embodiment)
        model.zero_grad()
        torch.manual_seed(3)  # the same timesteps and noise
        loss = model.compute_loss(data)["loss"]  # type: ignore[operator]
        loss.backward()
        out[f"{embodiment}.loss"] = repr(loss.item())
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        out[f"{embodiment}.grads"] = _digest(grads)
        with torch.no_grad():
            chunk = model.sample_actions(data, generator=torch.Generator().manual_seed(5))  # type: ignore[operator]
            out[f"{embodiment}.sample"] = _digest({"chunk": chunk})
            if not model.can_inpaint(embodiment):  # type: ignore[operator]
                continue
            previous = torch.randn(2, spec["horizon"] - 1, spec["action_dim"])
            prefix = ActionPrefix.of(previous, delay=1, horizon=spec["horizon"])
            chunk = model.sample_actions(  # type: ignore[operator]
                data, generator=torch.Generator().manual_seed(5), prefix=prefix
            )
            out[f"{embodiment}.sample_prefix"] = _digest({"chunk": chunk})
    return out


def models(cache: Path) -> dict[str, Any]:
    """Builders of every policy fingerprinted, by name."""
    tiny = ensure_tiny_paligemma(cache)
    pi_specs = {k: {**v, "cameras": ["front_1"]} for k, v in SPECS.items()}
    return {
        "hpt_flow": lambda: HPTPolicy(HPTConfig(**TRUNK), SPECS),
        "hpt_regression": lambda: HPTPolicy(HPTConfig(**TRUNK, head="regression"), SPECS),
        "hpt_prompt_shared": lambda: HPTPolicy(
            HPTConfig(**TRUNK, use_prompt=True, shared_head=True), SPECS
        ),
        "rdt": lambda: RDTPolicy(RDTConfig(**TRUNK, **RDT), SPECS),
        "rdt_prompt": lambda: RDTPolicy(RDTConfig(**TRUNK, **RDT, use_prompt=True), SPECS),
        "pi0": lambda: PiPolicy(PiConfig(paligemma_path=tiny, variant="pi0", **PI), pi_specs),
        "pi05": lambda: PiPolicy(PiConfig(paligemma_path=tiny, variant="pi05", **PI), pi_specs),
    }


def main() -> int:
    """Fingerprint every policy; write them, compare them, or both."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the fingerprints here (JSON)")
    parser.add_argument("--compare", type=Path, help="compare with fingerprints written before")
    args = parser.parse_args()
    torch.use_deterministic_algorithms(True)
    with tempfile.TemporaryDirectory() as cache:
        prints = {}
        for name, build in models(Path(cache)).items():
            torch.manual_seed(0)
            prints[name] = fingerprint(build())
            print(f"{name}: {prints[name]['state_dict'][:16]} ...", flush=True)
    if args.out:
        args.out.write_text(json.dumps(prints, indent=1, sort_keys=True))
    if args.compare:
        before = json.loads(args.compare.read_text())
        differ = [
            f"{name}.{key}"
            for name in sorted(set(before) | set(prints))
            for key in sorted(set(before.get(name, {})) | set(prints.get(name, {})))
            if before.get(name, {}).get(key) != prints.get(name, {}).get(key)
        ]
        if differ:
            print("differ: " + ", ".join(differ))
            return 1
        print(f"all {sum(len(v) for v in prints.values())} fingerprints bit-identical")
    return 0


if __name__ == "__main__":
    sys.exit(main())
