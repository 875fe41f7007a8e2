"""The numbers of the evaluation report, computed from grades only (pure functions, no test is run here).

:func:`plan` says what to grade; :mod:`coharden.evaluation.grading_jobs` grades it; :func:`build_report` turns the
grades into one JSON document. Every rate is ``k / n`` with both counts in the document next to it, and is
``None`` (not 0) when ``n`` is 0. The definitions are in :data:`DEFINITIONS` (also written into the report).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coharden.analysis.rows import CELLS, test_class
from coharden.analysis.stats import mean, rate
from coharden.evaluation.grading import GradeOptions
from coharden.evaluation.grading_jobs import InstanceGrades, InstanceWork, fix_row, test_row
from coharden.evaluation.inputs import Injection, PredictionSet
from coharden.evaluation.pairs import coupling_pairs, overfitting
from coharden.evaluation.runs import run_section
from coharden.schema.instance import Instance
from coharden.schema.round_record import RoundRecord

if TYPE_CHECKING:  # the inputs' type, for annotations only: the runner that holds it calls this module
    from coharden.evaluation.runner import EvalInputs

SCHEMA_VERSION = 1
CLASSES = ("Rigorous", "Borderline", "Lax", "Misaligned", "NotReproducing", "Invalid", "Inconclusive")
INJECTION_CLASSES = ("Rigorous", "Lax", "Misaligned")  # always shown; Borderline and the others when present

DEFINITIONS: dict[str, str] = {
    "resolved": "SWE-bench semantics: the golden test patch on base + the fix's source part (its test-file changes "
                "are dropped); every FAIL_TO_PASS id PASSED/XFAIL (skipped or missing = failure) and every "
                "PASS_TO_PASS id PASSED/XFAIL/SKIPPED. A fix that does not apply, an empty fix, a timeout: not "
                "resolved. A harness error: infra_failure, not resolved, excluded from conditional rates. "
                "resolved_rate = resolved / the instances that can be graded here (those whose golden fix is "
                "not resolved here, needs_network among them, are ungradable: left out of fix grading and of "
                "the rate); resolved_rate_of_all = resolved / instances in the instances file (the harness's).",
    "fail_to_pass": "SWT-bench semantics: the ids the test contributes FAIL on the base commit and PASS on base + the "
                    "golden fix (only the prediction's test-file changes are the test; its source changes are "
                    "dropped). fail_to_pass_rate = F->P tests / instances in the instances file.",
    "test_class": "MPE against the golden test over the mechanical mutant pool: Rigorous (F->P, the laxity's "
                  "interval lies below tau), Borderline (F->P, the interval straddles tau: the sample cannot tell), "
                  "Lax (F->P, the interval lies at or above tau); with --paper-classes the point rule (Rigorous: "
                  "laxity < tau, Lax: laxity >= tau). Misaligned (fails on the golden fix), NotReproducing "
                  "(passes on the base), "
                  "Invalid (empty, does not apply, adds no test, or does not run), Inconclusive (F->P, no "
                  "admissible mutant). Error: the golden test is not F->P, nothing is classified.",
    "test_wrong": "not_rigorous (the primary definition): the test is not Rigorous, i.e. Lax, Misaligned, "
                  "NotReproducing or Invalid; Borderline, Inconclusive and Error tests are excluded (their rigor "
                  "is unknown). "
                  "not_fail_to_pass (secondary): the test is not F->P; only Error tests are excluded.",
    "fix_wrong": "the fix is not resolved; fixes with an infra failure (or an instance whose golden fix is not "
                 "resolved) are excluded.",
    "coupling": "over the instances where the system submitted both a fix and a test and both are gradable: "
                "p_test_wrong = #test wrong / n, p_fix_wrong = #fix wrong / n, p_joint = #both wrong / n, "
                "coupling_factor = p_joint / (p_test_wrong * p_fix_wrong) (1: independent, > 1: errors come "
                "together), p_fix_wrong_given_test_wrong = #both / #test wrong, p_test_wrong_given_fix_wrong = "
                "#both / #fix wrong.",
    "overfitting": "a fix overfits when it passes its own test (the same system's test on the same instance: the "
                   "verdict of the ids that test contributes on base + the fix is PASS) but is not resolved: it "
                   "fails the golden FAIL_TO_PASS (fails_golden) or the PASS_TO_PASS regression tests "
                   "(fails_regression), or both (None when the fix did not apply: the golden tests never ran). "
                   "rate = overfit / fixes that pass their own test.",
    "injection": "paired over the instances with a baseline fix, an injected fix and an injected test, all gradable: "
                 "delta = (resolved with the test - resolved without) / n = (gained - lost) / n; per class of the "
                 "injected test, per test source and pooled over sources.",
    "cutoffs": "for each cutoff c, F->P tests with a laxity are Rigorous when laxity < c and Lax otherwise; with "
               "injection runs, delta of each side.",
    "runs": "per run and round r: active = instances with a record for round r; an instance's state at r is its "
            "record of the latest round <= r (carried forward after it stops); resolved / fail_to_pass count "
            "states at r, rates divide by the states whose flag is known (unknown states are counted apart); "
            "costs: the round's sum and the cumulative sum over rounds <= r, mutant_share = cumulative mutant_usd "
            "/ cumulative usd.",
}


# --- planning ----------------------------------------------------------------------------------------------

def own_pairs(fix_sets: Sequence[PredictionSet], test_sets: Sequence[PredictionSet]) -> list[
        tuple[PredictionSet, PredictionSet]]:
    """(fixes, tests) of the same system: sets with the same name."""
    tests = {s.name: s for s in test_sets}
    return [(f, tests[f.name]) for f in fix_sets if f.name in tests]


def plan(instances: Mapping[str, Instance], fix_sets: Sequence[PredictionSet], test_sets: Sequence[PredictionSet],
         injections: Sequence[Injection], runs: Mapping[str, Sequence[RoundRecord]]) -> dict[str, InstanceWork]:
    """What to grade on each instance of ``instances`` (predictions for other ids are not graded)."""
    work = {iid: InstanceWork() for iid in instances}
    for fixes in [*fix_sets, *(s for inj in injections for s in (inj.baseline, inj.injected))]:
        for iid, pred in fixes.predictions.items():
            if iid in work:
                work[iid].add_fix(pred.model_patch)
    for tests in [*test_sets, *(inj.tests for inj in injections)]:
        for iid, pred in tests.predictions.items():
            if iid in work:
                work[iid].add_test(pred.model_patch)
    for fixes, tests in own_pairs(fix_sets, test_sets):
        for iid in fixes.predictions.keys() & tests.predictions.keys():
            if iid in work:
                work[iid].add_own(fixes.patch(iid), tests.patch(iid))
    for records in runs.values():
        for rec in records:
            if rec.instance not in work:
                continue
            if rec.resolved is None and rec.fix_patch is not None:
                work[rec.instance].add_fix(rec.fix_patch)
            if rec.fail_to_pass is None and rec.test_patch is not None:
                work[rec.instance].add_fp_test(rec.test_patch)
    return work


# --- fixes and tests ---------------------------------------------------------------------------------------

def _ungradable(grades: Mapping[str, InstanceGrades], iid: str) -> bool:
    """No fix of ``iid`` can be graded here: its golden fix is not resolved here (a test that needs the network, an
    environment that differs), while the instance itself was graded."""
    g = grades.get(iid)
    return g is not None and not g.error and bool(g.fix_error)


def fix_section(fixes: PredictionSet, instance_ids: Sequence[str], grades: Mapping[str, InstanceGrades]) -> dict[
        str, Any]:
    """SWE-bench's run report (counts and sorted id lists) plus per-instance ``report.json`` entries."""
    rows: dict[str, Any] = {}
    ids: dict[str, list[str]] = {k: [] for k in ("submitted", "completed", "resolved", "unresolved", "empty_patch",
                                                  "error", "apply_failed", "missing", "ungradable")}
    for iid in instance_ids:
        if iid not in fixes.predictions:
            ids["missing"].append(iid)
            continue
        ids["submitted"].append(iid)
        grade, why = fix_row(grades, iid, fixes.patch(iid))
        if grade is None:
            ids["ungradable" if _ungradable(grades, iid) else "error"].append(iid)
            rows[iid] = {"error": why}
            continue
        rows[iid] = grade.model_dump(mode="json")
        if not grade.patch_exists:
            ids["empty_patch"].append(iid)  # as in SWE-bench: counted apart, not run, never resolved
            continue
        if grade.infra_failure:
            ids["error"].append(iid)
            continue
        ids["completed"].append(iid)
        if not grade.patch_successfully_applied:
            ids["apply_failed"].append(iid)
        ids["resolved" if grade.resolved else "unresolved"].append(iid)
    known = set(instance_ids)
    unknown = sorted(i for i in fixes.predictions if i not in known)
    summary: dict[str, Any] = {"total_instances": len(instance_ids)}
    summary.update({f"{k}_instances": len(v) for k, v in ids.items()})
    summary["resolved_rate"] = rate(len(ids["resolved"]),
                                    len(instance_ids) - sum(_ungradable(grades, iid) for iid in instance_ids))
    summary["resolved_rate_of_all"] = rate(len(ids["resolved"]), len(instance_ids))
    summary.update({f"{k}_ids": sorted(v) for k, v in ids.items()})
    summary["unknown_ids"] = unknown
    summary["errors"] = {iid: rows[iid].get("error") or rows[iid].get("infra_failure_reason")
                         for iid in sorted(ids["error"])}
    summary["ungradable"] = {iid: rows[iid]["error"] for iid in sorted(ids["ungradable"])}
    return {"source": fixes.source, "summary": summary, "instances": rows}


