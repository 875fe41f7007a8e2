"""Summaries of the real-bugs study, computed only from the step records: ``summarize`` turns the rows of
:class:`~coharden.study.real_bugs.RealBugsStudy` into plain numbers (a JSON document) that
:mod:`coharden.study.report` renders."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from coharden.analysis import stats
from coharden.analysis.rows import CLASS_ORDER, outcome, test_class
from coharden.schema.mpe_config import PAPER_TAU
from coharden.schema.mutant import MECHANICAL_DEFAULT, short_names
from coharden.study.data import GOLDEN, StudyData

__all__ = ["CLASS_ORDER", "outcome", "summarize", "test_class"]

OPERATOR_SHORT = short_names(op.value for op in MECHANICAL_DEFAULT)
"""The report's operator columns (built-in operators, in registry order) and their abbreviations."""
LAXITY_EDGES = (0.0, 0.1, PAPER_TAU, 0.4, 0.6, 0.8, 1.0)


def no_admissible_reason(mpe: dict[str, Any]) -> str:
    """Why an MPE run had no admissible mutant, from its pool summary and inadmissible counts."""
    pool = mpe.get("pool") or {}
    generated = pool.get("generated") or {}
    dropped = pool.get("dropped") or {}
    inadmissible = mpe.get("inadmissible") or {}
    if not generated:
        if not dropped:
            return "no mutant generated: the operators found nothing to mutate in the fix"
        parts = [f"{OPERATOR_SHORT.get(op, op)}: " + ", ".join(f"{k} {v}" for k, v in sorted(reasons.items()))
                 for op, reasons in sorted(dropped.items())]
        return "every generated mutant was dropped before running (" + "; ".join(parts) + ")"
    total = sum(generated.values())
    return f"all {total} mutants inadmissible (" + ", ".join(f"{k} {v}" for k, v in inadmissible.items()) + ")"


# --- summaries ------------------------------------------------------------------------------------------------

