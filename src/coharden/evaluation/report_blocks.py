"""The evaluation report's content as one list of blocks (headings, paragraphs, tables, figures), from the JSON
document of :func:`coharden.evaluation.metrics.build_report` only: the Markdown and the HTML page both render this
list, so the two always say the same thing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coharden.evaluation.metrics import CELLS, CLASSES


@dataclass
class Block:
    kind: str  # "h1" | "h2" | "h3" | "p" | "table" | "figure"
    text: str = ""
    headers: Sequence[str] = ()
    rows: Sequence[Sequence[Any]] = ()
    image: bytes = b""


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _matrix(counts: dict[str, int] | None) -> str:
    return "-" if not counts else "/".join(str(counts.get(c, 0)) for c in CELLS)


FIGURE_TITLES = {"rounds": "Per-round Resolved, F->P and active instances",
                 "laxity": "Laxity histogram per system and class",
                 "matrix": "The four matrix cells", "cost": "Cost by round", "injection": "Test injection"}


def _draw_text(settings: dict[str, Any]) -> str:
    """How the mutants were drawn and the class decided, as the settings record it."""
    if settings.get("paper_classes"):
        return f"per operator: {settings['per_operator'] or 'all'} (the paper's point rule)"
    confidence = settings.get("confidence", 0.95)
    if settings.get("sequential"):
        return (f"sequential MPE up to {settings.get('max_mutants') or 'the whole pool'} mutants, class from the "
                f"{confidence:g} interval")
    return f"per operator: {settings['per_operator'] or 'all'}, class from the {confidence:g} interval"


def _laxity(row: dict[str, Any]) -> str | None:
    """A row's laxity with its interval beside it (``0.125 [0.016, 0.384]``)."""
    laxity, interval = row.get("laxity"), row.get("interval")
    if laxity is None:
        return None
    if not interval or interval[0] == interval[1]:
        return f"{laxity:.3f}"
    return f"{laxity:.3f} [{interval[0]:.3f}, {interval[1]:.3f}]"


#: The comparison's measures, one row each: (label, key of a comparison row).
COMPARISON_ROWS = [("fixes", "fixes_submitted"), ("resolved", "resolved"), ("resolved rate", "resolved_rate"),
                   ("did not apply", "apply_failed"), ("tests", "tests_submitted"), ("F->P", "fail_to_pass"),
                   ("F->P rate", "fail_to_pass_rate"), *((c, c) for c in (*CLASSES, "Error")),
                   ("mean laxity", "mean_laxity"), ("coupling factor", "coupling_factor"),
                   ("overfit rate", "overfit_rate")]


def comparison_block(comparison: Sequence[dict[str, Any]]) -> Block:
    """The systems side by side: one column per system, one row per measure. Nineteen measures as columns ran
    off a 1300 px page; systems are few, so the table stays narrow."""
    return Block("table", headers=["measure", *(r["system"] for r in comparison)],
                 rows=[[label, *(r.get(key) for r in comparison)] for label, key in COMPARISON_ROWS])


def blocks(report: dict[str, Any], figures: dict[str, bytes] | None = None) -> list[Block]:
    figures = figures or {}
    s = report["settings"]
    out = [Block("h1", "coharden evaluation report"),
           Block("p", f"{report['instances']['total']} instances; tau = {s['tau']}; operators: "
                      f"{', '.join(s['operators'])}; {_draw_text(s)}; seed {s['seed']}.")]

    def figure(name: str) -> None:
        if name in figures:
            out.append(Block("figure", FIGURE_TITLES[name], image=figures[name]))

    if report["comparison"]:
        out.append(Block("h2", "Comparison"))
        out.append(comparison_block(report["comparison"]))
    for name, section in report["fixes"].items():
        out += _fix_blocks(name, section)
    for name, section in report["tests"].items():
        out += _test_blocks(name, section)
    figure("laxity")
    figure("matrix")
    out += _coupling_blocks(report["coupling"])
    out += _overfitting_blocks(report["overfitting"])
    out += refinement_blocks(report.get("refinement") or {})
    inj = report.get("injection")
    if inj:
        out += _injection_blocks(inj)
        figure("injection")
    out += _cutoff_blocks(report["cutoffs"], report["tests"])
    for name, run in report["runs"].items():
        out += _run_blocks(name, run)
    if report["runs"]:
        figure("rounds")
        figure("cost")
    out += _error_blocks(report["instances"])
    out.append(Block("h2", "Definitions"))
    out.append(Block("table", headers=["term", "definition"], rows=[[k, v] for k, v in report["definitions"].items()]))
    return out


