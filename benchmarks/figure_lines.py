"""The one output format of every benchmark: one JSON line per figure (DESIGN.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def figure_printer(benchmark: str) -> Callable[..., dict[str, Any]]:
    """emit(metric, value, unit, **extra) for `benchmark`: prints the line, and returns it
    (a headline figure is also saved: benchmarks/headline.py)."""

    def emit(metric: str, value: float, unit: str, **extra: Any) -> dict[str, Any]:
        line = {"benchmark": benchmark, "metric": metric, "value": round(value, 5), "unit": unit}
        print(json.dumps(line | extra), flush=True)
        return line | extra

    return emit