def summarize_verify(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    return {
        "n": len(rows),
        "agree": sum(1 for r in rows if r.get("agree")),
        "fail_to_pass": sum(1 for r in rows if r.get("fail_to_pass")),
        "expected_verified": sum(1 for r in rows if r.get("expected")),
        "disagreements": [r["instance_id"] for r in rows if not r.get("agree")],
    }


def summarize_golden(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    table = []
    for r in rows:
        mpe = r.get("mpe")
        if mpe is None:
            table.append({"instance_id": r["instance_id"], "error": r.get("error", "no MPE result")})
            continue
        counts = mpe.get("matrix_counts", {})
        per_op = {op: (row.get("admissible", 0), row.get("total", 0))
                  for op, row in mpe.get("per_operator", {}).items()}
        entry = {"instance_id": r["instance_id"], "counts": counts, "admissible": mpe.get("admissible", 0),
                 "per_operator": per_op, "inadmissible": mpe.get("inadmissible", {}),
                 "fail_to_pass": mpe.get("fail_to_pass"), "test_class": mpe.get("test_class"),
                 "beta_gamma_zero": counts.get("beta", 0) == 0 and counts.get("gamma", 0) == 0,
                 "mpe_wall": r.get("mpe_wall"), "bare_test_seconds": r.get("bare_test_seconds"),
                 "bare_outcome": r.get("bare_outcome"), "timings": mpe.get("timings", {})}
        if not entry["admissible"]:
            entry["no_admissible_reason"] = no_admissible_reason(mpe)
        table.append(entry)
    ok = [e for e in table if "error" not in e]
    admissible_per_op: Counter[str] = Counter()
    total_per_op: Counter[str] = Counter()
    for e in ok:
        for op, (adm, tot) in e["per_operator"].items():
            admissible_per_op[op] += adm
            total_per_op[op] += tot
    return {
        "n": len(table), "ran": len(ok), "errors": {e["instance_id"]: e["error"] for e in table if "error" in e},
        "beta_gamma_zero": sum(1 for e in ok if e["beta_gamma_zero"]),
        "golden_copy_fail_to_pass": sum(1 for e in ok if e["fail_to_pass"]),
        "with_admissible": sum(1 for e in ok if e["admissible"]),
        "no_admissible": {e["instance_id"]: e["no_admissible_reason"] for e in ok if not e["admissible"]},
        "admissible_per_operator": dict(sorted(admissible_per_op.items())),
        "run_per_operator": dict(sorted(total_per_op.items())),
        "admissible_total": sum(e["admissible"] for e in ok),
        "table": table,
    }


def summarize_systems(rows: Sequence[dict[str, Any]], systems: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for system in systems:
        mine = [r for r in rows if r.get("system") == system]
        graded = [r for r in mine if r.get("laxity") is not None and "error" not in r]
        laxities = [r["laxity"] for r in graded]
        classes = Counter(test_class(r) for r in mine)
        out[system] = {
            "predictions": len(mine),
            "fail_to_pass": sum(1 for r in mine if r.get("fail_to_pass") and "error" not in r),
            "classes": {c: classes.get(c, 0) for c in CLASS_ORDER if classes.get(c)},
            "laxity_median": stats.median(laxities), "laxity_mean": stats.mean(laxities),
            "laxity_histogram": stats.histogram(laxities, LAXITY_EDGES), "laxities": laxities,
            "laxity_classes": [test_class(r) for r in graded],  # the class of each laxity, for the plot's colours
            "errors": {r["instance_id"]: r["error"] for r in mine if "error" in r},
            "admissible_median": stats.median([r.get("admissible", 0) for r in mine if r.get("laxity") is not None]),
            # how often the sample cannot tell, and what the estimate cost
            "borderline_share": stats.rate(classes.get("Borderline", 0),
                                           sum(classes.get(c, 0) for c in stats.DECIDED_OR_BORDERLINE)),
            "drawn_mean": stats.mean([len(r.get("mutants", [])) for r in mine if r.get("laxity") is not None]),
        }
    return out


def assertflip_agreement(rows: Sequence[dict[str, Any]], resolved: dict[str, bool]) -> dict[str, Any]:
    pairs = []
    details = []
    for r in rows:
        if r.get("system") != "AssertFlip" or r["instance_id"] not in resolved:
            continue
        ours = bool(r.get("fail_to_pass")) and "error" not in r
        theirs = resolved[r["instance_id"]]
        pairs.append((ours, theirs))
        if ours != theirs:
            details.append({"instance_id": r["instance_id"], "ours": ours, "theirs": theirs,
                            "class": test_class(r), "error": r.get("error"),
                            "buggy": verdict_text(r.get("candidate_buggy")),
                            "fixed": verdict_text(r.get("candidate_fixed")),
                            "test_ids": r.get("test_ids", [])})
    conf = stats.confusion(pairs)
    return {"n": len(pairs), "agree": conf["both"] + conf["neither"], "confusion": conf, "disagreements": details}


def verdict_text(verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return "-"
    reason = (verdict.get("reason") or "").replace("\n", " ")
    return verdict.get("outcome", "?") + (f" ({reason[:200]})" if reason else "")


def graded_tests(grade_rows: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["instance_id"], r["system"]): r for r in grade_rows}


def killed_laxity(row: dict[str, Any]) -> float | None:
    """beta / (beta + delta): the share of the mutants the golden test rejects that the test accepts. Unlike
    laxity (beta / admissible) it is not diluted by mutants neither test notices (alpha), which dominate pools
    of fixes with many unrelated hunks; None when the golden test rejects no mutant."""
    counts = row.get("matrix_counts") or {}
    killed = counts.get("beta", 0) + counts.get("delta", 0)
    return counts.get("beta", 0) / killed if killed else None


def by_instance(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One vote per (instance, class): the tests of one instance face the same wrong fix and often pin the same
    example of the issue, so they are not independent. A cluster's laxity is its tests' mean; it accepts when
    at least half of its tests do."""
    clusters: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("test_class") in stats.DECIDED_OR_BORDERLINE and r.get("accepts") is not None \
                and r.get("laxity") is not None:
            clusters.setdefault((r["instance_id"], r["test_class"]), []).append(r)
    return [{"instance_id": iid, "test_class": cls, "tests": len(group),
             "laxity": stats.mean([float(r["laxity"]) for r in group]),
             "accepts": sum(bool(r["accepts"]) for r in group) * 2 >= len(group)}
            for (iid, cls), group in sorted(clusters.items())]


def repo_of(instance_id: str) -> str:
    """'astropy__astropy-12907' -> 'astropy/astropy' (SWE-bench ids are owner__name-number)."""
    return instance_id.rsplit("-", 1)[0].replace("__", "/", 1)


def summarize_wrong_fixes(grade_rows: Sequence[dict[str, Any]], fix_rows: Sequence[dict[str, Any]],
                          systems: Sequence[str], tau: float) -> dict[str, Any]:
    graded = graded_tests(grade_rows)
    per_fix = []
    validity_rows = []
    for f in fix_rows:
        if f.get("kind") != "wrong":
            continue
        iid = f["instance_id"]
        verdicts = f.get("verdicts", {})
        golden = outcome(verdicts.get(GOLDEN))
        entry = {"instance_id": iid, "golden": golden, "error": f.get("error"), "tests": {}}
        for system in systems:
            g = graded.get((iid, system))
            if g is None:
                continue
            v = outcome(verdicts.get(system))
            entry["tests"][system] = {"verdict": v, "class": test_class(g), "laxity": g.get("laxity"),
                                      "test_error": f.get("errors", {}).get(system)}
            if golden == "FAIL":
                accepts = True if v == "PASS" else False if v == "FAIL" else None
                validity_rows.append({"instance_id": iid, "system": system, "test_class": test_class(g),
                                      "laxity": g.get("laxity"), "killed_laxity": killed_laxity(g),
                                      "accepts": accepts, "verdict": v})
        per_fix.append(entry)
    overall = stats.validity(validity_rows)
    by_system = {s: stats.validity([r for r in validity_rows if r["system"] == s]) for s in systems}
    # the same figure with classes cut on beta / (beta + delta) instead of laxity (tests whose pool has no
    # mutant the golden test rejects drop out: nothing there can tell a lax test from a rigorous one)
    rekeyed = [{**r, "laxity": r["killed_laxity"],
                "test_class": ("Lax" if r["killed_laxity"] >= tau else "Rigorous")
                if r["killed_laxity"] is not None and r["test_class"] in ("Rigorous", "Lax") else "n/a"}
               for r in validity_rows]
    return {"per_fix": per_fix, "rows": validity_rows, "validity": overall, "by_system": by_system,
            "validity_killed": stats.validity(by_instance(rekeyed)),
            "validity_by_instance": stats.validity(by_instance(validity_rows)),
            "by_repo": {repo: stats.validity(by_instance([r for r in validity_rows if repo_of(r["instance_id"])
                                                          == repo]))
                        for repo in sorted({repo_of(r["instance_id"]) for r in validity_rows})},
            "uninformative": sum(1 for r in validity_rows
                                 if r["test_class"] in ("Rigorous", "Lax") and r["killed_laxity"] is None),
            "golden_rejects": sum(1 for e in per_fix if e["golden"] == "FAIL"),
            "golden_accepts": [e["instance_id"] for e in per_fix if e["golden"] == "PASS"],
            "golden_inadmissible": {e["instance_id"]: e["golden"] for e in per_fix
                                    if e["golden"] not in ("PASS", "FAIL")}}


def summarize_correct_fixes(grade_rows: Sequence[dict[str, Any]], fix_rows: Sequence[dict[str, Any]],
                            systems: Sequence[str]) -> dict[str, Any]:
    graded = graded_tests(grade_rows)
    usable: dict[str, list[dict[str, Any]]] = {}
    golden_rejected = []
    total = 0
    for f in fix_rows:
        if f.get("kind") != "correct":
            continue
        total += 1
        golden = outcome(f.get("verdicts", {}).get(GOLDEN))
        if golden == "PASS":
            usable.setdefault(f["instance_id"], []).append(f)
        else:
            golden_rejected.append({"fix_id": f["fix_id"], "model": f.get("model"), "golden": golden,
                                    "reason": (f.get("verdicts", {}).get(GOLDEN) or {}).get("reason", f.get("error"))})
    rows: list[dict[str, Any]] = []
    for (iid, system), g in sorted(graded.items()):
        if iid not in usable or not g.get("fail_to_pass") or "error" in g:
            continue
        outcomes = [outcome(f.get("verdicts", {}).get(system)) for f in usable[iid]]
        rejected = [f["fix_id"] for f, o in zip(usable[iid], outcomes, strict=True) if o == "FAIL"]
        decided = [o for o in outcomes if o in ("PASS", "FAIL")]
        rows.append({"instance_id": iid, "system": system, "test_class": test_class(g), "laxity": g.get("laxity"),
                     "fixes": len(usable[iid]), "decided": len(decided), "rejected": rejected,
                     "over_specified": (len(rejected) > 0) if decided else None,
                     "inadmissible": [o for o in outcomes if o not in ("PASS", "FAIL")]})
    return {
        "fixes": total, "usable_fixes": sum(len(v) for v in usable.values()), "instances": len(usable),
        "golden_rejected": golden_rejected, "rows": rows,
        "by_system": stats.shares_by(rows, lambda r: r["system"], lambda r: r["over_specified"]),
        "by_class": stats.shares_by(rows, lambda r: r["test_class"], lambda r: r["over_specified"]),
        "pairs": stats.Share(sum(len(r["rejected"]) for r in rows), sum(r["decided"] for r in rows)),
    }


def _golden_timing(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    walls = [r["mpe_wall"] for r in rows if r.get("mpe_wall") is not None]
    bare = [r["bare_test_seconds"] for r in rows if r.get("bare_test_seconds") is not None]
    ratio = [r["mpe_wall"] / r["bare_test_seconds"] for r in rows if r.get("mpe_wall") and r.get("bare_test_seconds")]
    return {"golden_mpe": {"n": len(walls), "median": stats.median(walls), "max": max(walls, default=None),
                           "sum": sum(walls)},
            "bare_test": {"n": len(bare), "median": stats.median(bare), "max": max(bare, default=None)},
            "ratio": {"median": stats.median(ratio), "max": max(ratio, default=None)}}


def summarize_timing(golden_rows: Sequence[dict[str, Any]], grade_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Wall times. Rows carry ``bytecode`` (the packages given checked-hash bytecode) from the run that made
    them; the headline figures are those of the rows with the bytecode cache when there are any."""
    warm = [r for r in golden_rows if r.get("bytecode")]
    cold = [r for r in golden_rows if not r.get("bytecode")]
    main = _golden_timing(warm or golden_rows)
    full = [r["mpe_wall"] for r in grade_rows if r.get("mpe_wall") is not None and r.get("fail_to_pass")]
    short = [r["mpe_wall"] for r in grade_rows if r.get("mpe_wall") is not None and not r.get("fail_to_pass")]
    mutants = [r["mpe"]["matrix_counts"] for r in golden_rows if r.get("mpe")]
    return {
        **main,
        "groups": {"with bytecode cache": _golden_timing(warm), "without bytecode cache": _golden_timing(cold)},
        "prediction_mpe_fail_to_pass": {"n": len(full), "median": stats.median(full), "max": max(full, default=None)},
        "prediction_not_fail_to_pass": {"n": len(short), "median": stats.median(short),
                                        "max": max(short, default=None)},
        "golden_mutants_run_median": stats.median([sum(c.values()) for c in mutants]),
        "slowest": sorted(((r["mpe_wall"], r["instance_id"]) for r in golden_rows if r.get("mpe_wall")),
                          reverse=True)[:3],
    }


def summarize(rows: dict[str, list[dict[str, Any]]], data: StudyData, systems: Sequence[str],
              tau: float) -> dict[str, Any]:
    return {
        "verify": summarize_verify(rows["verify"]),
        "golden": summarize_golden(rows["golden"]),
        "systems": summarize_systems(rows["mpe"], systems),
        "assertflip": assertflip_agreement(rows["mpe"], data.assertflip_resolved),
        "wrong": summarize_wrong_fixes(rows["mpe"], rows["fix"], systems, tau),
        "correct": summarize_correct_fixes(rows["mpe"], rows["fix"], systems),
        "timing": summarize_timing(rows["golden"], rows["mpe"]),
        "tau": tau,
    }
