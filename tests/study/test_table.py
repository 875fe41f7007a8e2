"""The laxity table (issue 37): one dataset row per (instance, system) whatever happened - bad predictions and
unbuildable environments included -, appended instance by instance and resumed, a report from the dataset
alone, and the same rows on Ray as in a serial run (bundled examples, tiny predictions made here)."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from coharden.patches import make_patch
from coharden.study.table import Dataset, latest_rows
from coharden.study.table_report import render
from coharden.study.table_rows import grade_fields, instance_rows
from coharden.study.table_summary import (
    assertflip_agreement,
    assertflip_lax,
    coverage,
    pool_figures,
    scaling,
    smallest_deciding_pool,
    summarize_table,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PATTERNS = ["test_*.py", "*_test.py", "tests/", "testing/"]

# --- rows from step records (no runs) ------------------------------------------------------------------------

SOURCE_ONLY = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
TEST_FILE = SOURCE_ONLY.replace("pkg/m.py", "tests/test_m.py")


@pytest.mark.parametrize(("step", "patch", "expected"), [
    ({"error": "tests/test_m.py: hunk #1 (@@ -1 +1 @@) does not apply", "error_type": "ApplyError"}, TEST_FILE,
     {"status": "invalid", "class": "Invalid", "invalid_kind": "does_not_apply", "applies": False}),
    ({"error": "Otter: the test patch adds or changes no test function", "error_type": "TestIdError"},
     SOURCE_ONLY, {"status": "invalid", "invalid_kind": "no_test_file", "applies": True}),
    ({"error": "Otter: the test patch adds or changes no test function", "error_type": "TestIdError"},
     TEST_FILE, {"status": "invalid", "invalid_kind": "no_test", "applies": True}),
    ({"error": "empty model_patch"}, "", {"status": "invalid", "invalid_kind": "empty"}),
    # a record stored before steps named the error's type: read from its text
    ({"error": "tests/test_m.py: hunk at line 1 does not apply"}, TEST_FILE,
     {"status": "invalid", "invalid_kind": "does_not_apply"}),
    ({"error": "environment of x: pip failed", "environment_error": True}, TEST_FILE, {"status": "env_error"}),
    ({"error": "the reference test golden is not fail-to-pass", "error_type": "MPEError"}, TEST_FILE,
     {"status": "error", "reason": "the reference test golden is not fail-to-pass"}),
    ({"harness_error": True, "test_class": "Lax", "candidate_buggy": {"outcome": "FAIL"},
      "candidate_fixed": {"outcome": "HARNESS_ERROR", "reason": "no results parsed"}}, TEST_FILE,
     {"status": "harness_error", "reason": "candidate_fixed: HARNESS_ERROR (no results parsed)"}),
    # a verdict not run because the other test's was inadmissible is not listed as a harness error of its own
    ({"harness_error": True, "test_class": "Lax", "mutants": [{
        "mutant": {"id": "m-1"}, "reference": {"outcome": "HARNESS_ERROR", "reason": "exit code 3"},
        "candidate": {"outcome": "HARNESS_ERROR", "reason": "not run", "implied": "other_inadmissible"}}]},
     TEST_FILE, {"status": "harness_error", "reason": "mutant m-1 reference: HARNESS_ERROR (exit code 3)"}),
    ({"test_class": "Invalid", "fail_to_pass": False, "candidate_buggy": {"outcome": "APPLY_ERROR", "reason": "x"},
      "candidate_fixed": {"outcome": "APPLY_ERROR"}}, TEST_FILE,
     {"status": "invalid", "invalid_kind": "does_not_apply", "applies": False, "fail_to_pass": False}),
    # failing on the fixed code only for want of the network: not a finding about the test (xarray-7229's
    # AssertFlip test loads a tutorial dataset from GitHub)
    ({"test_class": "Misaligned", "fail_to_pass": False, "candidate_buggy": {"outcome": "FAIL"},
      "candidate_fixed": {"outcome": "FAIL", "reason": "ConnectionError", "network": True}}, TEST_FILE,
     {"status": "needs_network", "class": "Misaligned", "fail_to_pass": False}),
    # the same under MPE's one rule (rows graded since): Inconclusive, undecided needs_network
    ({"test_class": "Inconclusive", "undecided": "needs_network", "fail_to_pass": False,
      "candidate_buggy": {"outcome": "FAIL"},
      "candidate_fixed": {"outcome": "FAIL", "reason": "ConnectionError", "network": True}}, TEST_FILE,
     {"status": "needs_network", "class": "Inconclusive", "fail_to_pass": False}),
    ({"test_class": "Misaligned", "fail_to_pass": False, "candidate_buggy": {"outcome": "FAIL"},
      "candidate_fixed": {"outcome": "FAIL", "reason": "assert 1 == 2"}}, TEST_FILE,
     {"status": "graded", "class": "Misaligned"}),
])
def test_a_step_record_becomes_a_row_that_says_what_happened(step: dict[str, Any], patch: str,
                                                               expected: dict[str, Any]) -> None:
    row = grade_fields(step, patch, PATTERNS)
    assert {k: row.get(k) for k in expected} == expected
    assert row["reason"]


def test_a_graded_row_carries_the_estimate_and_its_sampling_frame() -> None:
    step = {"test_class": "Borderline", "fail_to_pass": True, "laxity": 0.25, "interval": [0.05, 0.57],
            "confidence": 0.95, "estimate": {"beta": 2}, "admissible": 8, "matrix_counts": {"alpha": 1, "beta": 2},
            "frame": {"incomplete_fix": {"pool": 5, "drawn": 4, "admissible": 4},
                      "token_revert": {"pool": 6, "drawn": 5, "admissible": 4}},
            "candidate_buggy": {"outcome": "FAIL"}, "candidate_fixed": {"outcome": "PASS"}, "stop": "pool",
            "mpe_wall": 12.5,
            "pool": {"skipped": {"caller_patch": {"frame_in_test": 2}},
                     "no_revealing_input": {"reason": "not_called", "detail": "no test called it"}}}
    row = grade_fields(step, TEST_FILE, PATTERNS)
    assert row["status"] == "graded"
    assert (row["class"], row["laxity"], row["interval"], row["beta"], row["admissible"]) == \
        ("Borderline", 0.25, [0.05, 0.57], 2, 8)
    assert (row["drawn"], row["pool"], row["applies"], row["seconds"]) == (9, 11, True, 12.5)
    assert row["frame"] == {"incomplete_fix": [5, 4, 4], "token_revert": [6, 5, 4]}
    # why an operator made nothing stays in the row (the input-based operators' reach is read off the rows)
    assert row["skipped"] == {"caller_patch": {"frame_in_test": 2}}
    assert row["no_revealing_input"]["reason"] == "not_called"


# --- the dataset file ------------------------------------------------------------------------------------------

def _row(iid: str, system: str, status: str, **extra: Any) -> dict[str, Any]:
    return {"instance_id": iid, "system": system, "repo": extra.pop("repo", "acme/a"), "status": status,
            "benchmark": extra.pop("benchmark", "SWT-bench Verified"), "has_prediction": True, "class": None,
            "config": {"key": "k", "tau": 0.202, "workers": 2}, "coharden": {"version": "0.1.0"}, **extra}


def test_the_dataset_is_appended_the_last_row_wins_and_a_cut_line_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "table.jsonl"
    dataset = Dataset(path)
    assert dataset.append([_row("a-1", "S", "pending"), _row("a-2", "S", "pending")]) == 2
    assert dataset.append([_row("a-1", "S", "pending", seconds=3.0)]) == 0  # the same row, times aside
    other_workers = _row("a-1", "S", "pending")
    other_workers["config"] = {**other_workers["config"], "workers": 8}
    assert dataset.append([other_workers]) == 0  # and settings that change no result
    assert dataset.append([_row("a-1", "S", "graded", **{"class": "Lax"})]) == 1
    assert dataset.done("a-1", ["S"], "k")
    assert not dataset.done("a-2", ["S"], "k")
    assert not dataset.done("a-1", ["S"], "other configuration")
    with path.open("a") as handle:  # a run killed while writing
        handle.write('{"instance_id": "a-2", "sys')
    assert {(r["instance_id"], r["status"]) for r in latest_rows(path)} == {("a-1", "graded"), ("a-2", "pending")}
    again = Dataset(path)
    assert again.append([_row("a-2", "S", "graded", **{"class": "Rigorous"})]) == 1
    lines = path.read_text().splitlines()
    assert len(lines) == 4
    assert all(json.loads(line) for line in lines)


def test_pool_figures_say_what_the_pool_gave_and_why_tests_stayed_borderline() -> None:
    rows = [_graded(f"p-{i}", "Otter", cls, lax, admissible=adm, behaviours=beh, implausible=imp, pool=adm + imp,
                    undecided=why, plausibility={"measured": True})
            for i, (cls, lax, adm, beh, imp, why) in enumerate([
                ("Borderline", 0.0, 11, 2, 1, "pool_too_small"), ("Borderline", 0.5, 120, 6, 23, "cap"),
                ("Lax", 0.6, 40, 5, 0, None), ("Rigorous", 0.0, 31, 20, 3, None)])]
    rows.append(_graded("p-9", "Otter", "Misaligned", None, f2p=False))  # not F->P: not a pool figure
    pool = pool_figures(rows)
    assert pool is not None
    assert (pool["tests"], pool["plausibility_measured"]) == (4, 4)
    assert pool["admissible"] == {"median": 35.5, "min": 11, "max": 120}
    assert pool["behaviours"] == {"median": 5.5, "min": 2, "max": 20}
    assert (pool["borderline"]["hits"], pool["borderline"]["total"]) == (2, 4)
    assert pool["undecided"] == {"cap": 1, "pool_too_small": 1}
    report = render(summarize_table(rows), None, "table.jsonl")
    assert "distinct behaviours 5.5 (2 to 20)" in report
    assert "`pool_too_small` 1" in report
    assert pool_figures([r for r in rows if not r.get("fail_to_pass")]) is None


def test_smallest_deciding_pool_is_where_zero_of_n_falls_below_tau() -> None:
    from coharden.schema.estimate import clopper_pearson

    n = smallest_deciding_pool(0.202)
    assert n == 17  # the paper's tau at 95 %
    assert clopper_pearson(0, n)[1] < 0.202 <= clopper_pearson(0, n - 1)[1]
    assert smallest_deciding_pool(0.5) < n < smallest_deciding_pool(0.1)


# --- the summary (hand-made rows) --------------------------------------------------------------------------

def _graded(iid: str, system: str, cls: str, laxity: float | None, *, f2p: bool = True, **extra: Any
            ) -> dict[str, Any]:
    return _row(iid, system, "graded" if cls != "Invalid" else "invalid", fail_to_pass=f2p, laxity=laxity,
                seconds=100.0, verify_seconds=10.0, **{"class": cls}, **extra)


def test_summary_shares_agreement_lax_share_coverage_and_scaling() -> None:
    rows = [
        _graded("a-1", "AssertFlip", "Lax", 0.5, published_fail_to_pass=True),
        _graded("a-2", "AssertFlip", "Rigorous", 0.0, published_fail_to_pass=True),
        _graded("a-3", "AssertFlip", "Borderline", 0.25, published_fail_to_pass=False),
        _graded("a-4", "AssertFlip", "Misaligned", None, f2p=False, published_fail_to_pass=True),
        _graded("a-5", "AssertFlip", "Invalid", None, f2p=False, published_fail_to_pass=False,
                invalid_kind="does_not_apply"),
        _row("a-6", "AssertFlip", "env_unverified", published_fail_to_pass=True),
        _row("b-1", "AssertFlip", "unreachable", repo="acme/b"),
        _row("a-7", "AssertFlip", "no_prediction", has_prediction=False),
        _row("a-8", "AssertFlip", "pending"),
    ]
    summary = summarize_table(rows)
    entry = summary["systems"]["AssertFlip"]
    assert entry["evaluated"] == 5
    assert entry["fail_to_pass"]["hits"] == 3
    assert entry["shares"]["Lax"]["hits"] == 1
    assert entry["shares"]["Lax"]["total"] == 3
    low, high = entry["shares"]["Lax"]["interval"]
    assert 0 < low < 1 / 3 < high < 1
    assert (entry["shares"]["Misaligned"]["hits"], entry["shares"]["Misaligned"]["total"]) == (1, 5)
    assert entry["invalid_kinds"] == {"does_not_apply": 1}
    assert entry["not_evaluated"] == {"env_unverified": 1, "unreachable": 1, "pending": 1}
    agreement = assertflip_agreement(rows)
    assert (agreement["compared"], agreement["agree"]["hits"]) == (5, 3)  # a-3 and a-4 disagree
    assert {d["instance_id"] for d in agreement["disagreements"]} == {"a-3", "a-4"}
    # a disagreement says when the published run resolved none of that repository version's instances
    old = [_graded("o-1", "AssertFlip", "Rigorous", 0.0, published_fail_to_pass=False, version="0.9"),
           _row("o-2", "AssertFlip", "pending", published_fail_to_pass=False, version="0.9")]
    (odd,) = [d for d in assertflip_agreement(rows + old)["disagreements"] if d["instance_id"] == "o-1"]
    assert odd["reason"].endswith("the published report resolves none of its 2 acme/a 0.9 instances")
    (a3,) = [d for d in agreement["disagreements"] if d["instance_id"] == "a-3"]
    assert "resolves none" not in a3["reason"]  # its version has instances the report resolves
    assert agreement["not_compared"] == {"env_unverified": 1}
    lax = assertflip_lax(rows)
    assert (lax["here"]["lax"]["hits"], lax["here"]["n"], lax["here"]["point_rule"]["hits"]) == (1, 3, 2)
    assert lax["published_f2p"]["n"] == 2
    assert lax["paper"]["hits"] == 121
    assert lax["paper"]["total"] == 198
    pool = pool_figures(rows)
    assert pool is not None
    assert pool["tests"] == 3
    assert pool["behaviours"] is None  # rows of a pool from before behaviours were counted
    assert pool["undecided"] == {"straddles tau": 1}
    cov = coverage(rows)["all"]
    assert (cov["instances"], cov["reachable"], cov["verified"], cov["done"], cov["pending"]) == (9, 8, 7, 6, 1)
    # the figure's bins are even tenths (the table's edges, with tau on one, have unequal widths)
    hist = entry["laxity_plot_histogram"]
    assert all(len(counts) == 10 for counts in hist.values())
    assert (hist["Lax"][5], hist["Rigorous"][0], hist["Borderline"][2]) == (1, 1, 1)
    scale = scaling(rows)
    assert scale["pair_median_core_seconds"] == 200.0  # 100 s x 2 workers
    assert scale["pairs"] == 6  # with a prediction, not unreachable / unverified: a-1 to a-5, a-8
    assert scale["estimate_core_seconds"] == 6 * 200.0 + 6 * 10.0


# --- end to end on bundled examples -----------------------------------------------------------------------------

def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _record(example: str, iid: str, repo: str, commit: str) -> dict[str, Any]:
    import yaml

    manifest = yaml.safe_load((EXAMPLES / example / "instance.yaml").read_text())
    return {"repo": repo, "instance_id": iid, "base_commit": commit, "version": "1.0",
            "patch": (EXAMPLES / example / "fix.patch").read_text(),
            "test_patch": (EXAMPLES / example / "test.patch").read_text(),
            "FAIL_TO_PASS": json.dumps(manifest["FAIL_TO_PASS"]), "PASS_TO_PASS": "[]"}


def table_inputs(root: Path) -> dict[str, Path]:
    """A data directory in the shared layout, repository clones and an envcheck output:

    - ``example__throttle-1`` (boundary_check; SWT-bench Verified and Lite): Otter lax, Otter++ rigorous,
      AssertFlip misaligned (the published report says F->P), Devstral-testgen a test that does not apply;
    - ``example__tinyexpr-1`` (printer_brackets; Verified): Otter the fix itself (touches no test file), Otter++
      a comment in the test file (adds no test), AssertFlip nothing;
    - ``example__broken-1``: verified by the check, but its clone is no repository (environment not buildable);
    - ``example__throttle-2`` not verified by the check, ``example__throttle-3`` not in it;
    - ``gone__gone-1`` (Lite only): no clone."""
    from coharden.instances import materialize_directory

    repos = root / "repos"
    repos.mkdir(parents=True)
    commits = {}
    for example, name in (("boundary_check", "example__throttle"), ("printer_brackets", "example__tinyexpr")):
        built, commits[name] = materialize_directory(EXAMPLES / example / "project", root / "cache")
        shutil.copytree(built, repos / name)
    (repos / "example__broken").mkdir()  # a clone that is no git repository
    data = root / "data"
    throttle = [_record("boundary_check", f"example__throttle-{n}", "example/throttle",
                        commits["example__throttle"]) for n in (1, 2, 3)]
    tinyexpr = _record("printer_brackets", "example__tinyexpr-1", "example/tinyexpr", commits["example__tinyexpr"])
    broken = _record("boundary_check", "example__broken-1", "example/broken", commits["example__throttle"])
    gone = _record("boundary_check", "gone__gone-1", "gone/gone", commits["example__throttle"])
    _write_jsonl(data / "swebench_verified.jsonl", [*throttle, tinyexpr, broken])
    _write_jsonl(data / "swtbench_lite_instances.jsonl", [throttle[0], gone])
    (data / "swtbench_verified_ids.txt").write_text(
        "".join(f"{r['instance_id']}\n" for r in [*throttle, tinyexpr, broken]))

    def candidate(example: str, name: str) -> str:
        return (EXAMPLES / example / "candidates" / f"{name}.patch").read_text()

    test_file = (EXAMPLES / "printer_brackets" / "project" / "tests" / "test_printer.py").read_text()
    no_test = make_patch([("tests/test_printer.py", test_file, test_file + "# a comment, no test\n")])
    no_apply = ("diff --git a/tests/test_nowhere.py b/tests/test_nowhere.py\n--- a/tests/test_nowhere.py\n"
                "+++ b/tests/test_nowhere.py\n@@ -1,2 +1,4 @@\n import os\n x = 1\n+def test_x():\n+    pass\n")
    preds = data / "brt_predictions"

    def pred(iid: str, patch: str) -> dict[str, str]:
        return {"instance_id": iid, "model_name_or_path": "m", "model_patch": patch}

    _write_jsonl(preds / "otter_gpt4o_tddbench_verified.jsonl", [
        pred("example__throttle-1", candidate("boundary_check", "lax")),
        pred("example__tinyexpr-1", (EXAMPLES / "printer_brackets" / "fix.patch").read_text()),
        pred("example__broken-1", candidate("boundary_check", "lax"))])
    _write_jsonl(preds / "otter_plus_gpt4o_tddbench_verified.jsonl", [
        pred("example__throttle-1", candidate("boundary_check", "rigorous")), pred("example__tinyexpr-1", no_test),
        pred("example__throttle-2", candidate("boundary_check", "rigorous"))])
    _write_jsonl(preds / "assertflip_gpt4o_swtbench_verified.jsonl", [
        pred("example__throttle-1", candidate("boundary_check", "misaligned"))])
    (preds / "assertflip_gpt4o_swtbench_verified.eval_report.json").write_text(
        json.dumps({"resolved_ids": ["example__throttle-1"], "unresolved_ids": []}))
    _write_jsonl(preds / "assertflip_gpt4o_swtbench_lite188.jsonl", [pred("gone__gone-1", no_apply)])
    _write_jsonl(preds / "devstral_testgen_swtbench_lite.jsonl", [pred("example__throttle-1", no_apply)])
    envcheck = root / "envcheck.jsonl"
    _write_jsonl(envcheck, [
        {"instance_id": i, "verified": True} for i in ("example__throttle-1", "example__tinyexpr-1",
                                                        "example__broken-1")]
        + [{"instance_id": "example__throttle-2", "verified": False, "category": "network",
            "reason": "needs httpbin"}])
    return {"data": data, "repos": repos, "envcheck": envcheck, "cache": root / "cache"}


def _cli(inputs: dict[str, Path], output: Path, store: Path, *extra: str) -> Any:
    from typer.testing import CliRunner

    from coharden.cli import app

    args = ["study", "table", "--data", str(inputs["data"]), "--repos", str(inputs["repos"]), "--envcheck",
            str(inputs["envcheck"]), "--store", str(store), "-o", str(output), "--workers", "1", "--no-bytecode",
            "--timeout", "60", *extra]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COHARDEN_CACHE", str(inputs["cache"]))
        return CliRunner().invoke(app, args)


@pytest.fixture(scope="module")
def serial(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The table made once by the command, serially."""
    root = tmp_path_factory.mktemp("table")
    inputs = table_inputs(root)
    result = _cli(inputs, root / "out", root / "s.sqlite")
    assert result.exit_code == 0, result.output
    return {"root": root, "inputs": inputs, "output": result.output, "out": root / "out",
            "store": root / "s.sqlite"}


