"""The imitation step's figures, from its stored rows (:mod:`coharden.study.imitation`).

* **Imitation**, per mutant source: a real wrong fix's *signature* is the set of graded tests that accept it;
  the pool imitates it when an admissible mutant of that source has the same signature. Per operator, overall,
  and among the wrong fixes some graded test accepts.
* **Validity** with the mechanical pool (and, when LLM mutants are present, with the mixed pool): each F->P
  system test's matrix against the golden test over the row's mutants, its class, and whether it accepts the
  wrong fix.
* **Over-specification**: tests of each class (from this pool) that reject a correct alternative fix that
  the golden test accepts.
* **Golden against itself**: the golden test's copy (run beside the graded tests) against the golden test on
  every mutant; beta = gamma = 0 unless a verdict is not reproducible.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden.analysis import stats
from coharden.schema.estimate import DEFAULT_CONFIDENCE, Estimate
from coharden.schema.matrix import Cell, Reproduction, cell, classify

MECHANICAL = "mechanical"
LLM = "llm"

#: the by-hand kinds of the 17 sympy wrong fixes (docs/real_bugs_wrong_fixes.md): labels for "kinds missed"
KNOWN_KINDS = {
    "sympy__sympy-14976": "other (equivalent alternative)", "sympy__sympy-15875": "other (stronger answer)",
    "sympy__sympy-16597": "partial generalisation", "sympy__sympy-17318": "fix at another location",
    "sympy__sympy-17630": "fix at another location", "sympy__sympy-18199": "subset of the golden fix",
    "sympy__sympy-18211": "fix at another location", "sympy__sympy-18698": "fix at another location",
    "sympy__sympy-18763": "other (narrower alternative)", "sympy__sympy-20428": "fix at another location",
    "sympy__sympy-20438": "subset of the golden fix", "sympy__sympy-20916": "sub-line incompleteness",
    "sympy__sympy-21596": "partial generalisation", "sympy__sympy-21612": "fix at another location",
    "sympy__sympy-21930": "fix at another location", "sympy__sympy-22080": "fix at another location",
    "sympy__sympy-23950": "partial generalisation",
}


def _source(mutant: dict[str, Any]) -> str:
    return mutant.get("source", MECHANICAL)  # rows stored before LLM mutants joined: mechanical


def _mutants(row: dict[str, Any], sources: Sequence[str]) -> list[dict[str, Any]]:
    return [m for m in row.get("mutants", []) if _source(m) in sources]


def signature(verdicts: dict[str, str]) -> frozenset[str] | None:
    """The tests that accept (PASS); None when some test reached neither PASS nor FAIL (not comparable)."""
    if any(v not in ("PASS", "FAIL") for v in verdicts.values()):
        return None
    return frozenset(n for n, v in verdicts.items() if v == "PASS")


def _wrong_signature(row: dict[str, Any]) -> frozenset[str]:
    """A wrong fix's signature: a test that does not reach PASS on it rejects it."""
    return frozenset(n for n, v in row.get("wrong", {}).items() if v == "PASS")


def imitating_operators(row: dict[str, Any], source: str = MECHANICAL) -> dict[str, list[str]]:
    """Operator -> ids of its admissible mutants (of ``source``) whose signature equals the wrong fix's."""
    target = _wrong_signature(row)
    found: dict[str, list[str]] = {}
    for m in _mutants(row, [source]):
        if signature(m["verdicts"]) == target:
            found.setdefault(m["operator"], []).append(m["id"])
    return found


def closest(row: dict[str, Any], source: str = MECHANICAL) -> tuple[int, int]:
    """(most tests any admissible mutant of ``source`` agrees with the wrong fix on, number of tests)."""
    target = _wrong_signature(row)
    names = row.get("tests", [])
    best = 0
    for m in _mutants(row, [source]):
        sig = signature(m["verdicts"])
        if sig is not None:
            best = max(best, sum((n in sig) == (n in target) for n in names))
    return best, len(names)


def _census(row: dict[str, Any], sources: Sequence[str]) -> bool:
    """Whether the row's mutants of ``sources`` are every mutant its pool could give: the mechanical operators'
    when the row says none was left out over budget (a row without its pool summary is not known to be one).
    LLM mutants are a sample of the model's replies, never a census. A test must also be graded on every one of
    them (:func:`laxities_per_test`). Said in the figures, never used to narrow an interval (the pool is
    itself a sample of the plausible wrong fixes)."""
    if set(sources) != {MECHANICAL} or "pool" not in row:
        return False
    return not any("over_budget" in reasons for reasons in row["pool"].get("dropped", {}).values())