def test_section(tests: PredictionSet, instance_ids: Sequence[str], grades: Mapping[str, InstanceGrades]) -> dict[
        str, Any]:
    """Per test: F->P, class, laxity, matrix; summary counts over the instances file."""
    rows: dict[str, Any] = {}
    for iid in instance_ids:
        if iid in tests.predictions:
            rows[iid] = test_row(grades, iid, tests.patch(iid))
    classes = Counter(test_class(r) for r in rows.values())
    laxities = [r["laxity"] for r in rows.values() if "error" not in r and r.get("laxity") is not None]
    matrix = dict.fromkeys(CELLS, 0)
    for r in rows.values():
        for cell in CELLS:
            matrix[cell] += int((r.get("matrix") or {}).get(cell, 0))
    fail_to_pass = sorted(i for i, r in rows.items() if r.get("fail_to_pass"))
    summary = {
        "total_instances": len(instance_ids),
        "submitted_instances": len(rows),
        "applied_instances": sum(1 for r in rows.values() if r.get("applied")),
        "fail_to_pass_instances": len(fail_to_pass),
        "fail_to_pass_rate": rate(len(fail_to_pass), len(instance_ids)),
        "classes": {c: classes.get(c, 0) for c in (*CLASSES, "Error")},
        "mean_laxity": mean(laxities),
        "matrix": matrix,
        "fail_to_pass_ids": fail_to_pass,
        "missing_ids": sorted(i for i in instance_ids if i not in rows),
        "unknown_ids": sorted(i for i in tests.predictions if i not in set(instance_ids)),
        "errors": {i: r["error"] for i, r in sorted(rows.items()) if "error" in r},
    }
    return {"source": tests.source, "summary": summary, "instances": rows}


