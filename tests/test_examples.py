"""The bundled examples: every hand-labelled candidate gets its label from MPE, the golden test against itself
has beta = gamma = 0, every mechanical operator yields an admissible mutant somewhere, and the runs left out as
implied (``coharden.mpe.implied``) change no result."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.mutation.registry import operator_names

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow  # MPE of every bundled candidate, then of one example again with every run made
@pytest.mark.timeout(1800)  # on a loaded machine it took 300 s+
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
    assert readme_table() == laxity_table(rows)  # examples/README.md states what a fresh run gives
    _implied_runs_change_nothing(rows, tmp_path)


def _implied_runs_change_nothing(rows: list[dict[str, Any]], tmp_path: Path) -> None:
    """The check mode (``--no-implied``, a fresh store) grades the example that has the most implied verdicts alike
    while it makes more runs. An example without one makes the same runs either way; the others repeat what
    ``tests/mpe/test_implied.py`` checks on a project of its own, at the cost of a second MPE of the example."""
    left_out: dict[str, int] = {}
    for r in rows:
        left_out[r["example"]] = left_out.get(r["example"], 0) + sum(row["implied"] + row["not_needed"]
                                                                      for row in r["runs"].values())
    assert any(left_out.values()), "no bundled example has an implied verdict: the check mode would check nothing"
    implied = {max(sorted(left_out), key=lambda name: left_out[name])}
    args = ["examples", "check", "--dir", str(EXAMPLES), "--json", "-w", "2", "--no-implied",
            "--store", str(tmp_path / "no-implied.sqlite")]
    result = CliRunner().invoke(app, [*args, *(a for name in sorted(implied) for a in ("--only", name))])
    assert result.exit_code == 0, result.output
    checked = json.loads(result.stdout)
    keys = ("example", "candidate", "got", "matrix", "laxity", "interval", "drawn", "stop")
    default = [{k: r[k] for k in keys} for r in rows if r["example"] in implied]
    assert default == [{k: r[k] for k in keys} for r in checked]
    assert not any(row["implied"] + row["not_needed"] for r in checked for row in r["runs"].values())
    made = sum(row["made"] for r in rows if r["example"] in implied for row in r["runs"].values())
    made_all = sum(row["made"] for r in checked for row in r["runs"].values())
    print(f"bundled examples {sorted(implied)}: runs made {made} (default) vs {made_all} (--no-implied)")
    assert made < made_all


def _laxity(row: dict[str, Any]) -> str:
    return f"{row['laxity']:.2f} [{row['interval'][0]:.2f}, {row['interval'][1]:.2f}]"


def laxity_table(rows: list[dict[str, Any]]) -> dict[str, list[str]]:
    """Per example, the cells of examples/README.md's laxity table, from ``examples check --json`` rows."""
    by = {(r["example"], r["candidate"]): r for r in rows}
    return {example: [_laxity(by[example, "lax"]), by[example, "lax"]["matrix"], str(by[example, "lax"]["drawn"]),
                      _laxity(by[example, "golden"]), _laxity(by[example, "rigorous"])]
            for example in {r["example"] for r in rows}}


def readme_table() -> dict[str, list[str]]:
    """The laxity table of examples/README.md (issue 34, item 12: its laxities had gone stale)."""
    text = (EXAMPLES / "README.md").read_text()
    table = text[text.index("| example | `lax`: laxity"):].split("\n\n", 1)[0].splitlines()[2:]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table]
    return {row[0]: row[1:] for row in cells}


def test_the_examples_readme_table_reads_as_the_check_writes() -> None:
    """The table's parser and formatter agree on a row as ``examples check --json`` writes it (the slow test
    compares the whole table with a fresh run)."""
    row = {"laxity": 0.6666667, "interval": [0.2993, 0.9251], "matrix": "1/6/0/2", "drawn": 9}
    rows = [{"example": "boundary_check", "candidate": c, **row} for c in ("lax", "golden", "rigorous")]
    assert laxity_table(rows)["boundary_check"] == ["0.67 [0.30, 0.93]", "1/6/0/2", "9", "0.67 [0.30, 0.93]",
                                                    "0.67 [0.30, 0.93]"]
    assert readme_table()["boundary_check"][1:3] == ["0/4/0/2", "8"]
    assert set(readme_table()) == {d.name for d in EXAMPLES.iterdir() if (d / "instance.yaml").is_file()}
