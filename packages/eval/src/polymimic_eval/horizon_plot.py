"""The error over the chunk's horizon as a picture: one curve per embodiment.

Error grows with distance into the future; a step up at a chunk boundary (when
execution chunks are shorter than the horizon) shows as a kink. Drawn with matplotlib
(the `plots` extra: `polymimic-eval[plots]`), written atomically as PNG.
"""

from __future__ import annotations

import io
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from polymimic_data.store import write_bytes_atomic


def plot_step_errors(
    curves: Mapping[str, Sequence[float]],
    path: str | os.PathLike[str],
    *,
    title: str = "",
    ylabel: str = "mean absolute error (unnormalised)",
) -> Path:
    """Write a PNG of each named curve (error per chunk step; NaN: no valid sample)."""
    try:
        import matplotlib

        matplotlib.use("Agg", force=False)
        from matplotlib.figure import Figure
    except ImportError as exc:
        raise ImportError(
            "plot_step_errors needs matplotlib: install polymimic-eval[plots]"
        ) from exc
    if not curves:
        raise ValueError(f"{path}: no curves to plot")
    figure = Figure(figsize=(6.4, 3.6), dpi=100, layout="constrained")
    axes = figure.add_subplot()
    for name, values in curves.items():
        steps = [i for i, v in enumerate(values) if not math.isnan(v)]
        axes.plot(steps, [values[i] for i in steps], marker=".", label=name)
    axes.set_xlabel("chunk step")
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(loc="upper left", fontsize="small")
    if title:
        axes.set_title(title)
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return write_bytes_atomic(path, buffer.getvalue())
