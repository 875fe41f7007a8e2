"""``coharden demo loop``: the CoHarden loop on the bundled boundary_check example against the mock server with
the scripted replies in examples/boundary_check/loop-replies.yaml (real git, pytest, mutants; no model)."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.schema.mpe_config import LOOP_TAU
from coharden.schema.round_record import load_run_file

pytest.importorskip("minisweagent", reason="the demo runs the default agent (mini-swe-agent, in the dev extra)")

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.slow
def test_demo_loop_shows_rounds_matrices_and_the_decision(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    result = CliRunner().invoke(app, ["demo", "loop", str(EXAMPLES / "boundary_check"), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)
    assert "failed" not in shown
    assert shown["decision"] == "clean"
    assert shown["tau"] == LOOP_TAU  # the loop's default cutoff: the regression shows as in a real run
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
    # round 2's reply was chosen by the request: the loop's feedback named input-specific wrong fixes
    [instance_dir] = (out / "run" / "instances").iterdir()
    events = [json.loads(line) for line in (instance_dir / "round2.traj.jsonl").read_text().splitlines()]
    asked = next(e["content"] for e in events if e.get("role") == "user")
    assert "weaker than the previous one" in asked
    assert "returns False (buggy otherwise)" in asked
    answered = next(e["content"] for e in events if e.get("role") == "assistant")
    assert "return the right answer for exactly the input it checks" in answered


BAD_REPLIES = """\
    rules:
      - match: {contains: "Write a test that reproduces the issue below", last_user: true}
        reply: |-
          THOUGHT: A test that passes everywhere.

          ```mswea_bash_command
          cat <<'EOF' > tests/test_repro.py
          from throttle import is_allowed


          def test_repro():
              assert is_allowed([0], now=5, limit=3, window=60)
          EOF
          python -m pytest tests/test_repro.py -q
          ```
      - match: {regex: "\\\\d+ passed in", last_user: true}
        reply: |-
          THOUGHT: Submit.

          ```mswea_bash_command
          echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT
          ```
    """


def test_a_failed_demo_exits_1_with_the_first_real_cause(tmp_path: Path) -> None:
    """The script goes off course (round 0's test passes on the buggy code): the critic rejects it, the mock has
    no reply for the follow-up (404, a model error). The demo exits 1 naming the critic's reason, not the mock."""
    replies = tmp_path / "replies.yaml"
    replies.write_text(textwrap.dedent(BAD_REPLIES))
    result = CliRunner().invoke(app, ["demo", "loop", str(EXAMPLES / "boundary_check"), "--replies", str(replies),
                                      "-o", str(tmp_path / "demo"), "--json"])
    assert result.exit_code == 1, result.output
    shown = json.loads(result.stdout)
    assert shown["decision"] == "model_error"
    assert shown["failed"].startswith("round 0: the critic rejected the submission:")
    assert "passes on the original (buggy) code" in shown["failed"]
    said = " ".join(result.stderr.split())
    assert "error: the demo loop did not end as scripted (model_error): round 0: the critic rejected" in said
    assert "no rule matched" not in said


def test_demo_loop_needs_scripted_replies(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["demo", "loop", str(EXAMPLES / "json_display"), "-o", str(tmp_path)])
    assert result.exit_code == 2
    assert "no scripted replies (loop-replies.yaml)" in " ".join(result.output.split())
    assert "Traceback" not in result.output


def test_demo_loop_names_a_missing_example_and_finds_the_default_anywhere(tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # outside the repository root
    missing = CliRunner().invoke(app, ["demo", "loop", "examples/boundary_check"])
    assert missing.exit_code == 2
    assert "examples/boundary_check: no such example directory" in " ".join(missing.output.split())
    from coharden.loop.demo import find_example

    assert (find_example(None) / "loop-replies.yaml").is_file()  # the checkout's, from any directory