def _by_pair(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["instance_id"], r["system"]): r for r in latest_rows(path)}


@pytest.mark.slow
def test_every_pair_has_a_row_that_says_what_happened(serial: dict[str, Any]) -> None:
    rows = _by_pair(serial["out"] / "table.jsonl")
    got = {pair: (r["status"], r["class"]) for pair, r in rows.items()}
    assert got == {
        ("example__throttle-1", "Otter"): ("graded", "Lax"),
        ("example__throttle-1", "Otter++"): ("graded", "Rigorous"),
        ("example__throttle-1", "AssertFlip"): ("graded", "Misaligned"),
        ("example__throttle-1", "Devstral-testgen"): ("invalid", "Invalid"),
        ("example__tinyexpr-1", "Otter"): ("invalid", "Invalid"),
        ("example__tinyexpr-1", "Otter++"): ("invalid", "Invalid"),
        ("example__tinyexpr-1", "AssertFlip"): ("no_prediction", None),
        ("example__broken-1", "Otter"): ("env_error", None),
        ("example__broken-1", "Otter++"): ("env_error", None),
        ("example__broken-1", "AssertFlip"): ("env_error", None),
        ("example__throttle-2", "Otter"): ("env_unverified", None),
        ("example__throttle-2", "Otter++"): ("env_unverified", None),
        ("example__throttle-2", "AssertFlip"): ("env_unverified", None),
        ("example__throttle-3", "Otter"): ("unchecked", None),
        ("example__throttle-3", "Otter++"): ("unchecked", None),
        ("example__throttle-3", "AssertFlip"): ("unchecked", None),
        ("gone__gone-1", "AssertFlip-Lite"): ("unreachable", None),
        ("gone__gone-1", "Devstral-testgen"): ("unreachable", None),
    }
    kinds = {pair: (r.get("invalid_kind"), r["applies"]) for pair, r in rows.items() if r["status"] == "invalid"}
    assert kinds == {("example__throttle-1", "Devstral-testgen"): ("does_not_apply", False),
                     ("example__tinyexpr-1", "Otter"): ("no_test_file", True),
                     ("example__tinyexpr-1", "Otter++"): ("no_test", True)}
    lax = rows[("example__throttle-1", "Otter")]
    assert lax["fail_to_pass"]
    assert lax["applies"]
    assert lax["laxity"] > 0
    assert lax["interval"][0] <= lax["laxity"] <= lax["interval"][1]
    assert lax["admissible"] > 0
    assert lax["drawn"] >= lax["admissible"]
    assert lax["config"]["environment"] == "spec environments (envcheck)"
    assert lax["coharden"]["version"]
    assert "not a git repository" in rows[("example__broken-1", "Otter")]["reason"]
    assert rows[("example__throttle-2", "Otter")]["reason"] == "network: needs httpbin"
    assert rows[("example__throttle-1", "AssertFlip")]["published_fail_to_pass"] is True
    assert rows[("example__throttle-2", "Otter")]["has_prediction"] is False
    assert rows[("example__throttle-2", "Otter++")]["has_prediction"] is True

    report = (serial["out"] / "table_report.md").read_text()
    assert "**The dataset covers 2 of 5 reachable instances**" in report
    assert "## Agreement with AssertFlip's published SWT-bench report" in report
    assert "| example__throttle-1 | Misaligned | F->P |" in report  # the one disagreement, explained
    assert "121/198 (61%)" in report
    assert "## Cost and scaling" in report
    assert "x the median cost of one graded F->P pair" in report
    assert (serial["out"] / "table_laxity.png").is_file()


