"""The bundled examples: every hand-labelled candidate gets its label from MPE, the golden test against itself
has beta = gamma = 0, and every mechanical operator yields an admissible mutant somewhere."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.mutation.registry import operator_names

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow  # ~90 s idle: MPE of every bundled candidate
@pytest.mark.timeout(900)  # on a loaded machine it took 300 s+
def test_every_bundled_candidate_gets_its_label(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    result = CliRunner().invoke(app, ["examples", "check", "--dir", str(EXAMPLES), "--json", "-w", "2",
                                      "--store", str(tmp_path / "store.sqlite")])
    rows = json.loads(result.stdout)
    mismatches = [(r["example"], r["candidate"], r["expected"], r["got"]) for r in rows if not r["ok"]]
    assert not mismatches
    assert result.exit_code == 0
    examples = {r["example"] for r in rows}
    assert len(examples) >= 5
    labels = {r["expected"] for r in rows}
    assert {"Rigorous", "Lax", "Misaligned", "NotReproducing"} <= labels
    admitted = set()
    for row in rows:
        admitted |= {op for op, counts in row["per_operator"].items() if counts["admissible"]}
    assert {"incomplete_fix", "behavior_substitution", "symptom_suppression", "input_specific_shortcut"} <= admitted
    assert admitted <= set(operator_names())
    # the printer example's lax test is caught by a mutant that the rigorous test rejects
    printer = {r["candidate"]: r for r in rows if r["example"] == "printer_brackets"}
    assert printer["lax"]["got"] == "Lax"
    assert printer["rigorous"]["got"] == "Rigorous"
