"""Per-instance log folders of a batch MPE (issue 34, item 13), as the SWE-bench harness lays out its logs:
``LOG_DIR/RUN_ID/MODEL/INSTANCE_ID/`` with ``patch.diff``, ``report.json`` and ``run_instance.log``; real git,
real pytest, a real store."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import CALC_FILES, CALC_FIX, GOOD_TEST, calc_test_file, make_patch, make_repo
from typer.testing import CliRunner

from coharden.cli import app
from coharden.mpe.logs import run_log, safe_name

LAX_TEST = """\
    def test_add_small():
        assert add(1, 2) == 3
    """


def test_a_batch_writes_one_log_folder_per_prediction(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    repo, base = make_repo(tmp_path / "calc", CALC_FILES)
    record = {"instance_id": "acme__calc-1", "repo": str(repo), "base_commit": base,
              "patch": make_patch(repo, CALC_FIX), "test_patch": make_patch(repo, calc_test_file(GOOD_TEST))}
    records = tmp_path / "instances.jsonl"
    records.write_text(json.dumps(record) + "\n")
    lax = make_patch(repo, calc_test_file(LAX_TEST))
    predictions = tmp_path / "preds.jsonl"
    predictions.write_text("".join(json.dumps(p) + "\n" for p in (
        {"instance_id": "acme__calc-1", "model_name_or_path": "acme/otter", "model_patch": lax},
        {"instance_id": "acme__calc-1", "model_name_or_path": "empty", "model_patch": ""},
        {"instance_id": "nope-1", "model_name_or_path": "acme/otter", "model_patch": lax})))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COHARDEN_CACHE", str(tmp_path / "cache"))
    args = ["mpe", "--instances", str(records), "--predictions", str(predictions), "--output", "results/run1",
            "--store", str(tmp_path / "s.sqlite"), "--operators", "behavior_substitution,incomplete_fix",
            "--per-operator", "2", "-w", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    logs = tmp_path / "results" / "run1" / "logs" / "run1"  # default: logs/ in the output, the run named by it
    assert "per-instance logs:" in result.stdout
    folder = logs / "acme__otter" / "acme__calc-1"
    # .coharden-name: the instance id the folder is for (a folder written for another name is refused, issue 51)
    assert sorted(p.name for p in folder.iterdir()) == [".coharden-name", "mpe.json", "patch.diff", "report.json",
                                                        "run_instance.log"]
    assert folder.joinpath("patch.diff").read_text() == lax
    row = json.loads(folder.joinpath("mpe.json").read_text())
    rows = [json.loads(line) for line in (tmp_path / "results" / "run1" / "mpe.jsonl").read_text().splitlines()]
    assert row == rows[0]
    text = folder.joinpath("run_instance.log").read_text()
    assert "instance: acme__calc-1\ntest: acme/otter\n" in text
    assert "on the buggy code: FAIL" in text
    assert "on the fixed code: PASS" in text
    assert f"class: {row['test_class']}" in text
    for mutant in row["mutants"]:
        assert f"{mutant['cell']:5}  {mutant['mutant']['id']}" in text
    invalid = (logs / "empty" / "acme__calc-1" / "run_instance.log").read_text()
    assert "class: Invalid" in invalid
    assert "reason: " in invalid
    assert "error: no instance with this id" in (logs / "acme__otter" / "nope-1" / "run_instance.log").read_text()
    # a second run is served from the store and writes the same folders, under another run id and log dir
    again = CliRunner().invoke(app, [*args, "--run-id", "again", "--log-dir", "elsewhere"])
    assert again.exit_code == 0, again.output
    for name in ("report.json", "mpe.json"):
        assert (tmp_path / "elsewhere" / "again" / "acme__otter" / "acme__calc-1" / name).read_text() == \
            folder.joinpath(name).read_text()


def test_an_unwritable_log_dir_is_refused_before_any_work(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = CliRunner().invoke(app, ["mpe", "--instances", "x.jsonl", "--predictions", "p.jsonl", "--output",
                                      str(tmp_path / "out"), "--log-dir", str(blocker / "logs")])
    assert result.exit_code == 2
    assert result.output.strip().startswith("error: --log-dir: ")
    assert len(result.output.strip().splitlines()) == 1


def test_names_become_safe_path_components() -> None:
    assert safe_name("../../etc") == "_.._etc"  # one component: no separator, never .. itself
    assert safe_name("..") == "_"
    assert safe_name("sympy__sympy-20590") == "sympy__sympy-20590"


def test_the_run_log_names_mutants_without_a_cell() -> None:
    """A mutant with no cell is stored with ``cell: null`` (an inadmissible or implausible one): its line says
    why instead of the log crashing on a None, which stopped every batch with an implausible mutant (issue 50)."""
    row = {"instance_id": "i", "model_name_or_path": "m", "mutants": [
        {"cell": None, "mutant": {"id": "widened_scope-1"}, "plausibility": {"outcome": "FAIL"}},
        {"cell": None, "mutant": {"id": "incomplete_fix-1"}, "candidate": {"outcome": "TIMEOUT"}},
        {"cell": "beta", "mutant": {"id": "token_revert-1"}}]}
    lines = run_log(row).splitlines()
    assert any("implausible" in line and "widened_scope-1" in line for line in lines)
    assert any(line.split()[:2] == ["-", "incomplete_fix-1"] for line in lines)
    assert any(line.split()[:2] == ["beta", "token_revert-1"] for line in lines)