def laxities_per_test(row: dict[str, Any], tau: float, golden: str = "golden",
                      sources: Sequence[str] = (MECHANICAL,),
                      confidence: float = DEFAULT_CONFIDENCE) -> list[dict[str, Any]]:
    """Per F->P system test of ``row``: matrix against the golden test over the row's admissible mutants of
    ``sources``, laxity with its interval, the class the interval decides (Borderline when it straddles tau;
    :mod:`coharden.schema.estimate`), per-operator laxity, and whether it accepts the wrong fix (the golden
    test rejecting it)."""
    out = []
    census = _census(row, sources)
    gold_rejects = row.get("wrong", {}).get(golden) not in (None, "PASS")
    for name in row.get("tests", []):
        if name == golden:
            continue
        fp = row["buggy"].get(name) == "FAIL" and row["fixed"].get(name) == "PASS"
        counts = {c.value: 0 for c in Cell}
        per_op: dict[str, list[int]] = {}
        for m in _mutants(row, sources):
            cand, ref = m["verdicts"].get(name), m["verdicts"].get(golden)
            if cand not in ("PASS", "FAIL") or ref not in ("PASS", "FAIL"):
                continue
            which = cell(cand == "PASS", ref == "PASS")
            counts[which.value] += 1
            slot = per_op.setdefault(m["operator"], [0, 0])
            slot[0] += which is Cell.BETA
            slot[1] += 1
        admissible = sum(counts.values())
        # a census only when this test reached PASS or FAIL on every mutant: one it timed out on is not measured
        estimate = Estimate(beta=counts["beta"], admissible=admissible, confidence=confidence,
                            census=census and admissible == len(_mutants(row, sources)))
        laxity = estimate.laxity if fp else None
        interval = estimate.interval if fp else None
        runs = Reproduction(fails_on_buggy=row["buggy"].get(name) == "FAIL",
                            passes_on_fixed=row["fixed"].get(name) == "PASS",
                            admissible=row["buggy"].get(name) in ("PASS", "FAIL")
                            and row["fixed"].get(name) in ("PASS", "FAIL"))
        test_class = classify(runs, laxity=laxity, tau=tau, interval=interval).value
        verdict = row.get("wrong", {}).get(name)
        accepts = (verdict == "PASS") if gold_rejects and verdict in ("PASS", "FAIL") else None
        out.append({"instance_id": row["instance_id"], "system": name, "test_class": test_class, "laxity": laxity,
                    "interval": list(interval) if interval else None, "census": estimate.census, "counts": counts,
                    "accepts": accepts,
                    "per_operator": {op: b / n for op, (b, n) in sorted(per_op.items()) if n}})
    return out


