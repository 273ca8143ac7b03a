"""The README's example runs as written."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.DOTALL)


def test_the_readme_example_runs(tmp_path: Path, monkeypatch, capsys) -> None:
    assert len(BLOCKS) == 1
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its mkdtemp()s, removed after
    exec(compile(BLOCKS[0], f"{README}:block0", "exec"), {})
    out = capsys.readouterr().out
    assert "the expert succeeded in 100%" in out and "0.0 [0.0, 0.65" in out