def _fix_blocks(name: str, section: dict[str, Any]) -> list[Block]:
    """A fix system's SWE-bench grades, one row per instance."""
    sm = section["summary"]
    rows = [[iid, r.get("resolved"), r.get("patch_successfully_applied"),
             *(len(r["tests_status"][k]["failure"]) if r.get("patch_successfully_applied")
               else None for k in ("FAIL_TO_PASS", "PASS_TO_PASS")),
             r.get("error") or r.get("reason") or ""]
            for iid, r in section["instances"].items()]
    return [Block("h2", f"Fixes: {name}"),
            Block("p", f"{section['source']}: {sm['resolved_instances']} of {sm['total_instances']} resolved "
                       f"(rate {fmt(sm['resolved_rate'])}); submitted {sm['submitted_instances']}, empty "
                       f"{sm['empty_patch_instances']}, did not apply {sm['apply_failed_instances']}, errors "
                       f"{sm['error_instances']}, missing {sm['missing_instances']}."),
            Block("table", headers=["instance", "resolved", "applied", "F2P failing", "P2P failing", "note"],
                  rows=rows)]


def _test_blocks(name: str, section: dict[str, Any]) -> list[Block]:
    """A test system's F->P, class and laxity, one row per instance."""
    summary = section["summary"]
    paragraph = (f"{section['source']}: {summary['fail_to_pass_instances']} of {summary['total_instances']} F->P "
                 f"(rate {fmt(summary['fail_to_pass_rate'])}); mean laxity {fmt(summary['mean_laxity'])}; "
                 f"matrix a/b/g/d {_matrix(summary['matrix'])}.")
    table = Block("table", headers=["instance", "F->P", "class", "laxity", "matrix a/b/g/d", "note"],
                  rows=[[iid, r.get("fail_to_pass"), r.get("test_class", "Error"), _laxity(r),
                         _matrix(r.get("matrix")), r.get("error") or r.get("reason") or ""]
                        for iid, r in section["instances"].items()])
    return [Block("h2", f"Tests: {name}"), Block("p", paragraph), table]


def _coupling_blocks(coupling: dict[str, Any]) -> list[Block]:
    if not coupling:
        return []
    rows = []
    for name, both in coupling.items():
        for definition, c in both.items():
            rows.append([name, definition, c["n"], c["cells"]["both_right"], c["cells"]["test_wrong_only"],
                         c["cells"]["fix_wrong_only"], c["cells"]["both_wrong"], c["p_test_wrong"],
                         c["p_fix_wrong"], c["p_joint"], c["coupling_factor"], c["p_fix_wrong_given_test_wrong"],
                         c["p_test_wrong_given_fix_wrong"], len(c["excluded"])])
    return [Block("h2", "Coupling of test and fix errors"),
            Block("table", headers=["system", "test wrong =", "n", "both right", "test wrong only",
                                    "fix wrong only", "both wrong", "P(test wrong)", "P(fix wrong)",
                                    "P(joint)", "coupling factor", "P(fix wrong | test wrong)",
                                    "P(test wrong | fix wrong)", "excluded"], rows=rows)]


def _overfitting_blocks(overfitting: dict[str, Any]) -> list[Block]:
    if not overfitting:
        return []
    return [Block("h2", "Test overfitting"),
            Block("table", headers=["system", "pairs", "pass own test", "overfit", "fails golden",
                                    "fails regression", "rate", "excluded"],
                  rows=[[name, o["n"], o["passes_own_test"], o["overfit"], o["overfit_golden"],
                         o["overfit_regression"], o["rate"], len(o["excluded"])]
                        for name, o in overfitting.items()])]


def _injection_blocks(inj: dict[str, Any]) -> list[Block]:
    rows = []
    for source, data in [*inj["sources"].items(), ("(all sources)", inj["overall"])]:
        for cls, d in [("all", data["overall"]), *data["by_class"].items()]:
            rows.append([source, cls, d["n"], d["baseline_resolved"], d["injected_resolved"], d["gained"],
                         d["lost"], d["delta"]])
    return [Block("h2", "Test injection"),
            Block("table", headers=["test source", "test class", "n", "resolved without", "resolved with",
                                    "gained", "lost", "delta"], rows=rows)]


def _cutoff_blocks(cut: dict[str, Any], tests: dict[str, Any]) -> list[Block]:
    """The Rigorous / Lax counts (and injection deltas) at other cutoffs than tau."""
    if not (tests or cut["injection"]):
        return []
    systems = list(tests) if len(tests) > 1 else []  # one system: its counts are the total
    headers = ["cutoff", "Rigorous (all)" if systems else "Rigorous", "Lax (all)" if systems else "Lax"]
    headers += [f"{name}: {side}" for name in systems for side in ("Rigorous", "Lax")]
    if cut["injection"]:
        headers += ["delta Rigorous (n)", "delta Lax (n)"]
    rows = []
    for i, row in enumerate(cut["tests"]):
        by_system = row.get("by_system") or {}
        line = [row["cutoff"], row["Rigorous"], row["Lax"],
                *(by_system.get(name, {}).get(side) for name in systems for side in ("Rigorous", "Lax"))]
        if cut["injection"]:
            inj_row = cut["injection"][i]
            line += [f"{fmt(inj_row['Rigorous']['delta'])} ({inj_row['Rigorous']['n']})",
                     f"{fmt(inj_row['Lax']['delta'])} ({inj_row['Lax']['n']})"]
        rows.append(line)
    return [Block("h2", "Cutoff sensitivity (Rigorous / Lax split)"), Block("table", headers=headers, rows=rows)]


