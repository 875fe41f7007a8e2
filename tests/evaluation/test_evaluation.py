"""``coharden eval`` end to end on the bundled examples, with prediction files and loop records written here.

Real git, real pytest runs (InstanceExecutor), real SQLite. Every number of the JSON report is compared with
the value worked out by hand below from what the hand-written patches do. The only inputs not fixed by hand
are the mutants MPE samples for the one Lax test (its matrix and laxity); they are read from its row, checked
for consistency (laxity = beta / admissible >= tau), and every aggregate that uses them is recomputed here.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from coharden.cli import app
from coharden.errors import CoHardenError
from coharden.evaluation.grading import RESOLVED_FULL, RESOLVED_NO, RESOLVED_PARTIAL, grade_statuses, resolution
from coharden.evaluation.inputs import load_injection, load_prediction_sets
from coharden.evaluation.metrics import paired_delta
from coharden.evaluation.pairs import coupling
from coharden.evaluation.report import render_html, render_markdown
from coharden.execution.store import Store
from coharden.instances import load_local
from coharden.patches import make_diff
from coharden.schema.mutant import MECHANICAL_DEFAULT
from coharden.schema.round_record import RecordError, RoundRecord, load_runs
from coharden.schema.verdict import Outcome, TestStatus, Verdict

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ("boundary_check", "printer_brackets", "warn_or_raise", "json_display")
BC, PB, WR, JD = (f"example__{n}" for n in NAMES)
TAU = 0.202
approx = pytest.approx


# --- the scenario: two systems, an injection study, two loop runs -------------------------------------------

def _post_image(project: Path, patch: str, path: str, scratch: Path) -> str:
    """A file of ``project`` after ``patch`` (applied with git apply in a scratch copy)."""
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(project, scratch)
    subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=scratch, check=True, capture_output=True)
    return (scratch / path).read_text()


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _preds(model: str, patches: dict[str, str]) -> list[dict[str, Any]]:
    return [{"instance_id": iid, "model_name_or_path": model, "model_patch": p} for iid, p in patches.items()]


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("eval")
    cache = root / "cache"
    local = {n: load_local(EXAMPLES / n, cache) for n in NAMES}
    inst = {n: local[n].instance for n in NAMES}
    records = _write_jsonl(root / "instances.jsonl", [inst[n].model_dump(mode="json") for n in NAMES])
    cand = {n: {c.name: c.patch for c in local[n].candidates} for n in NAMES}
    gold = {n: inst[n].patch for n in NAMES}

    # wrong fixes, by hand
    limiter = (EXAMPLES / "boundary_check/project/throttle/limiter.py").read_text()
    bc_partial = make_diff("throttle/limiter.py", limiter, limiter.replace(
        "return len(recent_hits(history, now, window)) <= limit",
        "return len(recent_hits(history, now, window)) < limit"))  # only the count: the window boundary stays wrong
    printer = (EXAMPLES / "printer_brackets/project/tinyexpr/printer.py").read_text()
    fixed_printer = _post_image(EXAMPLES / "printer_brackets/project", gold["printer_brackets"],
                                "tinyexpr/printer.py", root / "scratch")
    # the fix plus a regression in a power's base that only the existing test_pow sees: (a**b)**c loses its
    # brackets (the golden and rigorous tests check atom bases only)
    pb_regress = make_diff("tinyexpr/printer.py", printer, fixed_printer.replace(
        "if precedence(expr.base) <= PREC_POW:", "if precedence(expr.base) < PREC_POW:"))
    wr_noapply = make_diff("timespan/parse.py", "def parse_duration(text):\n    return 0\n",
                           "def parse_duration(text):\n    raise ValueError(text)\n")  # context not in the file
    assert all((bc_partial, pb_regress, wr_noapply))

    # system alpha: JSONL; system beta: a JSON list (fixes) and a JSON dict keyed by id (tests)
    alpha_fixes = _write_jsonl(root / "alpha_fixes.jsonl", _preds("alpha", {
        BC: bc_partial, PB: gold["printer_brackets"], WR: wr_noapply, JD: ""}))
    alpha_tests = _write_jsonl(root / "alpha_tests.jsonl", _preds("alpha", {
        BC: cand["boundary_check"]["lax"], PB: cand["printer_brackets"]["rigorous"],
        WR: cand["warn_or_raise"]["misaligned"], JD: cand["json_display"]["not_reproducing"]}))
    beta_fixes = root / "beta_fixes.json"
    beta_fixes.write_text(json.dumps(_preds("beta", {BC: gold["boundary_check"], PB: pb_regress,
                                                     WR: gold["warn_or_raise"]})))
    beta_tests = root / "beta_tests.json"
    beta_tests.write_text(json.dumps({
        iid: {"model_name_or_path": "beta", "model_patch": p} for iid, p in
        {BC: cand["boundary_check"]["rigorous"], PB: cand["printer_brackets"]["rigorous"],
         WR: cand["warn_or_raise"]["rigorous"]}.items()}))
    # injection: the same systems' fixes once the tests were shown to them
    alpha_with = _write_jsonl(root / "alpha_with.jsonl", _preds("alpha+tests", {
        BC: gold["boundary_check"], PB: gold["printer_brackets"], WR: gold["warn_or_raise"],
        JD: gold["json_display"]}))
    beta_with = _write_jsonl(root / "beta_with.jsonl", _preds("beta+tests", {
        BC: bc_partial, PB: gold["printer_brackets"], WR: gold["warn_or_raise"]}))

    runs = root / "runs"
    runs.mkdir()
    _write_jsonl(runs / "loopA.jsonl", [
        {"instance": BC, "round": 0, "decision": "refine_test", "fix_patch": bc_partial,
         "test_patch": cand["boundary_check"]["lax"], "matrix": {"alpha": 1, "beta": 2, "gamma": 0, "delta": 1},
         "admissible": 4, "laxity": 0.5, "tokens": 1000, "usd": 0.10, "mutant_usd": 0.04},
        {"instance": BC, "round": 1, "decision": "refine_fix", "fix_patch": gold["boundary_check"],
         "test_patch": cand["boundary_check"]["rigorous"], "matrix": {"alpha": 0, "beta": 0, "gamma": 3, "delta": 1},
         "laxity": 0.0, "tokens": 1500, "usd": 0.20, "mutant_usd": 0.05},
        {"instance": BC, "round": 2, "decision": "accept", "resolved": True, "fail_to_pass": True,
         "matrix": {"alpha": 0, "beta": 0, "gamma": 2, "delta": 2}, "laxity": 0.0, "tokens": 500, "usd": 0.05},
        {"instance": PB, "round": 0, "decision": "accept", "fix_patch": gold["printer_brackets"],
         "test_patch": cand["printer_brackets"]["rigorous"], "matrix": {"alpha": 0, "beta": 0, "gamma": 1, "delta": 3},
         "laxity": 0.0, "tokens": 3000, "usd": 0.30, "mutant_usd": 0.10},
        {"instance": WR, "round": 0, "decision": "refine_test", "resolved": False, "fail_to_pass": False,
         "tokens": 800, "usd": 0.10},
        {"instance": WR, "round": 1, "decision": "stop", "fix_patch": wr_noapply,
         "test_patch": cand["warn_or_raise"]["misaligned"], "matrix": {"alpha": 1, "beta": 1, "gamma": 0, "delta": 0},
         "admissible": 2, "laxity": 0.5, "tokens": 900, "usd": 0.15, "mutant_usd": 0.05},
    ])
    _write_jsonl(runs / "loopB.jsonl", [
        {"instance_id": JD, "round": 0, "decision": "stop", "tokens": 0},  # neither patches nor flags: unknown
        {"instance_id": BC, "round": 0, "decision": "accept", "resolved": True, "fail_to_pass": True,
         "matrix": {"alpha": [], "beta": [], "gamma": ["m1", "m2"], "delta": ["m3"]}, "laxity": 0.0,
         "tokens": 100, "usd": 0.02, "mutant_usd": 0.01},
    ])
    config = root / "coharden.yaml"
    config.write_text("timeout: 60\n")
    store = root / "store.sqlite"
    out = root / "out"
    args = ["eval", "--instances", str(records), "--fixes", str(alpha_fixes), "--fixes", str(beta_fixes),
            "--tests", str(alpha_tests), "--tests", str(beta_tests), "--runs", str(runs),
            "--injection", f"cands={alpha_fixes},{alpha_with},{alpha_tests}",
            "--injection", f"{beta_fixes},{beta_with},{beta_tests}",
            "--cutoffs", "0,0.202",  # every operator: a pool big enough to decide the rigorous tests (issue 50)
            "--workers", "2", "--config", str(config), "--store", str(store), "--output", str(out)]
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    return {"report": report, "args": args, "out": out, "store": store, "inst": inst, "root": root,
            "alpha_fixes": alpha_fixes}


# --- hand-computed expectations --------------------------------------------------------------------------------

def _lax_row(report: dict[str, Any]) -> dict[str, Any]:
    """The one test whose laxity depends on the sampled mutants: checked for consistency, then used."""
    row = report["tests"]["alpha"]["instances"][BC]
    matrix = row["matrix"]
    admissible = sum(matrix.values())
    assert row["test_class"] == "Lax"
    assert row["admissible"] == admissible >= 1
    assert row["laxity"] == matrix["beta"] / admissible >= TAU
    return row


def _zero_matrix(row: dict[str, Any]) -> None:
    """A Rigorous test of the examples rejects every mutant: laxity 0, no beta cell, at least one mutant."""
    assert row["test_class"] == "Rigorous"
    assert row["laxity"] == 0.0
    assert row["matrix"]["beta"] == 0
    assert row["admissible"] == sum(row["matrix"].values()) >= 1


def test_report_identity_and_settings(scenario: dict[str, Any]) -> None:
    report = scenario["report"]
    assert report["schema_version"] == 1
    assert report["kind"] == "coharden-eval"
    # sequential MPE (the default) over one operator's small pool: every mutant runs, the laxity is exact
    assert report["settings"] == {"tau": TAU, "operators": [op.value for op in MECHANICAL_DEFAULT], "per_operator": 3,
                                  "seed": 0,
                                  "paper_classes": False, "sequential": True, "max_mutants": 120,
                                  "confidence": 0.95}
    assert report["instances"] == {"total": 4, "ids": [BC, PB, WR, JD], "errors": {}, "fix_errors": {}}
    assert set(report["definitions"]) >= {"resolved", "fail_to_pass", "test_wrong", "fix_wrong", "coupling",
                                          "overfitting", "injection", "cutoffs", "runs"}
    # the files hold the same document
    assert json.loads((scenario["out"] / "report.json").read_text()) == report


def test_fixes_resolved_with_swebench_semantics(scenario: dict[str, Any]) -> None:
    report, inst = scenario["report"], scenario["inst"]
    alpha = report["fixes"]["alpha"]
    assert alpha["source"] == str(scenario["alpha_fixes"])
    s = alpha["summary"]
    assert {k: v for k, v in s.items() if k.endswith("_instances")} == {
        "total_instances": 4, "submitted_instances": 4, "completed_instances": 3, "resolved_instances": 1,
        "unresolved_instances": 2, "empty_patch_instances": 1, "error_instances": 0, "apply_failed_instances": 1,
        "missing_instances": 0, "ungradable_instances": 0}
    assert s["resolved_rate"] == 1 / 4
    assert s["resolved_ids"] == [PB]
    assert s["unresolved_ids"] == sorted([BC, WR])
    assert s["empty_patch_ids"] == [JD]
    assert s["apply_failed_ids"] == [WR]
    assert s["completed_ids"] == sorted([BC, PB, WR])
    assert s["errors"] == {}

    rows = alpha["instances"]
    bc = inst["boundary_check"]
    assert rows[BC]["resolved"] is False
    assert rows[BC]["resolution"] == RESOLVED_NO
    assert rows[BC]["patch_successfully_applied"] is True
    assert rows[BC]["tests_status"] == {"FAIL_TO_PASS": {"success": [], "failure": bc.FAIL_TO_PASS},
                                        "PASS_TO_PASS": {"success": bc.PASS_TO_PASS, "failure": []},
                                        "FAIL_TO_FAIL": {"success": [], "failure": []},
                                        "PASS_TO_FAIL": {"success": [], "failure": []}}
    pb = inst["printer_brackets"]
    assert rows[PB]["resolved"] is True
    assert rows[PB]["resolution"] == RESOLVED_FULL
    assert rows[PB]["tests_status"]["FAIL_TO_PASS"] == {"success": pb.FAIL_TO_PASS, "failure": []}
    assert rows[PB]["tests_status"]["PASS_TO_PASS"] == {"success": pb.PASS_TO_PASS, "failure": []}
    assert rows[WR]["patch_successfully_applied"] is False
    assert rows[WR]["resolved"] is False
    assert rows[WR]["outcome"] == "APPLY_ERROR"
    assert "does not apply" in rows[WR]["reason"]
    assert rows[JD]["patch_exists"] is False
    assert rows[JD]["resolved"] is False
    assert rows[JD]["outcome"] is None

    beta = report["fixes"]["beta"]["summary"]
    assert {k: v for k, v in beta.items() if k.endswith("_instances")} == {
        "total_instances": 4, "submitted_instances": 3, "completed_instances": 3, "resolved_instances": 2,
        "unresolved_instances": 1, "empty_patch_instances": 0, "error_instances": 0, "apply_failed_instances": 0,
        "missing_instances": 1, "ungradable_instances": 0}
    assert beta["resolved_rate"] == 2 / 4
    assert beta["resolved_ids"] == sorted([BC, WR])
    assert beta["missing_ids"] == [JD]
    assert beta["errors"] == {}
    for iid in (BC, WR):
        row = report["fixes"]["beta"]["instances"][iid]
        assert (row["resolved"], row["resolution"], row["tests_status"]["PASS_TO_PASS"]["failure"]) == (
            True, RESOLVED_FULL, [])
    regress = report["fixes"]["beta"]["instances"][PB]
    broken = ["tests/test_printer.py::test_pow"]
    assert regress["tests_status"]["FAIL_TO_PASS"] == {"success": pb.FAIL_TO_PASS, "failure": []}
    assert regress["tests_status"]["PASS_TO_PASS"] == {
        "success": [t for t in pb.PASS_TO_PASS if t not in broken], "failure": broken}
    assert regress["resolution"] == RESOLVED_NO


def test_tests_fail_to_pass_class_and_laxity(scenario: dict[str, Any]) -> None:
    report = scenario["report"]
    lax = _lax_row(report)
    alpha = report["tests"]["alpha"]
    rows = alpha["instances"]
    assert [rows[i]["fail_to_pass"] for i in (BC, PB, WR, JD)] == [True, True, False, False]
    assert all(rows[i]["applied"] and rows[i]["pool_complete"] for i in (BC, PB, WR, JD))
    assert lax["test_ids"] == ["tests/test_repro.py::test_repro_fourth_request_is_rejected"]
    assert set(lax["inadmissible"]) <= {"implausible"}  # mutants breaking an existing test, left out (issue 50)
    assert [rows[i]["test_class"] for i in (BC, PB, WR, JD)] == ["Lax", "Rigorous", "Misaligned", "NotReproducing"]
    _zero_matrix(rows[PB])
    for iid in (WR, JD):
        assert rows[iid]["laxity"] is None
        assert rows[iid]["matrix"] is None
    assert (rows[WR]["buggy"], rows[WR]["fixed"]) == ("FAIL", "FAIL")
    assert (rows[JD]["buggy"], rows[JD]["fixed"]) == ("PASS", "PASS")
    s = alpha["summary"]
    assert s["submitted_instances"] == 4
    assert s["applied_instances"] == 4
    assert s["fail_to_pass_instances"] == 2
    assert s["fail_to_pass_rate"] == 2 / 4
    assert s["fail_to_pass_ids"] == sorted([BC, PB])
    assert s["classes"] == {"Rigorous": 1, "Borderline": 0, "Lax": 1, "Misaligned": 1, "NotReproducing": 1,
                            "Invalid": 0, "Inconclusive": 0, "Error": 0}
    assert s["mean_laxity"] == approx((lax["laxity"] + 0.0) / 2)
    assert s["matrix"] == {c: lax["matrix"][c] + rows[PB]["matrix"][c] for c in ("alpha", "beta", "gamma", "delta")}
    assert s["missing_ids"] == []
    assert s["errors"] == {}

    beta = report["tests"]["beta"]
    for iid in (BC, PB, WR):
        _zero_matrix(beta["instances"][iid])
        assert beta["instances"][iid]["fail_to_pass"] is True
    s = beta["summary"]
    assert s["fail_to_pass_instances"] == 3
    assert s["fail_to_pass_rate"] == 3 / 4
    assert s["classes"]["Rigorous"] == 3
    assert sum(s["classes"].values()) == 3
    assert s["mean_laxity"] == 0.0
    assert s["matrix"]["beta"] == 0
    assert s["missing_ids"] == [JD]


def test_coupling_between_test_and_fix_errors(scenario: dict[str, Any]) -> None:
    coupling_ = scenario["report"]["coupling"]
    # alpha, test wrong = not Rigorous: BC (Lax, partial fix), PB (Rigorous, golden fix), WR (Misaligned, fix does
    # not apply), JD (NotReproducing, empty fix): 3 wrong tests, 3 wrong fixes, all 3 together
    a = coupling_["alpha"]["not_rigorous"]
    wrong, right = {"test_wrong": True, "fix_wrong": True}, {"test_wrong": False, "fix_wrong": False}
    assert a["instances"] == {BC: wrong, PB: right, WR: wrong, JD: wrong}
    assert a["n"] == 4
    assert a["cells"] == {"both_right": 1, "test_wrong_only": 0, "fix_wrong_only": 0, "both_wrong": 3}
    assert (a["test_wrong"], a["fix_wrong"]) == (3, 3)
    assert a["p_test_wrong"] == 3 / 4
    assert a["p_fix_wrong"] == 3 / 4
    assert a["p_joint"] == 3 / 4
    assert a["p_independent"] == approx(9 / 16)
    assert a["coupling_factor"] == approx(4 / 3)
    assert a["p_fix_wrong_given_test_wrong"] == 1.0
    assert a["p_test_wrong_given_fix_wrong"] == 1.0
    assert a["excluded"] == {}
    # test wrong = not F->P: BC's Lax test is F->P now
    b = coupling_["alpha"]["not_fail_to_pass"]
    assert b["cells"] == {"both_right": 1, "test_wrong_only": 0, "fix_wrong_only": 1, "both_wrong": 2}
    assert (b["p_test_wrong"], b["p_fix_wrong"], b["p_joint"]) == (2 / 4, 3 / 4, 2 / 4)
    assert b["coupling_factor"] == approx((2 / 4) / ((2 / 4) * (3 / 4)))
    assert b["p_fix_wrong_given_test_wrong"] == 1.0
    assert b["p_test_wrong_given_fix_wrong"] == 2 / 3
    # beta: all tests Rigorous, one wrong fix: no joint failure, the factor is undefined (p_test_wrong = 0)
    c = coupling_["beta"]["not_rigorous"]
    assert c["n"] == 3
    assert c["cells"] == {"both_right": 2, "test_wrong_only": 0, "fix_wrong_only": 1, "both_wrong": 0}
    assert (c["p_test_wrong"], c["p_fix_wrong"], c["p_joint"], c["p_independent"]) == (0.0, 1 / 3, 0.0, 0.0)
    assert c["coupling_factor"] is None
    assert c["p_fix_wrong_given_test_wrong"] is None
    assert c["p_test_wrong_given_fix_wrong"] == 0.0
    assert coupling_["beta"]["not_fail_to_pass"]["cells"] == c["cells"]


def test_overfitting_to_own_tests(scenario: dict[str, Any]) -> None:
    over = scenario["report"]["overfitting"]
    a = over["alpha"]
    # BC: the partial fix passes alpha's own (lax) test but fails the golden F2P test -> overfits
    assert a["instances"][BC] == {"own_test": "PASS", "passes_own_test": True, "resolved": False,
                                  "fails_golden": True, "fails_regression": False, "overfit": True}
    assert a["instances"][PB] == {"own_test": "PASS", "passes_own_test": True, "resolved": True,
                                  "fails_golden": False, "fails_regression": False, "overfit": False}
    # WR: the fix does not apply, so it passes nothing; the golden tests never ran (None, not False)
    assert a["instances"][WR] == {"own_test": "APPLY_ERROR", "passes_own_test": False, "resolved": False,
                                  "fails_golden": None, "fails_regression": None, "overfit": False}
    assert a["excluded"] == {JD: "no fix"}
    assert (a["n"], a["passes_own_test"], a["overfit"], a["overfit_golden"], a["overfit_regression"]) == (3, 2, 1, 1, 0)
    assert a["rate"] == 1 / 2
    b = over["beta"]
    # PB: the fix passes beta's own (rigorous) test and the golden F2P test, but breaks PASS_TO_PASS -> overfits
    assert b["instances"][PB] == {"own_test": "PASS", "passes_own_test": True, "resolved": False,
                                  "fails_golden": False, "fails_regression": True, "overfit": True}
    assert (b["n"], b["passes_own_test"], b["overfit"], b["overfit_golden"], b["overfit_regression"]) == (3, 3, 1, 0, 1)
    assert b["rate"] == 1 / 3
    assert b["excluded"] == {}


def test_comparison_table(scenario: dict[str, Any]) -> None:
    report = scenario["report"]
    lax = _lax_row(report)
    assert report["comparison"] == [
        {"system": "alpha", "fixes_submitted": 4, "resolved": 1, "resolved_rate": 1 / 4, "apply_failed": 1,
         "tests_submitted": 4, "fail_to_pass": 2, "fail_to_pass_rate": 2 / 4, "Rigorous": 1, "Borderline": 0, "Lax": 1,
         "Misaligned": 1, "NotReproducing": 1, "Invalid": 0, "Inconclusive": 0, "Error": 0,
         "mean_laxity": approx(lax["laxity"] / 2), "coupling_factor": approx(4 / 3), "overfit_rate": 1 / 2},
        {"system": "beta", "fixes_submitted": 3, "resolved": 2, "resolved_rate": 2 / 4, "apply_failed": 0,
         "tests_submitted": 3, "fail_to_pass": 3, "fail_to_pass_rate": 3 / 4, "Rigorous": 3, "Borderline": 0, "Lax": 0,
         "Misaligned": 0, "NotReproducing": 0, "Invalid": 0, "Inconclusive": 0, "Error": 0, "mean_laxity": 0.0,
         "coupling_factor": None, "overfit_rate": 1 / 3},
    ]


def _delta(n: int, base: int, with_test: int, gained: int, lost: int) -> dict[str, Any]:
    return {"n": n, "baseline_resolved": base, "injected_resolved": with_test, "gained": gained, "lost": lost,
            "baseline_rate": base / n if n else None, "injected_rate": with_test / n if n else None,
            "delta": (gained - lost) / n if n else None}


def test_injection_study(scenario: dict[str, Any]) -> None:
    inj = scenario["report"]["injection"]
    lax = _lax_row(scenario["report"])
    cands = inj["sources"]["cands"]
    # without -> with: BC 0->1 (Lax test), PB 1->1 (Rigorous), WR 0->1 (Misaligned), JD 0->1 (NotReproducing)
    assert cands["instances"] == {
        BC: {"baseline_resolved": False, "injected_resolved": True, "test_class": "Lax", "fail_to_pass": True,
             "laxity": lax["laxity"]},
        PB: {"baseline_resolved": True, "injected_resolved": True, "test_class": "Rigorous", "fail_to_pass": True,
             "laxity": 0.0},
        WR: {"baseline_resolved": False, "injected_resolved": True, "test_class": "Misaligned",
             "fail_to_pass": False, "laxity": None},
        JD: {"baseline_resolved": False, "injected_resolved": True, "test_class": "NotReproducing",
             "fail_to_pass": False, "laxity": None}}
    assert cands["overall"] == _delta(4, 1, 4, 3, 0)
    assert cands["by_class"] == {"Rigorous": _delta(1, 1, 1, 0, 0), "Lax": _delta(1, 0, 1, 1, 0),
                                 "Misaligned": _delta(1, 0, 1, 1, 0), "NotReproducing": _delta(1, 0, 1, 1, 0)}
    assert cands["excluded"] == {}
    # the source named after the tests' model: BC 1->0, PB 0->1, WR 1->1, all with Rigorous tests
    beta = inj["sources"]["beta"]
    assert beta["overall"] == _delta(3, 2, 2, 1, 1)
    assert beta["by_class"] == {"Rigorous": _delta(3, 2, 2, 1, 1), "Lax": _delta(0, 0, 0, 0, 0),
                                "Misaligned": _delta(0, 0, 0, 0, 0)}
    assert beta["excluded"] == {}
    assert inj["overall"]["overall"] == _delta(7, 3, 6, 4, 1)
    assert inj["overall"]["by_class"] == {"Rigorous": _delta(4, 3, 3, 1, 1), "Lax": _delta(1, 0, 1, 1, 0),
                                          "Misaligned": _delta(1, 0, 1, 1, 0),
                                          "NotReproducing": _delta(1, 0, 1, 1, 0)}


def test_cutoff_sensitivity(scenario: dict[str, Any]) -> None:
    cut = scenario["report"]["cutoffs"]
    assert cut["cutoffs"] == [0.0, 0.202]
    # F->P tests with a laxity: alpha BC (lax, >= tau) and PB (0), beta BC, PB, WR (0 each)
    assert cut["tests"] == [
        {"cutoff": 0.0, "Rigorous": 0, "Lax": 5, "by_system": {"alpha": {"Rigorous": 0, "Lax": 2},
                                                               "beta": {"Rigorous": 0, "Lax": 3}}},
        {"cutoff": 0.202, "Rigorous": 4, "Lax": 1, "by_system": {"alpha": {"Rigorous": 1, "Lax": 1},
                                                                 "beta": {"Rigorous": 3, "Lax": 0}}},
    ]
    # injection pairs with a F->P test: cands BC 0->1, cands PB 1->1, beta BC 1->0, PB 0->1, WR 1->1
    assert cut["injection"] == [
        {"cutoff": 0.0, "Rigorous": _delta(0, 0, 0, 0, 0), "Lax": _delta(5, 3, 4, 2, 1)},
        {"cutoff": 0.202, "Rigorous": _delta(4, 3, 3, 1, 1), "Lax": _delta(1, 0, 1, 1, 0)},
    ]


def test_loop_runs_per_round_and_cost(scenario: dict[str, Any]) -> None:
    runs = scenario["report"]["runs"]
    assert list(runs) == ["loopA", "loopB"]
    a = runs["loopA"]
    # states: r0 BC (fix partial: no, lax test: F->P), PB (golden: yes, yes), WR (flags no, no);
    # r1 BC (golden: yes, rigorous: yes), WR (does not apply: no, misaligned: no); r2 BC (flags yes, yes)
    expected_rounds = [
        {"round": 0, "active": 3, "started": 3, "resolved": 1, "resolved_known": 3, "resolved_unknown": 0,
         "resolved_rate": 1 / 3, "fail_to_pass": 2, "fail_to_pass_known": 3, "fail_to_pass_unknown": 0,
         "fail_to_pass_rate": 2 / 3, "decisions": {"accept": 1, "refine_test": 2},
         "matrix": {"alpha": 1, "beta": 2, "gamma": 1, "delta": 4}, "admissible": 8, "mean_laxity": 0.25,
         "usd": approx(0.5), "mutant_usd": approx(0.14), "round_mutant_share": approx(0.14 / 0.5), "tokens": 4800,
         "cumulative_usd": approx(0.5), "cumulative_mutant_usd": approx(0.14), "mutant_share": approx(0.14 / 0.5),
         "cumulative_tokens": 4800},
        {"round": 1, "active": 2, "started": 3, "resolved": 2, "resolved_known": 3, "resolved_unknown": 0,
         "resolved_rate": 2 / 3, "fail_to_pass": 2, "fail_to_pass_known": 3, "fail_to_pass_unknown": 0,
         "fail_to_pass_rate": 2 / 3, "decisions": {"refine_fix": 1, "stop": 1},
         "matrix": {"alpha": 1, "beta": 1, "gamma": 3, "delta": 1}, "admissible": 6, "mean_laxity": 0.25,
         "usd": approx(0.35), "mutant_usd": approx(0.10), "round_mutant_share": approx(0.10 / 0.35),
         "tokens": 2400, "cumulative_usd": approx(0.85), "cumulative_mutant_usd": approx(0.24),
         "mutant_share": approx(0.24 / 0.85), "cumulative_tokens": 7200},
        {"round": 2, "active": 1, "started": 3, "resolved": 2, "resolved_known": 3, "resolved_unknown": 0,
         "resolved_rate": 2 / 3, "fail_to_pass": 2, "fail_to_pass_known": 3, "fail_to_pass_unknown": 0,
         "fail_to_pass_rate": 2 / 3, "decisions": {"accept": 1},
         "matrix": {"alpha": 0, "beta": 0, "gamma": 2, "delta": 2}, "admissible": 4, "mean_laxity": 0.0,
         "usd": approx(0.05), "mutant_usd": 0.0, "round_mutant_share": 0.0, "tokens": 500,
         "cumulative_usd": approx(0.9), "cumulative_mutant_usd": approx(0.24), "mutant_share": approx(0.24 / 0.9),
         "cumulative_tokens": 7700},
    ]
    assert a["rounds"] == expected_rounds
    assert a["per_instance"] == {
        BC: {"rounds": 3, "first_round": 0, "last_round": 2, "final_decision": "accept", "usd": approx(0.35),
             "mutant_usd": approx(0.09), "tokens": 3000, "resolved": True, "fail_to_pass": True},
        PB: {"rounds": 1, "first_round": 0, "last_round": 0, "final_decision": "accept", "usd": approx(0.3),
             "mutant_usd": approx(0.1), "tokens": 3000, "resolved": True, "fail_to_pass": True},
        WR: {"rounds": 2, "first_round": 0, "last_round": 1, "final_decision": "stop", "usd": approx(0.25),
             "mutant_usd": approx(0.05), "tokens": 1700, "resolved": False, "fail_to_pass": False},
    }
    assert a["totals"] == {"instances": 3, "records": 6, "usd": approx(0.9), "mutant_usd": approx(0.24),
                           "mutant_share": approx(0.24 / 0.9), "tokens": 7700, "usd_per_instance": approx(0.3),
                           "tokens_per_instance": approx(7700 / 3), "resolved": 2, "resolved_rate": 2 / 3,
                           "fail_to_pass": 2, "fail_to_pass_rate": 2 / 3}
    assert a["unknown_instances"] == []
    b = runs["loopB"]
    assert b["rounds"] == [
        {"round": 0, "active": 2, "started": 2, "resolved": 1, "resolved_known": 1, "resolved_unknown": 1,
         "resolved_rate": 1.0, "fail_to_pass": 1, "fail_to_pass_known": 1, "fail_to_pass_unknown": 1,
         "fail_to_pass_rate": 1.0, "decisions": {"accept": 1, "stop": 1},
         "matrix": {"alpha": 0, "beta": 0, "gamma": 2, "delta": 1}, "admissible": 3, "mean_laxity": 0.0,
         "usd": 0.02, "mutant_usd": 0.01, "round_mutant_share": 0.5, "tokens": 100, "cumulative_usd": 0.02,
         "cumulative_mutant_usd": 0.01, "mutant_share": 0.5, "cumulative_tokens": 100}]
    assert b["per_instance"][JD] == {"rounds": 1, "first_round": 0, "last_round": 0, "final_decision": "stop",
                                     "usd": 0.0, "mutant_usd": 0.0, "tokens": 0, "resolved": None,
                                     "fail_to_pass": None}
    assert b["totals"] == {"instances": 2, "records": 2, "usd": 0.02, "mutant_usd": 0.01, "mutant_share": 0.5,
                           "tokens": 100, "usd_per_instance": 0.01, "tokens_per_instance": 50, "resolved": 1,
                           "resolved_rate": 1.0, "fail_to_pass": 1, "fail_to_pass_rate": 1.0}
    assert b["unknown_instances"] == []


class _Images(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.images: list[dict[str, str | None]] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "img":
            self.images.append(dict(attrs))


def test_html_and_markdown_reports(scenario: dict[str, Any]) -> None:
    out = scenario["out"]
    page = (out / "report.html").read_text()
    parser = _Images()
    parser.feed(page)
    parser.close()
    assert parser.tags[:2] == ["html", "head"]
    assert parser.tags.count("table") >= 8
    # self-contained: five plots (rounds, laxity, matrix, cost, injection), each an inline PNG
    assert len(parser.images) == 5
    for img in parser.images:
        src = img["src"] or ""
        assert src.startswith("data:image/png;base64,")
        assert base64.b64decode(src.split(",", 1)[1]).startswith(b"\x89PNG\r\n\x1a\n")
    assert "http://" not in page
    assert "https://" not in page
    markdown = (out / "report.md").read_text()
    for heading in ("## Comparison", "## Fixes: alpha", "## Tests: beta", "## Coupling of test and fix errors",
                    "## Test overfitting", "## Test injection", "## Cutoff sensitivity", "## Loop run: loopA",
                    "## Definitions"):
        assert heading in markdown
    assert "| measure | alpha |" in markdown  # the comparison: one column per system (issue 34, item 10)
    for line in ("| fixes | 4 |", "| resolved | 1 |", "| resolved rate | 0.250 |"):
        assert line in markdown
    chromium = Path("/usr/bin/chromium")
    if chromium.exists():  # render it for real where a browser is installed
        shot = scenario["root"] / "report.png"
        subprocess.run([str(chromium), "--headless", "--no-sandbox", "--disable-gpu", f"--screenshot={shot}",
                        "--window-size=1200,4000", (out / "report.html").as_uri()], check=True, timeout=120,
                       capture_output=True)
        assert shot.read_bytes().startswith(b"\x89PNG")
    # both renderers take the JSON document alone
    assert render_markdown(scenario["report"]) == markdown
    assert render_html(scenario["report"], figures={}).count("<img") == 0


def test_rerun_reuses_the_store(scenario: dict[str, Any]) -> None:
    """A second run is served from SQLite (no new verdict) and prints the comparison table."""
    store = Store(scenario["store"])
    verdicts, records = store.count("verdicts"), store.count("records")
    assert verdicts > 0
    assert records > 0
    out = scenario["root"] / "again"
    args = [a if a != str(scenario["out"]) else str(out) for a in scenario["args"]]
    result = CliRunner().invoke(app, [*args, "--no-html"])
    assert result.exit_code == 0, result.output
    assert "alpha" in result.stdout
    assert (store.count("verdicts"), store.count("records")) == (verdicts, records)
    assert json.loads((out / "report.json").read_text()) == scenario["report"]
    assert not (out / "report.html").exists()


# --- pure parts ------------------------------------------------------------------------------------------------

def _verdict(tests: dict[str, list[TestStatus]]) -> Verdict:
    return Verdict(outcome=Outcome.FAIL, tests=tests)


def test_swebench_status_rules() -> None:
    v = _verdict({"f1": [TestStatus.PASSED], "f2": [TestStatus.SKIPPED], "f3": [TestStatus.XFAIL],
                  "p1": [TestStatus.SKIPPED], "p2": [TestStatus.PASSED, TestStatus.FAILED], "p3": [TestStatus.XFAIL]})
    status = grade_statuses(v, ["f1", "f2", "f3", "f4"], ["p1", "p2", "p3"])
    # a skipped or missing F2P test is a failure; a skipped P2P test is maintained; one failing case fails the id;
    # an XFAIL F2P test is a failure too (coharden's rule, stricter than SWE-bench's: an expected failure is no pass)
    assert status["FAIL_TO_PASS"] == {"success": ["f1"], "failure": ["f2", "f3", "f4"]}
    assert status["PASS_TO_PASS"] == {"success": ["p1", "p3"], "failure": ["p2"]}
    assert resolution(status) == RESOLVED_NO
    partial = grade_statuses(_verdict({"f1": [TestStatus.PASSED], "p": [TestStatus.PASSED]}), ["f1", "f2"], ["p"])
    assert resolution(partial) == RESOLVED_PARTIAL
    assert resolution(grade_statuses(_verdict({}), [], [])) == RESOLVED_FULL  # empty lists count as all passed


def test_coupling_and_delta_by_hand() -> None:
    pairs = {"a": (True, True), "b": (True, False), "c": (False, True), "d": (False, False), "e": (True, True)}
    c = coupling(pairs)
    assert c["cells"] == {"both_right": 1, "test_wrong_only": 1, "fix_wrong_only": 1, "both_wrong": 2}
    assert c["coupling_factor"] == approx((2 / 5) / ((3 / 5) * (3 / 5)))
    assert c["p_fix_wrong_given_test_wrong"] == 2 / 3
    assert c["p_test_wrong_given_fix_wrong"] == 2 / 3
    empty = coupling({})
    assert (empty["n"], empty["coupling_factor"], empty["p_test_wrong"]) == (0, None, None)
    assert paired_delta([(False, True), (True, False), (True, True), (False, True)]) == _delta(4, 2, 3, 2, 1)
    assert paired_delta([])["delta"] is None


def test_round_record_schema(tmp_path: Path) -> None:
    rec = RoundRecord.model_validate({"instance_id": "x", "round": 0, "decision": "accept",
                                      "matrix": {"alpha": ["m1"], "beta": ["m2"]}, "laxity": 0.5})
    assert rec.instance == "x"
    assert rec.admissible_count == 2
    bad = [
        ({"instance": "x", "round": 0, "decision": "d", "usd": 0.1, "mutant_usd": 0.2}, "mutant_usd"),
        ({"instance": "x", "round": 0, "decision": "d", "matrix": {"beta": 1, "delta": 1}, "laxity": 0.2}, "laxity"),
        ({"instance": "x", "round": 0, "decision": "d", "matrix": {"beta": 1}, "admissible": 3}, "admissible"),
        ({"instance": "x", "round": -1, "decision": "d"}, "round"),
        ({"instance": "x", "round": 0, "decision": "d", "cost": 1.0}, "cost"),
    ]
    runs = tmp_path / "runs"
    runs.mkdir()
    for data, field in bad:
        (runs / "r.jsonl").write_text(json.dumps(data) + "\n")
        with pytest.raises(RecordError, match=field):
            load_runs(runs)
    (runs / "r.jsonl").write_text(json.dumps({"instance": "x", "round": 0, "decision": "d"}) + "\n")
    (runs / "s.jsonl").write_text(json.dumps({"run": "r", "instance": "x", "round": 0, "decision": "d"}) + "\n")
    with pytest.raises(RecordError, match="appears twice"):
        load_runs(runs)
    (runs / "s.jsonl").write_text("{not json\n")
    with pytest.raises(RecordError, match=r"s\.jsonl:1: malformed JSON"):
        load_runs(runs)
    with pytest.raises(RecordError, match="no run records"):
        load_runs(tmp_path)


def test_prediction_inputs(tmp_path: Path, scenario: dict[str, Any]) -> None:
    instances = {inst.instance_id: inst for inst in scenario["inst"].values()}
    (gold,) = load_prediction_sets("gold", instances, "fix")
    assert gold.name == "gold"
    assert gold.patch(BC) == instances[BC].patch
    mixed = tmp_path / "mixed.jsonl"
    _write_jsonl(mixed, [*_preds("m1", {BC: "a"}), *_preds("m2", {BC: "b"})])
    assert [s.name for s in load_prediction_sets(str(mixed), instances, "test")] == ["m1", "m2"]
    one = _write_jsonl(tmp_path / "one.jsonl", _preds("m1", {BC: "a", PB: "b"}))
    (named,) = load_prediction_sets(f"mine={one}", instances, "test")
    assert named.name == "mine"
    with pytest.raises(CoHardenError, match="two test predictions"):
        load_prediction_sets(f"mine={mixed}", instances, "test")
    with pytest.raises(CoHardenError, match="expected"):
        load_injection("a.jsonl,b.jsonl", instances)


def test_cli_errors(tmp_path: Path, scenario: dict[str, Any]) -> None:
    runner = CliRunner()
    records = str(scenario["root"] / "instances.jsonl")
    result = runner.invoke(app, ["eval", "--instances", records, "--store", str(tmp_path / "s.sqlite"),
                                 "--output", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "nothing to evaluate" in result.output
    result = runner.invoke(app, ["eval", "--instances", records, "--fixes", "gold", "--cutoffs", "0.1,x",
                                 "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert "--cutoffs" in result.output
    fixes = str(scenario["alpha_fixes"])
    result = runner.invoke(app, ["eval", "--instances", records, "--fixes", fixes, "--fixes", fixes,
                                 "--store", str(tmp_path / "s.sqlite")])
    assert result.exit_code == 2
    assert "NAME=PATH" in " ".join(result.output.split())


def test_broken_instance_fails_closed(tmp_path: Path) -> None:
    """An instance whose repository is missing is reported as an error and counted nowhere else."""
    records = _write_jsonl(tmp_path / "instances.jsonl", [
        {"instance_id": "ghost", "repo": str(tmp_path / "no-such-repo"), "base_commit": "abc",
         "patch": "diff", "test_patch": "diff", "FAIL_TO_PASS": ["tests/test_x.py::test_x"]}])
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["eval", "--instances", str(records), "--fixes", "gold", "--tests", "gold",
                                      "--store", str(tmp_path / "s.sqlite"), "--output", str(out), "--json",
                                      "--no-html"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert list(report["instances"]["errors"]) == ["ghost"]
    fixes = report["fixes"]["gold"]["summary"]
    assert (fixes["error_ids"], fixes["resolved_instances"], fixes["completed_instances"]) == (["ghost"], 0, 0)
    assert report["tests"]["gold"]["summary"]["classes"]["Error"] == 1
    assert report["tests"]["gold"]["summary"]["fail_to_pass_instances"] == 0
    for definition in ("not_rigorous", "not_fail_to_pass"):
        c = report["coupling"]["gold"][definition]
        assert c["n"] == 0
        assert list(c["excluded"]) == ["ghost"]
        assert c["coupling_factor"] is None
    assert report["overfitting"]["gold"]["rate"] is None
    assert "ghost" in result.stderr


def test_directory_of_instance_directories(tmp_path: Path) -> None:
    from coharden.evaluation.runner import load_eval_instances

    for name in ("boundary_check", "json_display"):
        shutil.copytree(EXAMPLES / name, tmp_path / "examples" / name)
    (tmp_path / "examples" / "not-an-instance").mkdir()
    found = load_eval_instances(tmp_path / "examples", tmp_path / "cache")
    assert list(found) == [BC, JD]
    with pytest.raises(CoHardenError, match="neither an instance directory"):
        load_eval_instances(tmp_path / "examples" / "not-an-instance", tmp_path / "cache")


def _mutant_rows(rows: list[dict[str, Any]]) -> list[tuple[str, str, str, str | None]]:
    return [(r["mutant"]["id"], r["mutant"]["operator"], r["mutant"]["description"], r["cell"]) for r in rows]


def test_mpe_and_eval_give_one_matrix(tmp_path: Path) -> None:
    """One instance, one candidate, one configuration: one matrix in every command. The pool's sample once
    depended on what the test was called (``mpe --test lax`` vs ``eval``'s "candidate": 0/11/0/6 vs 1/10/0/6
    on this test, at every operator's default budget); now it depends on the tests' roles only."""
    lax = (EXAMPLES / "boundary_check/candidates/lax.patch").read_text()
    preds = _write_jsonl(tmp_path / "tests.jsonl", _preds("some-system", {BC: lax}))
    runner = CliRunner()
    common = ["--seed", "0", "--per-operator", "3", "--timeout", "60"]
    mpe = runner.invoke(app, ["mpe", str(EXAMPLES / "boundary_check"), "--test", "lax", "--json", *common,
                              "--store", str(tmp_path / "mpe.sqlite")])
    assert mpe.exit_code == 0, mpe.output
    by_mpe = json.loads(mpe.stdout)
    ev = runner.invoke(app, ["eval", "--instances", str(EXAMPLES / "boundary_check"), "--tests", str(preds),
                             "--no-html", "--json", *common, "--store", str(tmp_path / "eval.sqlite"),
                             "-o", str(tmp_path / "out")])
    assert ev.exit_code == 0, ev.output
    row = json.loads(ev.stdout)["tests"]["some-system"]["instances"][BC]
    assert row["matrix"] == by_mpe["matrix_counts"]
    assert row["laxity"] == by_mpe["laxity"]
    assert row["test_class"] == by_mpe["test_class"]
    assert len(by_mpe["mutants"]) >= 10
    assert _mutant_rows(row["mutants"]) == _mutant_rows(by_mpe["mutants"])


def test_an_instance_no_fix_can_be_graded_on_is_left_out_of_the_resolved_rate() -> None:
    """One rule for what cannot be graded here: an instance whose golden fix is not resolved here (a test that
    needs the network, an environment that differs) gets no fix grade, is listed as ungradable with the reason,
    and is left out of the resolved rate as out of fix grading (the harness's rate over every instance is kept
    beside it)."""
    from coharden.evaluation.grading import FixGrade
    from coharden.evaluation.grading_jobs import InstanceGrades
    from coharden.evaluation.inputs import PredictionSet, patch_key
    from coharden.evaluation.metrics import fix_section
    from coharden.schema.prediction import Prediction

    preds = {iid: Prediction(instance_id=iid, model_name_or_path="m", model_patch=f"p{iid}") for iid in "abc"}
    grades = {"a": InstanceGrades(fixes={patch_key("pa"): FixGrade(patch_successfully_applied=True, resolved=True,
                                                                     resolution="RESOLVED_FULL")}),
              "b": InstanceGrades(fixes={patch_key("pb"): FixGrade(patch_successfully_applied=True)}),
              "c": InstanceGrades(fix_error="needs_network: the golden fix is not resolved here (FAIL: ...)")}
    section = fix_section(PredictionSet("m", "preds.jsonl", preds), ["a", "b", "c"], grades)
    summary = section["summary"]
    assert (summary["resolved_instances"], summary["ungradable_instances"], summary["error_instances"]) == (1, 1, 0)
    assert summary["resolved_rate"] == 1 / 2
    assert summary["resolved_rate_of_all"] == 1 / 3
    assert summary["ungradable"] == {"c": "needs_network: the golden fix is not resolved here (FAIL: ...)"}
