"""The README's examples run as written: a robot computer's first contact with the package."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_shows_a_loop_with_each_executor_and_the_install_line() -> None:
    text = README.read_text()
    assert len(BLOCKS) == 3
    for executor in ("chunk", "temporal_ensemble", "rtc"):
        assert f'make_executor("{executor}"' in BLOCKS[0]
    assert "RealTimeRunner(executor, fps=50)" in BLOCKS[1]
    assert 'uv pip install "polymimic-serve @ git+' in text and "polymimic-serve runs/" in text


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_a_readme_example_runs(index: int, tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its mkdtemp()s, removed after
    exec(compile(BLOCKS[index], f"{README}:block{index}", "exec"), {})
    assert capsys.readouterr().out  # it printed what it made