def over_specification(tests: Sequence[dict[str, Any]], fix_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per class (from this pool): the tests that reject (FAIL on) a correct alternative fix the golden test
    accepts, over the (test, correct fix) pairs of the instances in ``tests``."""
    classes = {(t["instance_id"], t["system"]): t["test_class"] for t in tests}
    pairs = []
    for row in fix_rows:
        verdicts = row.get("verdicts", {})
        if row.get("kind") != "correct" or (verdicts.get("golden") or {}).get("outcome") != "PASS":
            continue
        for name, verdict in verdicts.items():
            cls = classes.get((row["instance_id"], name))
            if cls in stats.DECIDED_OR_BORDERLINE and verdict.get("outcome") in ("PASS", "FAIL"):
                pairs.append({"instance_id": row["instance_id"], "system": name, "test_class": cls,
                              "fix_id": row["fix_id"], "rejects": verdict["outcome"] == "FAIL"})
    per_class = stats.shares_by(pairs, lambda p: p["test_class"], lambda p: p["rejects"])
    instances = {t["instance_id"] for t in tests}
    correct = [r for r in fix_rows if r.get("kind") == "correct" and r["instance_id"] in instances]
    return {"per_class": per_class, "pairs": len(pairs), "fixes": len({p["fix_id"] for p in pairs}),
            "rejecting": [p for p in pairs if p["rejects"]],
            "correct_fixes": len(correct),
            "golden_rejects": sorted(r["fix_id"] for r in correct
                                     if (r.get("verdicts", {}).get("golden") or {}).get("outcome") == "FAIL")}


def golden_vs_golden(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The golden test's copy against the golden test over every mutant of each row that ran the copy:
    matrix counts per instance, and the instances (with the mutants and their operators) where beta or gamma
    is not 0."""
    per_instance = []
    for row in rows:
        if "golden_copy" not in row:
            continue
        counts = {c.value: 0 for c in Cell}
        odd: list[dict[str, Any]] = []
        for m in row.get("mutants", []):
            copy, ref = m.get("golden_copy"), m["verdicts"].get("golden")
            if copy not in ("PASS", "FAIL") or ref not in ("PASS", "FAIL"):
                continue
            which = cell(copy == "PASS", ref == "PASS")
            counts[which.value] += 1
            if which in (Cell.BETA, Cell.GAMMA):
                odd.append({"id": m["id"], "operator": m["operator"], "source": _source(m), "cell": which.value,
                            "copy": copy, "golden": ref})
        fp = (row["golden_copy"].get("buggy"), row["golden_copy"].get("fixed")) == ("FAIL", "PASS")
        per_instance.append({"instance_id": row["instance_id"], "counts": counts, "copy_fail_to_pass": fp,
                             "admissible": sum(counts.values()), "broken": odd})
    return {"per_instance": per_instance, "instances": len(per_instance),
            "ok": sum(1 for r in per_instance if not r["broken"] and r["copy_fail_to_pass"]),
            "admissible": sum(r["admissible"] for r in per_instance),
            "broken": [r for r in per_instance if r["broken"] or not r["copy_fail_to_pass"]]}


def imitation_figures(rows: Sequence[dict[str, Any]], operators: Sequence[str], source: str) -> dict[str, Any]:
    """Imitation by the mutants of ``source``: per wrong fix, per operator, overall, kinds missed."""
    per_fix = []
    for r in rows:
        found = imitating_operators(r, source)
        best, n = closest(r, source)
        per_fix.append({"instance_id": r["instance_id"], "kind": KNOWN_KINDS.get(r["instance_id"], "?"),
                        "imitated_by": found, "closest": f"{best}/{n}", "signature": sorted(_wrong_signature(r)),
                        "admissible": sum(1 for m in _mutants(r, [source]) if signature(m["verdicts"]) is not None),
                        "generated": r.get("pool", {}).get("generated", {}),
                        "skipped": r.get("pool", {}).get("skipped", {}),
                        "pool_seconds": r.get("pool_seconds") if source == MECHANICAL else r.get("llm_seconds")})
    total = len(per_fix)
    # a wrong fix every graded test rejects is matched by any mutant that fails them all: the informative
    # cases are those some graded test lets through
    accepted = [f for f in per_fix if f["signature"]]
    missed: dict[str, list[str]] = {}
    for f in per_fix:
        if not f["imitated_by"]:
            missed.setdefault(f["kind"], []).append(f["instance_id"])
    return {"per_fix": per_fix, "missed_kinds": missed,
            "per_operator": {op: stats.Share(sum(1 for f in per_fix if op in f["imitated_by"]), total)
                             for op in operators},
            "overall": stats.Share(sum(1 for f in per_fix if f["imitated_by"]), total),
            "per_operator_accepted": {op: stats.Share(sum(1 for f in accepted if op in f["imitated_by"]),
                                                      len(accepted)) for op in operators},
            "overall_accepted": stats.Share(sum(1 for f in accepted if f["imitated_by"]), len(accepted))}


def summarize_imitation(rows: Sequence[dict[str, Any]], operators: Sequence[str], tau: float,
                        fix_rows: Sequence[dict[str, Any]] = (),
                        confidence: float = DEFAULT_CONFIDENCE) -> dict[str, Any]:
    """Per operator and overall: the share of real wrong fixes imitated; the kinds missed; validity (classes
    from the laxity's interval at ``confidence``); and, from ``fix_rows`` (the study's fix verdicts),
    over-specification with this pool's classes; the golden test against itself; with LLM mutants, the same
    imitation figure for them and validity with the LLM mutants alone and with both pooled (``llm``)."""
    from coharden.study.summary import by_instance

    usable = [r for r in rows if not r.get("error") and r.get("tests")]
    summary = imitation_figures(usable, operators, MECHANICAL)
    tests = [t for r in usable for t in laxities_per_test(r, tau, confidence=confidence)]
    summary.update(errors=[r["instance_id"] for r in rows if r.get("error")], tests=tests,
                   validity=stats.validity(tests), validity_by_instance=stats.validity(by_instance(tests)),
                   over_specification=over_specification(tests, fix_rows), golden_vs_golden=golden_vs_golden(usable),
                   pool_seconds=[f["pool_seconds"] for f in summary["per_fix"] if f["pool_seconds"] is not None])
    with_llm = [r for r in usable if "llm_pool" in r]
    if with_llm:
        llm_ops = sorted({m["operator"] for r in with_llm for m in _mutants(r, [LLM])}
                         | {op for r in with_llm for op in r["llm_pool"].get("per_operator", {})})
        figures = imitation_figures(with_llm, llm_ops, LLM)
        llm_only = [t for r in with_llm for t in laxities_per_test(r, tau, sources=(LLM,), confidence=confidence)]
        mixed = [t for r in with_llm
                 for t in laxities_per_test(r, tau, sources=(MECHANICAL, LLM), confidence=confidence)]
        mechanical = [t for r in with_llm for t in laxities_per_test(r, tau, confidence=confidence)]
        figures.update(operators=llm_ops, model=with_llm[0]["llm_pool"].get("model"),
                       incomplete=[r["instance_id"] for r in with_llm if not r["llm_pool"].get("complete", True)],
                       either=stats.Share(sum(1 for r in with_llm if imitating_operators(r, MECHANICAL)
                                              or imitating_operators(r, LLM)), len(with_llm)),
                       validity_mechanical=stats.validity(mechanical),
                       validity_llm=stats.validity(llm_only),
                       validity_llm_by_instance=stats.validity(by_instance(llm_only)),
                       validity_mixed=stats.validity(mixed),
                       validity_mixed_by_instance=stats.validity(by_instance(mixed)),
                       tests_llm=llm_only, tests_mixed=mixed)
        summary["llm"] = figures
    return summary
