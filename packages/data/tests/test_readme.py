"""The README's examples run as written: another project's first contact with the package."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_keeps_its_examples() -> None:
    assert len(BLOCKS) == 3  # batches and normalisation, writing episodes, resolving them


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs(index: int, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # examples may write files
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its mkdtemp()s, removed after
    exec(compile(BLOCKS[index], f"{README}:block{index}", "exec"), {})
