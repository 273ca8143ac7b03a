"""The one output format of every benchmark: one JSON line per figure (DESIGN.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def figure_printer(benchmark: str) -> Callable[..., None]:
    """emit(metric, value, unit, **extra) for `benchmark`."""

    def emit(metric: str, value: float, unit: str, **extra: Any) -> None:
        line = {"benchmark": benchmark, "metric": metric, "value": round(value, 5), "unit": unit}
        print(json.dumps(line | extra), flush=True)

    return emit