@pytest.mark.slow
def test_a_rerun_resumes_and_the_report_needs_only_the_dataset(serial: dict[str, Any], tmp_path: Path) -> None:
    dataset = serial["out"] / "table.jsonl"
    before = dataset.read_text()
    again = _cli(serial["inputs"], serial["out"], serial["store"])
    assert again.exit_code == 0, again.output
    # the environment error is retried (nothing of it is stored), the done instances are not run again
    assert "1 instances run, 2 already done, 0 left" in again.output.replace("\n", " ")
    assert dataset.read_text() == before  # nothing new to say: nothing appended

    # a run killed on its second instance: the first one's rows are there, the second is resumed from the store
    lines = before.splitlines(keepends=True)
    cut = tmp_path / "out"
    cut.mkdir()
    kept = [line for line in lines if json.loads(line)["instance_id"] != "example__tinyexpr-1"]
    (cut / "table.jsonl").write_text("".join(kept) + '{"instance_id": "example__tiny')
    resumed = _cli(serial["inputs"], cut, serial["store"], "--id", "example__tinyexpr-1")
    assert resumed.exit_code == 0, resumed.output
    assert "1 instances run, 1 already done, 1 left" in resumed.output.replace("\n", " ")
    assert _stable(_by_pair(cut / "table.jsonl")) == _stable(_by_pair(dataset))

    # --limit: at most N instances run now (in table order the broken one comes first), the others stay pending
    limited = _cli(serial["inputs"], tmp_path / "limited", serial["store"], "--limit", "1")
    assert limited.exit_code == 0, limited.output
    assert "1 instances run, 0 already done, 2 left" in limited.output.replace("\n", " ")
    pending = {pair for pair, r in _by_pair(tmp_path / "limited" / "table.jsonl").items() if r["status"] == "pending"}
    assert {i for i, _ in pending} == {"example__throttle-1", "example__tinyexpr-1"}

    # the report from the dataset alone: no data directory, no clones, no store
    from typer.testing import CliRunner

    from coharden.cli import app

    (cut / "table_report.md").unlink()
    only = CliRunner().invoke(app, ["study", "table", "--report-only", "-o", str(cut)])
    assert only.exit_code == 0, only.output
    assert "The dataset covers 2 of 5 reachable instances" in (cut / "table_report.md").read_text()
    empty = CliRunner().invoke(app, ["study", "table", "--report-only", "-o", str(tmp_path / "none")])
    assert empty.exit_code != 0
    assert "no dataset to report on" in empty.output.replace("\n", " ")
    assert "Traceback" not in empty.output


