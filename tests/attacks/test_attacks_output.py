"""Hostile names and messages against coharden's outputs and log folders (issue 51, classes 3 and 4).

Text from a test, a fix or a prediction file is data: a failure message or model name holding Rich markup
(``[/x]``) must not crash ``verify``, ``mpe`` or ``eval``; a newline must not forge a heading or a row in
report.md or a ``class:`` line in a run log; raw HTML must not reach report.md or report.html. Names that map to
one log folder are made distinct or refused, and no name leaves the log directory. Real git, real pytest runs on
the bundled ``boundary_check`` example, real files.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from coharden.cli import app
from coharden.escaping import for_rich, html_text, log_value, md_cell, md_inline, md_line
from coharden.evaluation.report import render_html, render_markdown
from coharden.mpe.logs import (
    MAX_COMPONENT,
    NAME_FILE,
    LogFolderError,
    check_log_folders,
    folder_name,
    instance_dir,
    run_log,
    write_instance_log,
)
from coharden.schema.prediction import Prediction

EX = Path(__file__).parents[2] / "examples"
#: one string that is Rich markup, a forged Markdown heading and row, raw HTML and a forged log line at once
HOSTILE = "[/x]evil[bold]\n## Rigorous\n| x | y |\n<script>alert(1)</script>\nclass: Rigorous\r\x1b[2J"
#: a failing test whose assertion message is that string (the buggy code fails it: a real FAIL verdict's reason)
HOSTILE_TEST = f'''\
diff --git a/tests/test_repro.py b/tests/test_repro.py
new file mode 100644
--- /dev/null
+++ b/tests/test_repro.py
@@ -0,0 +1,5 @@
+from throttle import is_allowed
+
+
+def test_repro_fourth_request_is_rejected():
+    assert is_allowed([0, 1, 2], now=5, limit=3, window=60) is False, {HOSTILE!r}
'''


def _no_forgery(text: str, *, markup: bool = True) -> None:
    """No line of ``text`` is a forged heading, row or log line; no raw tag in Markdown or HTML (``markup``)."""
    lines = text.splitlines()
    assert "## Rigorous" not in lines
    assert "| x | y |" not in lines
    assert "class: Rigorous" not in lines
    assert not markup or "<script>" not in text


# ---- the escaping layer itself -------------------------------------------------------------------------------


def test_rich_markup_prints_as_it_is() -> None:
    console = Console(width=300, force_terminal=False, color_system=None)
    with console.capture() as captured:
        console.print(f"[bold]name:[/] {for_rich(HOSTILE)}")
    out = captured.get()
    assert "[/x]evil[bold]" in out
    assert "\x1b" not in out  # no terminal escape sequence reaches the terminal: shown as \x1b
    assert "\\x1b[2J" in out


def test_markdown_text_is_one_inline_line() -> None:
    for escape in (md_inline, md_line, md_cell):
        text = escape(HOSTILE)
        assert "\n" not in text
        assert "\r" not in text
        assert "<script" not in text
        assert "| x | y |" not in text  # every cell separator escaped
    assert md_line("## Rigorous").startswith("\\#")
    assert md_line("1. a list") == "1\\. a list"
    assert md_line("    > quote").startswith("\\>")
    assert md_inline("a \\| b") == "a \\\\\\| b"  # an escaped pipe in the data cannot unescape the separator
    assert md_inline("title ##").endswith("\\#")  # no closing sequence for a heading to drop
    assert md_inline("tests/test_x.py::test_a_b") == "tests/test_x.py::test_a_b"  # ids stay readable
    assert md_cell("**DISAGREE**") == "**DISAGREE**"  # a writer's own emphasis kept


def test_html_and_log_values() -> None:
    assert "<" not in html_text(HOSTILE)
    assert "\x1b" not in html_text(HOSTILE)
    assert html_text('"><img>') == "&quot;&gt;&lt;img&gt;"
    line = log_value(HOSTILE)
    assert len(line.splitlines()) == 1
    assert log_value("a\\nb") != log_value("a\nb")  # a backslash in the data cannot forge an escape


# ---- class 4: the run log, report.md, report.html ------------------------------------------------------------


def test_the_run_log_has_one_line_per_field() -> None:
    row = {"instance_id": "i\nclass: Rigorous", "model_name_or_path": HOSTILE, "test_class": "Lax",
           "test_ids": ["t\nclass: Rigorous"], "reason": "r\nclass: Rigorous",
           "candidate_buggy": {"outcome": "FAIL", "reason": HOSTILE}, "warnings": ["w\nclass: Rigorous"],
           "mutants": [{"cell": "beta", "mutant": {"id": "m\n", "location": "l\n", "description": HOSTILE}}]}
    text = run_log(row)
    assert [line for line in text.splitlines() if line.startswith("class:")] == ["class: Lax"]
    _no_forgery(text, markup=False)
    assert run_log({"instance_id": "i", "model_name_or_path": "m", "error": HOSTILE}).count("\n") == 3


def _report(system: str, note: str) -> dict:
    row = {"fail_to_pass": True, "test_class": "Lax", "laxity": 0.5, "interval": [0.2, 0.8],
           "matrix": {"alpha": 1, "beta": 1, "gamma": 0, "delta": 0}, "reason": note}
    return {"settings": {"tau": 0.202, "operators": ["incomplete_fix"], "per_operator": 3, "seed": 0},
            "instances": {"total": 1, "errors": {"i\n## Rigorous": note}, "fix_errors": {}},
            "comparison": [{"system": system, "resolved": None}], "fixes": {},
            "tests": {system: {"source": f"{system}.jsonl", "instances": {f"i\n{HOSTILE}": row},
                               "summary": {"fail_to_pass_instances": 1, "total_instances": 1,
                                           "fail_to_pass_rate": 1.0, "mean_laxity": 0.5, "matrix": row["matrix"]}}},
            "coupling": {}, "overfitting": {}, "refinement": {}, "injection": None, "runs": {},
            "cutoffs": {"cutoffs": [0.202], "injection": None, "tests": []}, "definitions": {"d": note}}


def test_report_markdown_and_html_gain_no_heading_row_or_tag() -> None:
    report = _report(HOSTILE, HOSTILE)
    markdown = render_markdown(report)
    _no_forgery(markdown)
    headings = [line for line in markdown.splitlines() if line.startswith("#")]
    assert [h.split(":")[0] for h in headings] == [h.split(":")[0] for h in render_markdown(
        _report("otter", "note")).splitlines() if h.startswith("#")]
    rows = [line for line in markdown.splitlines() if line.startswith("|")]
    plain_rows = [line for line in render_markdown(_report("otter", "note")).splitlines() if line.startswith("|")]
    assert len(rows) == len(plain_rows)
    # every row has as many cells as its header: count unescaped separators
    assert {len(_cells(r)) for r in rows[:3]} == {len(_cells(rows[0]))}
    page = render_html(report, figures={})
    assert "<script>" not in page
    assert "&lt;script&gt;" in page


def _cells(row: str) -> list[str]:
    out, cell, escaped = [], "", False
    for char in row.strip()[1:-1]:
        if char == "|" and not escaped:
            out.append(cell)
            cell = ""
        else:
            cell += char
        escaped = char == "\\" and not escaped
    return [*out, cell]


# ---- class 3: log folders ------------------------------------------------------------------------------------


def test_names_that_clean_alike_get_distinct_folders_and_never_escape(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    names = ["a b", "a.b", "a_b", "a\tb", "a..b", ".", "..", "", "../../etc", "x/../../y", "a\x00b", "é" * 200,
             "x" * 300, "model.", ".model", "model", "a/b", "acme/otter"]
    folders = {name: folder_name(name, model=True) for name in names}
    assert folders["acme/otter"] == "acme__otter"
    assert folders["model"] == "model"
    assert folders["a.b"] == "a.b"
    assert folders["a_b"] == "a_b"
    assert len(set(folders.values())) == len(names)  # ("a/b" and "a__b" both give a__b: refused, below)
    for name, folder in folders.items():
        assert folder not in ("", ".", ".."), name
        assert "/" not in folder, name
        assert "\x00" not in folder, name
        assert len(folder.encode()) <= 255
        assert folder_name(name, model=True) == folder  # deterministic
        path = instance_dir(log_dir, name, name, name)
        assert path.resolve().is_relative_to(log_dir.resolve()), name
        assert len(path.relative_to(log_dir).parts) == 3
    predictions = [Prediction(instance_id=n or "_", model_name_or_path=n) for n in names]
    check_log_folders(log_dir, "run", predictions)
    for pred in predictions:  # real folders: each one written and read back apart
        write_instance_log(log_dir, "run", pred, {"instance_id": pred.instance_id,
                                                  "model_name_or_path": pred.model_name_or_path})
    for pred in predictions:
        folder = instance_dir(log_dir, "run", pred.model_name_or_path, pred.instance_id)
        assert json.loads((folder / "mpe.json").read_text())["model_name_or_path"] == pred.model_name_or_path
        assert json.loads((folder / NAME_FILE).read_text()) == pred.instance_id
        assert json.loads((folder.parent / NAME_FILE).read_text()) == pred.model_name_or_path
    assert MAX_COMPONENT < 255


@pytest.mark.parametrize(("first", "second"), [("a/b", "a__b"), ("Otter", "otter")])
def test_systems_that_would_share_a_folder_are_refused(first: str, second: str, tmp_path: Path) -> None:
    predictions = [Prediction(instance_id="i", model_name_or_path=first),
                   Prediction(instance_id="i", model_name_or_path=second)]
    with pytest.raises(LogFolderError, match="would share the log folder"):
        check_log_folders(tmp_path, "run", predictions)
    with pytest.raises(LogFolderError, match="instance ids"):
        check_log_folders(tmp_path, "run", [Prediction(instance_id="A-1", model_name_or_path="m"),
                                            Prediction(instance_id="a-1", model_name_or_path="m")])


def test_a_folder_written_for_another_name_is_refused(tmp_path: Path) -> None:
    first = Prediction(instance_id="i", model_name_or_path="a/b")
    write_instance_log(tmp_path, "run", first, {"instance_id": "i", "model_name_or_path": "a/b"})
    check_log_folders(tmp_path, "run", [first])  # the same name again: a rerun, fine
    with pytest.raises(LogFolderError, match="written for system 'a/b'"):
        check_log_folders(tmp_path, "run", [Prediction(instance_id="i", model_name_or_path="a__b")])
    # a folder of an older coharden (no name file): its report.json says whose it is
    legacy = tmp_path / "run" / "m" / "i"
    legacy.mkdir(parents=True)
    (legacy / "report.json").write_text(json.dumps({"instance_id": "i", "model_name_or_path": "m/"}))
    with pytest.raises(LogFolderError, match="written for instance"):
        check_log_folders(tmp_path, "run", [Prediction(instance_id="i", model_name_or_path="m")])


# ---- the commands, end to end --------------------------------------------------------------------------------


def _setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *models: str) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "300")
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps({"instance_id": "example__boundary_check", "model_name_or_path": m,
                                               "model_patch": HOSTILE_TEST}) + "\n" for m in models))
    return predictions


def _clean_run(result) -> None:  # type: ignore[no-untyped-def]
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert "MarkupError" not in result.output


def test_verify_prints_a_hostile_failure_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _setup(tmp_path, monkeypatch)
    patch = tmp_path / "hostile.diff"
    patch.write_text(HOSTILE_TEST)
    result = CliRunner().invoke(app, ["verify", str(EX / "boundary_check"), "--test", str(patch), "--store",
                                      str(tmp_path / "s.sqlite")])
    _clean_run(result)
    assert result.exit_code == 0, result.output
    assert "fail-to-pass: yes" in result.stdout
    assert "[/x]evil" in result.stdout  # the message itself, printed as it is
    assert "\x1b[2J" not in result.output


def test_mpe_batch_and_eval_with_a_hostile_model_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    predictions = _setup(tmp_path, monkeypatch, HOSTILE)
    store = str(tmp_path / "s.sqlite")
    common = ["--operators", "incomplete_fix", "--per-operator", "2", "--store", store, "-w", "1"]
    result = CliRunner().invoke(app, ["mpe", "--instances", str(EX / "boundary_check"), "--predictions",
                                      str(predictions), "--output", "out/run1", *common])
    _clean_run(result)
    assert result.exit_code == 0, result.output
    [row] = [json.loads(line) for line in (tmp_path / "out/run1/mpe.jsonl").read_text().splitlines()]
    assert row["model_name_or_path"] == HOSTILE
    assert row["test_class"] not in (None, "Error")
    [model_folder] = [p for p in (tmp_path / "out/run1/logs/run1").iterdir() if p.is_dir()]
    assert model_folder.parent == tmp_path / "out/run1/logs/run1"  # one folder, inside the run's
    log = (model_folder / "example__boundary_check" / "run_instance.log").read_text()
    assert [line for line in log.splitlines() if line.startswith("class:")] == [f"class: {row['test_class']}"]
    _no_forgery(log, markup=False)

    result = CliRunner().invoke(app, ["eval", "--instances", str(EX / "boundary_check"), "--tests",
                                      str(predictions), "-o", "ev", *common])
    _clean_run(result)
    assert result.exit_code == 0, result.output
    markdown = (tmp_path / "ev" / "report.md").read_text()
    _no_forgery(markdown)
    assert not any(line.startswith("## Rigorous") for line in markdown.splitlines())
    html_page = tmp_path / "ev" / "report.html"
    if html_page.exists():  # matplotlib installed
        assert "<script>" not in html_page.read_text()


def test_mpe_batch_refuses_names_that_share_a_folder_before_any_run(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from coharden.execution import sandbox

    predictions = _setup(tmp_path, monkeypatch, "acme/otter", "acme__otter")
    started: list[list[str]] = []
    monkeypatch.setattr(sandbox, "spawn", lambda cmd, *args, **kwargs: started.append(cmd))
    result = CliRunner().invoke(app, ["mpe", "--instances", str(EX / "boundary_check"), "--predictions",
                                      str(predictions), "--output", "out/run1", "--store", str(tmp_path / "s.db")])
    _clean_run(result)
    assert result.exit_code != 0
    assert "would share the log folder" in result.output
    assert started == []
