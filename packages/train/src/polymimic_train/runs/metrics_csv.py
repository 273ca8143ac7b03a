"""`metrics/metrics.csv`: one timeline of a run's metrics, appended across resumes.

Lightning's CSVLogger deletes an existing metrics.csv when a run starts in the same
folder again, and buffers rows in memory. This one writes each row as it is logged,
appends to what is there, and can cut the file back to a checkpoint's row count: the rows
a killed run wrote past its last checkpoint are moved to `abandoned-<time>.csv` beside it
(never deleted), because the resumed run writes those steps again.
"""

from __future__ import annotations

import csv
import os
import time
from io import StringIO
from pathlib import Path
from typing import Any

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_only

from polymimic_data.store import write_text_atomic


def _read(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def _csv_text(fieldnames: list[str], rows: list[dict[str, Any]]) -> str:
    out = StringIO()
    writer = csv.DictWriter(out, fieldnames=fieldnames)
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


class _AppendingWriter(ExperimentWriter):
    def _check_log_dir_exists(self) -> None:
        # Keep what an earlier life of this run wrote; continue its header.
        path = Path(self.metrics_file_path)
        if path.is_file():
            self.metrics_keys, rows = _read(path)
            self.rows = len(rows)
        else:
            self.rows = 0

    def log_metrics(self, metrics_dict: dict[str, float], step: int | None = None) -> None:
        super().log_metrics(metrics_dict, step)
        self.rows += 1
        self.save()  # every row on disk as it comes: a kill loses nothing logged

    def truncate(self, rows: int) -> None:
        path = Path(self.metrics_file_path)
        if not path.is_file():
            return
        self.save()
        fieldnames, existing = _read(path)
        if len(existing) <= rows:
            return
        stamp = time.strftime("%Y-%m-%d_%H-%M-%S")
        abandoned = path.with_name(f"abandoned-{stamp}.csv")
        write_text_atomic(abandoned, _csv_text(fieldnames, existing[rows:]))
        write_text_atomic(path, _csv_text(fieldnames, existing[:rows]))
        self.rows = rows


class AppendingCSVLogger(CSVLogger):
    """A CSVLogger that appends across resumes and writes each row at once."""

    def __init__(self, save_dir: str | os.PathLike[str], name: str = "metrics") -> None:
        super().__init__(save_dir=str(save_dir), name=name, version="")

    @property
    @rank_zero_experiment
    def experiment(self) -> _AppendingWriter:  # type: ignore[override]
        if self._experiment is None:
            self._fs.makedirs(self.root_dir, exist_ok=True)
            self._experiment = _AppendingWriter(log_dir=self.log_dir)
        return self._experiment  # type: ignore[return-value]

    @property
    def rows_written(self) -> int:
        rank = rank_zero_only.rank  # pyright: ignore[reportFunctionMemberAccess] (set by Lightning)
        return self.experiment.rows if rank == 0 else 0

    @rank_zero_only
    def truncate_rows(self, rows: int) -> None:
        """Cut metrics.csv back to its first `rows` rows (the tail goes to abandoned-*.csv)."""
        self.experiment.truncate(rows)