def test_bad_options_are_one_line_errors(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    runner = CliRunner()
    no_data = runner.invoke(app, ["study", "table", "-o", str(tmp_path / "o")])
    assert no_data.exit_code != 0
    assert "--data and --repos are needed" in no_data.output.replace("\n", " ")
    data = tmp_path / "data"
    data.mkdir()
    bad = runner.invoke(app, ["study", "table", "--data", str(data), "--repos", str(tmp_path), "-o",
                              str(tmp_path / "o"), "--executor", "nope"])
    assert "Invalid value for '--executor': 'nope' (known: local, ray)" in bad.output
    missing = runner.invoke(app, ["study", "table", "--data", str(data), "--repos", str(tmp_path), "-o",
                                  str(tmp_path / "o"), "--envcheck", str(tmp_path / "e.jsonl")])
    assert missing.exit_code != 0
    assert "swebench_verified.jsonl" in missing.output.replace("\n", "")
    assert "Traceback" not in missing.output + bad.output + no_data.output


def test_llm_mutants_join_every_graded_pool_of_the_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--mutator mechanical,llm`` with a model: the LLM operators' mutants join each graded test's pool (the
    rows say so in their configuration and key; a mechanical table's rows are not served for it); without a model
    the command refuses rather than make a mechanical table."""
    from coharden.llm import MockLLMServer

    inputs = table_inputs(tmp_path / "t")
    reply = ("throttle/limiter.py\n<<<<<<< SEARCH\n    return recent[-limit] + window - now\n=======\n"
             "    return max(recent[-limit] + window - now, 1)\n>>>>>>> REPLACE\nSummary: waits at least a second\n")
    only = ["--id", "example__throttle-1", "--systems", "Otter"]
    refused = _cli(inputs, tmp_path / "none", tmp_path / "n.sqlite", *only, "--mutator", "mechanical,llm")
    assert refused.exit_code != 0
    assert "--mutator mechanical,llm: no model configured" in refused.output.replace("\n", " ")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-mock")
    with MockLLMServer([{"reply": reply}]) as server:
        result = _cli(inputs, tmp_path / "out", tmp_path / "s.sqlite", *only, "--mutator", "mechanical,llm",
                      "--model", "openai/mock", "-c", f"llm.api_base={server.base_url}", "-c", "mpe.llm_samples=1",
                      "-c", f"llm.store={tmp_path / 'calls.sqlite'}")
        assert result.exit_code == 0, result.output
        assert server.requests  # every LLM operator was asked
    row = _by_pair(tmp_path / "out" / "table.jsonl")[("example__throttle-1", "Otter")]
    assert row["status"] == "graded", row
    assert row["config"]["mutators"] == ["mechanical", "llm"]
    assert row["config"]["llm"] == "openai/mock"
    assert row["frame"]["vanilla"][0] == 1  # the one LLM mutant (the others repeat it), beside the mechanical ones
    mechanical = _cli(inputs, tmp_path / "mech", tmp_path / "s.sqlite", *only)
    assert mechanical.exit_code == 0, mechanical.output
    again = _by_pair(tmp_path / "mech" / "table.jsonl")[("example__throttle-1", "Otter")]
    assert again["config"]["key"] != row["config"]["key"]
    assert "vanilla" not in again["frame"]


def _stable(rows: dict[tuple[str, str], dict[str, Any]]) -> dict[str, Any]:
    """Rows without what differs between runs (times, the source revision) and with machine paths normalised."""
    drop = {"seconds", "verify_seconds", "coharden"}
    text = json.dumps({f"{i} {s}": {k: v for k, v in r.items() if k not in drop} for (i, s), r in rows.items()},
                      sort_keys=True)
    return json.loads(re.sub(r"/tmp/[^\s'\"\\]+", "/tmp/<path>", re.sub(r"0x[0-9a-f]{6,}", "0x<address>", text)))


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray is not installed (the dev extra has it)")
def test_the_table_on_ray_gives_the_rows_of_the_serial_run(serial: dict[str, Any], tmp_path: Path) -> None:
    import ray

    from coharden.config import Settings
    from coharden.execution.engine import make_engine
    from coharden.study.data import StudySource
    from coharden.study.real_bugs import StudyConfig
    from coharden.study.table import RunContext, TableConfig, run_table
    from coharden.study.table_data import load_table_data

    inputs = serial["inputs"]
    settings = Settings(repos_dir=inputs["repos"], store=tmp_path / "ray.sqlite", cache_dir=inputs["cache"],
                        timeout=60, workers=1)
    data = load_table_data(StudySource(inputs["data"], envcheck=inputs["envcheck"], repos_dir=inputs["repos"]))
    config = TableConfig(study=StudyConfig(workers=1, bytecode=[], verify_all=False))
    engine = make_engine("ray", workers=2)
    try:
        result = run_table(data, config, Dataset(tmp_path / "table.jsonl"), RunContext(settings), engine=engine)
    finally:
        engine.close()
    assert not ray.is_initialized()
    assert sorted(result.ran) == ["example__broken-1", "example__throttle-1", "example__tinyexpr-1"]
    assert _stable(_by_pair(tmp_path / "table.jsonl")) == _stable(_by_pair(serial["out"] / "table.jsonl"))


def test_rows_of_an_instance_that_ran(tmp_path: Path) -> None:
    """``instance_rows`` on hand-made step rows: the golden test not F->P here, and a verify harness error."""
    from coharden.schema.instance import Instance
    from coharden.study.table_data import TableData, TableSystem

    inst = Instance(repo="acme/a", instance_id="a-1", base_commit="c", patch="p", test_patch="t", version="1")
    data = TableData(data_dir=tmp_path, instances={"a-1": inst}, benchmarks={"B": {"a-1"}},
                     systems={"S": TableSystem("s.jsonl", "B"), "T": TableSystem("t.jsonl", "B")},
                     predictions={"S": {"a-1": TEST_FILE}, "T": {}}, env_check={}, env_field="verified",
                     env_source="e", spec_envs=True, reachable={"a-1"})
    run = {"key": "k"}
    not_f2p = instance_rows(data, "a-1", {"verify": [{"fail_to_pass": False, "seconds": 1.0,
                                                      "buggy": {"outcome": "PASS"}, "fixed": {"outcome": "PASS"}}]},
                            run, PATTERNS)
    assert [(r["system"], r["status"]) for r in not_f2p] == [("S", "golden_not_f2p"), ("T", "golden_not_f2p")]
    assert not_f2p[0]["reason"] == "golden test here: buggy: PASS; fixed: PASS"
    harness = instance_rows(data, "a-1", {"verify": [{"harness_error": True, "buggy": {
        "outcome": "HARNESS_ERROR", "reason": "pytest crashed"}, "fixed": {"outcome": "PASS"}}]}, run, PATTERNS)
    assert {r["status"] for r in harness} == {"harness_error"}
    assert "pytest crashed" in harness[0]["reason"]


def test_the_input_operators_reach_is_read_off_the_rows_with_a_reason_for_every_none(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """benchmarks/input_reach.py --table: a cell without an admissible mutant says why (the row's skip reasons
    and diagnosis, or for an older row the table's store); an instance where no test calls a changed function
    is outside the goal's denominator."""
    import sqlite3

    spec = importlib.util.spec_from_file_location("input_reach", Path(__file__).parents[2] / "benchmarks"
                                                  / "input_reach.py")
    assert spec is not None
    assert spec.loader is not None
    reach = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(reach)
    yes = _row("a-1", "S", "graded", pool=3, frame={"input_specific_shortcut": [1, 1, 1],
                                                     "narrowed_scope": [2, 0, 0]},
               skipped={"caller_patch": {"frame_in_test": 1}}, no_revealing_input=None)
    uncalled = _row("a-2", "S", "graded", pool=2, frame={}, skipped={"caller_patch": {"no_caller_recorded": 1}},
                    no_revealing_input={"reason": "not_called", "detail": "no test called it"})
    old = _row("a-3", "S", "graded", pool=2, frame={})  # written before rows kept their reasons
    dataset = tmp_path / "table.jsonl"
    dataset.write_text("".join(json.dumps(r) + "\n" for r in (yes, uncalled, old)))
    store = tmp_path / "table.sqlite"
    with sqlite3.connect(store) as db:
        db.execute("CREATE TABLE records (kind TEXT, key TEXT, data TEXT, created REAL)")
        db.execute("INSERT INTO records VALUES ('study.mpe', 'k', ?, 1.0)", (json.dumps(
            {"instance_id": "a-3", "system": "S", "pool": {"skipped": {"caller_patch": {"frame_in_test": 1}},
                                                          "no_revealing_input": {"reason": "values_not_encodable"}}}),))
    reach.table_reach(dataset)
    without = capsys.readouterr().out
    assert "| a-3 | yes | no: no reason in the row" in without
    reach.table_reach(dataset, store)
    out = capsys.readouterr().out
    assert "| a-1 | yes | yes | no: 2 in the pool, none drawn before the class was decided | no: frame_in_test |" in out
    assert "| a-2 | no | no: not_called | no: not_called | no: no_caller_recorded |" in out
    assert "| a-3 | yes | no: values_not_encodable | no: values_not_encodable | no: frame_in_test |" in out
    assert "| **all** | 3 | 1 (33 %) | 0 (0 %) | 0 (0 %) | 2 | 1 (50 %) | 0 (0 %) | 0 (0 %) |" in out
