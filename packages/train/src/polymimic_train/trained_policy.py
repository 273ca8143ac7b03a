"""Exports of a run's checkpoints; loading a trained policy lives in polymimic-serve.

`load_policy` and `TrainedPolicy` are polymimic_serve's (re-exported here for this
package's users): a robot computer installs polymimic-serve alone. What a checkpoint carries
is written by `polymimic_serve.checkpoint_record` (see polymimic_serve.checkpoints).

`export_policy(checkpoint, out)` writes the same without training state: `model.safetensors`
(the policy's and the normaliser's tensors) and `config.json` (the record and the step),
which `load_policy(out)` loads too.
"""

from __future__ import annotations

import os
from pathlib import Path

from polymimic_serve import TrainedPolicy, load_policy, read_checkpoint, write_export
from polymimic_train.runs.run_dirs import checkpoint_home

__all__ = ["TrainedPolicy", "default_export_dir", "export_policy", "load_policy"]


def default_export_dir(checkpoint: Path, step: int | None) -> Path:
    """`<run dir>/export/step<N>` for a run's checkpoint, else `export/<name>` beside it."""
    name = f"step{step:06d}" if step is not None else checkpoint.resolve().stem
    return checkpoint_home(checkpoint) / "export" / name


def export_policy(
    checkpoint: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    overwrite: bool = False,
) -> Path:
    """Write `out/model.safetensors` and `out/config.json` from a checkpoint of `train`.

    `out` defaults to `default_export_dir`. The folder appears whole or not at all; an
    existing one is replaced only with `overwrite` (and then only once the new one is
    complete).
    """
    checkpoint = Path(checkpoint)
    record, state, step = read_checkpoint(checkpoint)
    out = Path(out) if out is not None else default_export_dir(checkpoint, step)
    source = checkpoint.resolve()
    return write_export(
        record, state, step, out, source=str(source), overwrite=overwrite, base=source.parent
    )
