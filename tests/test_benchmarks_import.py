"""Every benchmark script still imports: they are not run by the suite (they take minutes and real data), so an
API they use that moves would otherwise go unnoticed until someone measures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPTS = sorted((Path(__file__).parent.parent / "benchmarks").glob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_benchmark_imports(script: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"benchmark_{script.stem}", script)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # definitions only: each script runs under `if __name__ == "__main__"`
    assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
