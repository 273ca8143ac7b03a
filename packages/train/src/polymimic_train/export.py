"""`export checkpoint=<path> [out=<folder>] [overwrite=true]`: a policy for deployment.

Writes `model.safetensors` (the policy's and the normaliser's tensors, no optimizer or
training state) and `config.json` (the policy's registered name and config, embodiments, layouts,
normalisation statistics and the training step), which `load_policy(<folder>)` loads.
The default folder is `<run dir>/export/step<N>` beside the run's checkpoints.
"""

from __future__ import annotations

import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> None:
    """The `export` command (see the module docstring)."""
    given = sys.argv[1:] if argv is None else argv
    args = dict(a.split("=", 1) for a in given if "=" in a)
    if "checkpoint" not in args or set(args) - {"checkpoint", "out", "overwrite"}:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    checkpoint = Path(args["checkpoint"])
    if not checkpoint.is_file():
        print(f"error: checkpoint={checkpoint}: no such file", file=sys.stderr)
        sys.exit(2)
    from polymimic_train.trained_policy import export_policy

    try:
        written = export_policy(
            checkpoint,
            args.get("out"),
            overwrite=args.get("overwrite", "false").lower() in ("true", "1", "yes"),
        )
    except (ValueError, FileExistsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
    print(f"exported {checkpoint} to {written}")


if __name__ == "__main__":
    main()
