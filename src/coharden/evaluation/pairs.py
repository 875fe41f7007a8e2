"""A system's fix and its test on the same instance, read together: do their errors come together (coupling),
does the fix pass its own test without being resolved (overfitting). Pure functions of the grades; the
definitions are :data:`coharden.evaluation.metrics.DEFINITIONS`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from coharden.analysis.stats import rate
from coharden.evaluation.grading_jobs import InstanceGrades, fix_row, own_key, test_row
from coharden.evaluation.inputs import PredictionSet


def coupling(pairs: Mapping[str, tuple[bool, bool]], excluded: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Joint failure of test and fix. ``pairs``: instance id -> (test wrong, fix wrong)."""
    n = len(pairs)
    tw = sum(1 for t, _ in pairs.values() if t)
    fw = sum(1 for _, f in pairs.values() if f)
    both = sum(1 for t, f in pairs.values() if t and f)
    p_t, p_f, p_joint = rate(tw, n), rate(fw, n), rate(both, n)
    independent = p_t * p_f if p_t is not None and p_f is not None else None
    return {
        "n": n,
        "cells": {"both_right": n - tw - fw + both, "test_wrong_only": tw - both, "fix_wrong_only": fw - both,
                  "both_wrong": both},
        "test_wrong": tw, "fix_wrong": fw,
        "p_test_wrong": p_t, "p_fix_wrong": p_f, "p_joint": p_joint, "p_independent": independent,
        "coupling_factor": p_joint / independent if p_joint is not None and independent else None,
        "p_fix_wrong_given_test_wrong": rate(both, tw),
        "p_test_wrong_given_fix_wrong": rate(both, fw),
        "instances": {iid: {"test_wrong": t, "fix_wrong": f} for iid, (t, f) in sorted(pairs.items())},
        "excluded": dict(sorted((excluded or {}).items())),
    }


def coupling_pairs(fixes: PredictionSet, tests: PredictionSet, instance_ids: Sequence[str],
                   grades: Mapping[str, InstanceGrades]) -> dict[str, Any]:
    """Both definitions of a wrong test (see :data:`DEFINITIONS`)."""
    strict: dict[str, tuple[bool, bool]] = {}
    loose: dict[str, tuple[bool, bool]] = {}
    ex_strict: dict[str, str] = {}
    ex_loose: dict[str, str] = {}
    for iid in instance_ids:
        if iid not in fixes.predictions or iid not in tests.predictions:
            continue
        grade, why = fix_row(grades, iid, fixes.patch(iid))
        row = test_row(grades, iid, tests.patch(iid))
        if grade is None or grade.infra_failure:
            reason = f"fix: {why or grade.infra_failure_reason}"  # type: ignore[union-attr]
            ex_strict[iid] = ex_loose[iid] = reason
            continue
        if "error" in row:
            ex_strict[iid] = ex_loose[iid] = f"test: {row['error']}"
            continue
        fix_wrong = not grade.resolved
        loose[iid] = (not row["fail_to_pass"], fix_wrong)
        if row["test_class"] == "Inconclusive":
            ex_strict[iid] = "test: Inconclusive (no admissible mutant, laxity undefined)"
            continue
        if row["test_class"] == "Borderline":
            ex_strict[iid] = "test: Borderline (the laxity's interval straddles tau: rigor unknown)"
            continue
        strict[iid] = (row["test_class"] != "Rigorous", fix_wrong)
    return {"not_rigorous": coupling(strict, ex_strict), "not_fail_to_pass": coupling(loose, ex_loose)}


def overfitting(fixes: PredictionSet, tests: PredictionSet, instance_ids: Sequence[str],
                grades: Mapping[str, InstanceGrades]) -> dict[str, Any]:
    rows: dict[str, Any] = {}
    excluded: dict[str, str] = {}
    for iid in instance_ids:
        if iid not in fixes.predictions or iid not in tests.predictions:
            continue
        fix_patch, test_patch = fixes.patch(iid), tests.patch(iid)
        grade, why = fix_row(grades, iid, fix_patch)
        g = grades.get(iid)
        own = g.own.get(own_key(fix_patch, test_patch)) if g is not None else None
        if grade is None or grade.infra_failure:
            excluded[iid] = f"fix: {why or grade.infra_failure_reason}"  # type: ignore[union-attr]
            continue
        if own is None or not own.get("usable"):
            excluded[iid] = (own or {}).get("reason", "own test not run")
            continue
        passes = bool(own["passed"])
        ran = grade.patch_successfully_applied  # else the golden tests never ran: None, not False
        rows[iid] = {"own_test": own["outcome"], "passes_own_test": passes, "resolved": grade.resolved,
                     "fails_golden": grade.fails_golden if ran else None,
                     "fails_regression": grade.fails_regression if ran else None,
                     "overfit": passes and not grade.resolved}
    passing = [r for r in rows.values() if r["passes_own_test"]]
    overfit = [r for r in passing if r["overfit"]]
    return {
        "n": len(rows),
        "passes_own_test": len(passing),
        "overfit": len(overfit),
        "overfit_golden": sum(1 for r in overfit if r["fails_golden"]),
        "overfit_regression": sum(1 for r in overfit if r["fails_regression"]),
        "rate": rate(len(overfit), len(passing)),
        "instances": dict(sorted(rows.items())),
        "excluded": dict(sorted(excluded.items())),
    }
