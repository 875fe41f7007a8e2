"""The type checker is part of the test command: mypy on ``src/coharden`` with the settings of pyproject.toml
(``[tool.mypy]``: bodies of unannotated functions checked, unused ``type: ignore`` comments reported) finds
nothing. Its cache (``.mypy_cache``) makes a run after a small change take seconds."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.timeout(900)  # a first run, without the cache, checks 194 modules and their imports
def test_mypy_finds_no_error_in_src() -> None:
    pytest.importorskip("mypy", reason="mypy comes with the dev extra: pip install -e '.[dev]'")
    run = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml")],
                         cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, f"mypy (exit code {run.returncode}):\n{run.stdout}{run.stderr}"
