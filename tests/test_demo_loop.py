"""``coharden demo loop``: the CoHarden loop on the bundled boundary_check example against the mock server with
the scripted replies in examples/boundary_check/loop-replies.yaml (real git, pytest, mutants; no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.schema.round_record import load_run_file

pytest.importorskip("minisweagent", reason="the demo runs the default agent (mini-swe-agent, in the dev extra)")

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.mark.slow
def test_demo_loop_shows_rounds_matrices_and_the_decision(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "loop", str(EXAMPLES / "boundary_check"), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert shown["decision"] == "clean"
    assert [r["decision"] for r in shown["rounds"]] == ["lax_init", "regression", "clean"]
    lax_init, regression, clean = shown["rounds"]
    assert lax_init["matrix"] == {}
    assert regression["laxity"] > shown["tau"]  # the weak round's test lets wrong fixes through
    assert regression["matrix"]["beta"] > 0
    assert clean["laxity"] <= shown["tau"]
    assert clean["matrix"]["gamma"] > 0
    assert "retry_after([0, 1, 2], now=5, limit=3, window=60) == 55" in shown["test"]
    assert "t > cutoff" in shown["fix"]
    # the run is a real loop run: its round records feed `coharden eval --runs`
    records = load_run_file(out / "run" / "rounds" / "demo.jsonl")
    assert [r.decision for r in records] == ["lax_init", "regression", "clean"]


def test_demo_loop_needs_scripted_replies(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "loop", str(EXAMPLES / "json_display"), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "no scripted replies (loop-replies.yaml)" in " ".join(result.output.split())
    assert "Traceback" not in result.output