# --- injection and cutoffs ---------------------------------------------------------------------------------

def paired_delta(pairs: Iterable[tuple[bool, bool]]) -> dict[str, Any]:
    """(resolved without the test, resolved with it) per instance -> the paired change."""
    items = list(pairs)
    n = len(items)
    base = sum(1 for b, _ in items if b)
    with_test = sum(1 for _, w in items if w)
    gained = sum(1 for b, w in items if w and not b)
    lost = sum(1 for b, w in items if b and not w)
    return {"n": n, "baseline_resolved": base, "injected_resolved": with_test, "gained": gained, "lost": lost,
            "baseline_rate": rate(base, n), "injected_rate": rate(with_test, n), "delta": rate(gained - lost, n)}


def _by_class(rows: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    present = {r["test_class"] for r in rows.values()}
    order = [*INJECTION_CLASSES, *(c for c in CLASSES if c in present and c not in INJECTION_CLASSES)]
    return {c: paired_delta((r["baseline_resolved"], r["injected_resolved"]) for r in rows.values()
                            if r["test_class"] == c) for c in order}


def injection_rows(inj: Injection, instance_ids: Sequence[str], grades: Mapping[str, InstanceGrades]) -> tuple[
        dict[str, Any], dict[str, str]]:
    rows: dict[str, Any] = {}
    excluded: dict[str, str] = {}
    for iid in instance_ids:
        missing = [what for what, s in (("baseline fix", inj.baseline), ("injected fix", inj.injected),
                                        ("injected test", inj.tests)) if iid not in s.predictions]
        if missing:
            if len(missing) < 3:
                excluded[iid] = "missing " + ", ".join(missing)
            continue
        base, why_b = fix_row(grades, iid, inj.baseline.patch(iid))
        with_test, why_w = fix_row(grades, iid, inj.injected.patch(iid))
        test = test_row(grades, iid, inj.tests.patch(iid))
        if base is None or base.infra_failure:
            excluded[iid] = f"baseline fix: {why_b or base.infra_failure_reason}"  # type: ignore[union-attr]
        elif with_test is None or with_test.infra_failure:
            excluded[iid] = f"injected fix: {why_w or with_test.infra_failure_reason}"  # type: ignore[union-attr]
        elif "error" in test:
            excluded[iid] = f"injected test: {test['error']}"
        else:
            rows[iid] = {"baseline_resolved": base.resolved, "injected_resolved": with_test.resolved,
                         "test_class": test["test_class"], "fail_to_pass": test["fail_to_pass"],
                         "laxity": test["laxity"]}
    return rows, excluded


def injection_section(injections: Sequence[Injection], instance_ids: Sequence[str],
                      grades: Mapping[str, InstanceGrades]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the section, all pooled rows keyed "source/instance") - the rows feed the cutoff table."""
    sources: dict[str, Any] = {}
    pooled: dict[str, Any] = {}
    for inj in injections:
        rows, excluded = injection_rows(inj, instance_ids, grades)
        sources[inj.name] = {
            "baseline": inj.baseline.source, "injected": inj.injected.source, "tests": inj.tests.source,
            "overall": paired_delta((r["baseline_resolved"], r["injected_resolved"]) for r in rows.values()),
            "by_class": _by_class(rows), "instances": rows, "excluded": excluded,
        }
        pooled.update({f"{inj.name}/{iid}": r for iid, r in rows.items()})
    section = {
        "sources": sources,
        "overall": {"overall": paired_delta((r["baseline_resolved"], r["injected_resolved"])
                                            for r in pooled.values()),
                    "by_class": _by_class(pooled)},
    }
    return section, pooled


def cutoff_tables(cutoffs: Sequence[float], tests: Mapping[str, Mapping[str, Any]],
                  injection: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """Rigorous / Lax counts of the graded tests per cutoff (overall and per system) and, with injection runs,
    the paired delta on each side."""

    def laxities(rows: Mapping[str, Any]) -> list[float]:
        return [r["laxity"] for r in rows.values()
                if "error" not in r and r.get("fail_to_pass") and r.get("laxity") is not None]

    per_system = {name: laxities(section["instances"]) for name, section in tests.items()}
    everything = [x for xs in per_system.values() for x in xs]
    rows = [{"cutoff": c, "Rigorous": sum(1 for x in everything if x < c),
             "Lax": sum(1 for x in everything if x >= c),
             "by_system": {name: {"Rigorous": sum(1 for x in xs if x < c), "Lax": sum(1 for x in xs if x >= c)}
                           for name, xs in per_system.items()}} for c in cutoffs]
    inj_rows = None
    if injection is not None:
        usable = [r for r in injection.values() if r.get("fail_to_pass") and r.get("laxity") is not None]
        inj_rows = [{"cutoff": c,
                     "Rigorous": paired_delta((r["baseline_resolved"], r["injected_resolved"]) for r in usable
                                              if r["laxity"] < c),
                     "Lax": paired_delta((r["baseline_resolved"], r["injected_resolved"]) for r in usable
                                         if r["laxity"] >= c)} for c in cutoffs]
    return {"cutoffs": list(cutoffs), "tests": rows, "injection": inj_rows}


# --- the whole report --------------------------------------------------------------------------------------

def build_report(inputs: EvalInputs, grades: Mapping[str, InstanceGrades], options: GradeOptions,
                 cutoffs: Sequence[float]) -> dict[str, Any]:
    """The report document of ``inputs`` (``schema_version`` 1; the caller adds the refinement runs' section).
    Top-level keys:

    * ``settings`` (tau, operators, per_operator, seed, paper_classes), ``definitions`` (term -> text);
    * ``instances``: ``total``, ``ids`` (in file order), ``errors`` (id -> why nothing was graded),
      ``fix_errors`` (id -> why no fix was graded: the golden fix is not resolved there);
    * ``fixes``: system -> ``source``, ``summary`` (SWE-bench run report: ``*_instances`` counts, sorted
      ``*_ids``, ``resolved_rate``, ``errors``), ``instances`` (id -> SWE-bench ``report.json`` entry:
      patch_is_None, patch_exists, patch_successfully_applied, resolved, resolution, infra_failure[_reason],
      outcome, reason, tests_status, dropped_test_files, and coharden's dropped_config_files, tampering (any note:
      not resolved), notes; or ``{"error"}``);
    * ``tests``: system -> ``source``, ``summary`` (fail_to_pass counts/rate, ``classes``, mean_laxity, summed
      ``matrix``, id lists, ``errors``), ``instances`` (id -> applied, fail_to_pass, test_class, laxity, matrix,
      admissible, inadmissible, test_ids, buggy, fixed, pool_complete, reason; or ``{"error"}``);
    * ``comparison``: one row per system (fix and test summaries, coupling factor, overfit rate);
    * ``coupling``: system -> {``not_rigorous``, ``not_fail_to_pass``} -> :func:`coupling`;
    * ``overfitting``: system -> :func:`overfitting`;
    * ``injection``: None, or ``sources`` (name -> files, ``overall``, ``by_class``, ``instances``, ``excluded``)
      and ``overall`` (pooled ``overall`` and ``by_class``), each delta a :func:`paired_delta`;
    * ``cutoffs``: ``cutoffs``, ``tests`` (rows: cutoff, Rigorous, Lax, by_system), ``injection`` (None or rows:
      cutoff, Rigorous / Lax paired deltas);
    * ``runs``: run -> ``rounds`` (rows), ``per_instance``, ``totals``, ``unknown_instances`` (:func:`run_section`).
    """
    ids, fix_sets, test_sets, injections = list(inputs.instances), inputs.fix_sets, inputs.test_sets, inputs.injections
    fixes = {s.name: fix_section(s, ids, grades) for s in fix_sets}
    tests = {s.name: test_section(s, ids, grades) for s in test_sets}
    couplings = {f.name: coupling_pairs(f, t, ids, grades) for f, t in own_pairs(fix_sets, test_sets)}
    overfit = {f.name: overfitting(f, t, ids, grades) for f, t in own_pairs(fix_sets, test_sets)}
    injection, pooled = injection_section(injections, ids, grades) if injections else (None, None)
    comparison = comparison_rows(fixes, tests, couplings, overfit)
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": "coharden-eval",
        "settings": {"tau": options.mpe.tau, "operators": [str(op) for op in options.mpe.operators],
                     "per_operator": options.mpe.per_operator, "seed": options.mpe.seed,
                     "paper_classes": options.mpe.paper_classes, "sequential": options.mpe.is_sequential,
                     "max_mutants": options.mpe.max_mutants, "confidence": options.mpe.confidence},
        "definitions": DEFINITIONS,
        "instances": {"total": len(ids), "ids": ids,
                      "errors": {iid: g.error for iid, g in sorted(grades.items()) if g.error},
                      "fix_errors": {iid: g.fix_error for iid, g in sorted(grades.items()) if g.fix_error}},
        "fixes": fixes,
        "tests": tests,
        "comparison": comparison,
        "coupling": couplings,
        "overfitting": overfit,
        "injection": injection,
        "cutoffs": cutoff_tables(cutoffs, tests, pooled),
        "runs": {name: {**run_section(recs, grades, ids)} for name, recs in inputs.runs.items()},
    }


def comparison_rows(fixes: Mapping[str, Any], tests: Mapping[str, Any], couplings: Mapping[str, Any],
                    overfit: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per system (fix and test systems by name): its fix and test summaries side by side."""
    systems = list(dict.fromkeys([*fixes, *tests]))
    comparison = []
    for name in systems:
        fs, ts = fixes.get(name, {}).get("summary"), tests.get(name, {}).get("summary")
        comparison.append({
            "system": name,
            "fixes_submitted": fs["submitted_instances"] if fs else None,
            "resolved": fs["resolved_instances"] if fs else None,
            "resolved_rate": fs["resolved_rate"] if fs else None,
            "apply_failed": fs["apply_failed_instances"] if fs else None,
            "tests_submitted": ts["submitted_instances"] if ts else None,
            "fail_to_pass": ts["fail_to_pass_instances"] if ts else None,
            "fail_to_pass_rate": ts["fail_to_pass_rate"] if ts else None,
            **{c: (ts["classes"][c] if ts else None) for c in (*CLASSES, "Error")},
            "mean_laxity": ts["mean_laxity"] if ts else None,
            "coupling_factor": couplings[name]["not_rigorous"]["coupling_factor"] if name in couplings else None,
            "overfit_rate": overfit[name]["rate"] if name in overfit else None,
        })
    return comparison