def _run_blocks(name: str, run: dict[str, Any]) -> list[Block]:
    """A loop run: totals, one row per round, the cost per instance."""
    t = run["totals"]
    rounds = Block("table", headers=["round", "active", "Resolved", "F->P", "unknown Resolved / F->P", "decisions",
                                     "matrix a/b/g/d", "USD", "cumulative USD", "mutant share (cum.)", "tokens"],
                   rows=[[r["round"], r["active"], f"{r['resolved']}/{r['resolved_known']}",
                          f"{r['fail_to_pass']}/{r['fail_to_pass_known']}",
                          f"{r['resolved_unknown']} / {r['fail_to_pass_unknown']}",
                          ", ".join(f"{k} {v}" for k, v in r["decisions"].items()), _matrix(r["matrix"]),
                          r["usd"], r["cumulative_usd"], r["mutant_share"], r["tokens"]]
                         for r in run["rounds"]])
    costs = Block("table", headers=["instance", "rounds", "final decision", "USD", "mutant USD", "tokens",
                                    "resolved", "F->P"],
                  rows=[[iid, p["rounds"], p["final_decision"], p["usd"], p["mutant_usd"], p["tokens"],
                         p["resolved"], p["fail_to_pass"]] for iid, p in run["per_instance"].items()])
    return [Block("h2", f"Loop run: {name}"),
            Block("p", f"{t['instances']} instances, {t['records']} records; final Resolved "
                       f"{fmt(t['resolved_rate'])}, F->P {fmt(t['fail_to_pass_rate'])}; cost {fmt(t['usd'])} "
                       f"USD ({fmt(t['usd_per_instance'])} per instance), mutant share "
                       f"{fmt(t['mutant_share'])}."),
            rounds, Block("h3", "Cost per instance"), costs]


def _error_blocks(instances: dict[str, Any]) -> list[Block]:
    errors = [[iid, "instance", msg] for iid, msg in instances["errors"].items()]
    errors += [[iid, "fixes", msg] for iid, msg in instances["fix_errors"].items()]
    if not errors:
        return []
    return [Block("h2", "Errors"), Block("table", headers=["instance", "what", "error"], rows=sorted(errors))]


def refinement_blocks(refinement: dict[str, Any]) -> list[Block]:
    """``--overfit`` runs: overfitting before / after refinement, net Resolved gain, coverage by overfit group."""
    out: list[Block] = []
    for name, sec in refinement.items():
        out.append(Block("h2", f"Test overfitting before and after refinement: {name}"))
        change = sec["resolved_change"]
        out.append(Block("p", f"{sec['source']} (model {sec['model'] or '-'}): Resolved {change['baseline_resolved']} "
                              f"before, {change['injected_resolved']} after over {change['n']} paired instances; "
                              f"gained {change['gained']}, lost {change['lost']}, net gain {change['net_gain']}. "
                              f"Stop reasons: {', '.join(f'{k} {v}' for k, v in sec['stop_reasons'].items()) or '-'}; "
                              f"kept changes by side: "
                              f"{', '.join(f'{k} {v}' for k, v in sec['sides_changed'].items()) or '-'}."))
        rows = []
        for side in ("before", "after"):
            o, cov = sec[side], sec["coverage"][side]
            rows.append([side, o["n"], o["passes_own_test"], o["overfit"], o["overfit_golden"], o["rate"],
                         f"{fmt(cov['overfit']['mean_coverage'])} ({cov['overfit']['n']})",
                         f"{fmt(cov['not_overfit']['mean_coverage'])} ({cov['not_overfit']['n']})",
                         len(o["excluded"])])
        out.append(Block("table", headers=["side", "pairs", "pass own test", "overfit", "fails golden",
                                           "overfit rate", "coverage: overfit (n)", "coverage: not overfit (n)",
                                           "excluded"], rows=rows))
        out.append(Block("table", headers=["instance", "stop", "iterations", "overfit before", "overfit after",
                                           "coverage before", "coverage after", "resolved change"],
                         rows=[[iid, r["stop_reason"], r["iterations"], r["before"].get("overfit"),
                                r["after"].get("overfit"), r["before"]["coverage"], r["after"]["coverage"],
                                r["resolved_change"]] for iid, r in sec["instances"].items()]))
    return out

