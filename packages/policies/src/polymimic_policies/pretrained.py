"""Pretrained parts (stems, trunk, heads) as safetensors files, loaded only by their hash.

A part loads only when its file's sha256 is the one the config names, and only whole:
a missing or unexpected key, or a shape that differs, is an error naming the parameter.
`save_part` writes a part and returns its hash, for the config of the run it starts.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from torch import nn


class PretrainedWeightsError(ValueError):
    """A pretrained file is not the one the config names, or does not fit the module."""


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The file's sha256, as hex."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_part(module: nn.Module, path: str | os.PathLike[str], sha256: str, part: str) -> None:
    """Load `module`'s whole state from `path`, whose hash must be `sha256`."""
    from safetensors.torch import load_file

    path = Path(path)
    if not path.is_file():
        raise PretrainedWeightsError(f"pretrained {part}: {path} does not exist")
    actual = file_sha256(path)
    if actual != sha256:
        raise PretrainedWeightsError(
            f"pretrained {part}: {path} has sha256 {actual}, the config names {sha256}; "
            "refusing to load weights that are not the ones asked for"
        )
    state = load_file(path)
    own = module.state_dict()
    missing = [k for k in own if k not in state]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k} (file {tuple(state[k].shape)}, model {tuple(own[k].shape)})"
        for k in own
        if k in state and state[k].shape != own[k].shape
    ]
    for problem, keys in (("missing", missing), ("unexpected", unexpected), ("shape", shapes)):
        if keys:
            raise PretrainedWeightsError(
                f"pretrained {part}: {path}: {len(keys)} {problem} parameter(s), e.g. "
                f"{', '.join(keys[:3])}"
            )
    module.load_state_dict(state, strict=True)


def save_part(module: nn.Module, path: str | os.PathLike[str]) -> str:
    """Write `module`'s state as safetensors (atomically); returns the file's sha256."""
    from safetensors.torch import save_file

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    state = {k: v.detach().contiguous() for k, v in module.state_dict().items()}
    save_file(state, str(tmp))
    os.replace(tmp, path)
    return file_sha256(path)
