"""The evaluation report as Markdown and as one self-contained HTML page (plots inlined as base64 PNG).

Both are rendered from the JSON document of :func:`coharden.evaluation.metrics.build_report` only, through one
list of blocks (headings, paragraphs, tables, figures), so the two always say the same thing. Plots need
matplotlib (``pip install 'coharden[report]'``); they are drawn on :class:`matplotlib.figure.Figure` objects
with the Agg canvas, never through pyplot, so no global backend state is touched.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coharden.analysis.figures import CLASS_COLORS, CLASS_HATCHES, shared_count_limit
from coharden.analysis.figures import figure as _figure
from coharden.analysis.figures import png as _png
from coharden.evaluation.metrics import CELLS, CLASSES

CELL_COLORS = {"alpha": "#64b5f6", "beta": "#ef5350", "gamma": "#66bb6a", "delta": "#bdbdbd"}


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


# --- plots -------------------------------------------------------------------------------------------------

def _round_axis(ax, rounds: Sequence[int]) -> None:
    """Rounds are whole numbers: one tick per round (a locator would give 0.5 steps around a single round)."""
    from matplotlib.ticker import MaxNLocator

    values = sorted(set(rounds))
    if not values:
        return
    if len(values) <= 20:
        ax.set_xticks(values)
    else:
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlim(values[0] - 0.6, values[-1] + 0.6)


def _count_axis(ax) -> None:
    """Counts and costs are never negative: the axis starts at 0 (also when every value is 0)."""
    top = ax.get_ylim()[1]
    ax.set_ylim(0, top if top > 0 else 1)


def _legend_below(fig, ax, ncols: int = 4) -> None:
    """One legend for the figure, outside the axes (below them), so it covers no data."""
    handles, labels = ax.get_legend_handles_labels()
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=min(ncols, len(labels)), fontsize=7,
                   frameon=False)


def rounds_figure(runs: dict[str, Any]):
    fig = _figure(8, 4.2)
    left, right = fig.subplots(1, 2)
    all_rounds: list[int] = []
    for name, run in runs.items():
        rounds = [r["round"] for r in run["rounds"]]
        all_rounds += rounds
        left.plot(rounds, [r["resolved_rate"] for r in run["rounds"]], marker="o", label=f"{name}: Resolved")
        left.plot(rounds, [r["fail_to_pass_rate"] for r in run["rounds"]], marker="s", linestyle="--",
                  label=f"{name}: F->P")
        right.plot(rounds, [r["active"] for r in run["rounds"]], marker="o", label=f"{name}: active")
    left.set(title="Resolved and F->P by round", xlabel="round", ylabel="share of instances", ylim=(-0.02, 1.02))
    right.set(title="Active instances by round", xlabel="round", ylabel="instances")
    for ax in (left, right):
        _round_axis(ax, all_rounds)
    _count_axis(right)
    right.yaxis.set_major_locator(_integer_locator())
    handles, labels = left.get_legend_handles_labels()
    handles2, labels2 = right.get_legend_handles_labels()
    fig.legend(handles + handles2, labels + labels2, loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    return fig


def _integer_locator():
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(integer=True)


def plot_rounds(runs: dict[str, Any]) -> bytes:
    return _png(rounds_figure(runs))


def laxity_figure(tests: dict[str, Any], tau: float):
    """One panel per test system (same axes), each a histogram stacked by class; one legend below."""
    per_system: dict[str, dict[str, list[float]]] = {}
    for system, section in tests.items():
        values: dict[str, list[float]] = {}
        for row in section["instances"].values():
            if "error" not in row and row.get("laxity") is not None:
                values.setdefault(row["test_class"], []).append(row["laxity"])
        if values:
            per_system[system] = values
    n = max(1, len(per_system))
    fig = _figure(max(5.0, 3.2 * n), 3.8)
    axes = fig.subplots(1, n, sharey=True, squeeze=False)[0]
    bins = [i / 20 for i in range(21)]
    shown: dict[str, Any] = {}
    tops: list[float] = []
    for ax, (system, values) in zip(axes, per_system.items(), strict=False):
        names = [c for c in CLASSES if c in values]
        counts, _, patches = ax.hist([values[c] for c in names], bins=bins, stacked=True, label=names,
                                     color=[CLASS_COLORS[c] for c in names])
        tops.append(float(max(counts[-1] if len(names) > 1 else counts)))  # stacked: the last row is the total
        line = ax.axvline(tau, color="black", linestyle=":")
        containers = patches if len(names) > 1 else [patches]  # one dataset: hist returns its bars directly
        for name, bars in zip(names, containers, strict=True):
            for bar in bars:
                bar.set_hatch(CLASS_HATCHES.get(name, ""))
            shown[name] = bars[0]
        shown[f"tau = {tau}"] = line
        ax.set(title=system, xlabel="laxity (beta / admissible)", xlim=(0, 1))
        ax.yaxis.set_major_locator(_integer_locator())
    shared_count_limit(axes, tops)
    axes[0].set_ylabel("tests")
    fig.suptitle("Laxity of F->P tests, by system and class", fontsize=10)
    order = [c for c in CLASSES if c in shown] + [k for k in shown if k not in CLASSES]
    fig.legend([shown[k] for k in order], order, loc="outside lower center", ncols=min(6, len(order)), fontsize=7,
               frameon=False)
    return fig


def plot_laxity(tests: dict[str, Any], tau: float) -> bytes:
    return _png(laxity_figure(tests, tau))


CELL_LABELS = {"alpha": "alpha: both pass", "beta": "beta: lax (candidate passes)",
               "gamma": "gamma: rigor (candidate fails)", "delta": "delta: both fail"}


def matrix_groups(tests: dict[str, Any], runs: dict[str, Any]) -> list[tuple[str, dict[str, int]]]:
    """(label, cell counts) per test system and per loop round that ran mutants; a round without a matrix
    (lax-init, a failed gate) has nothing to show and is left out rather than drawn as an empty bar."""
    groups: list[tuple[str, dict[str, int]]] = [(f"tests: {name}", s["summary"]["matrix"])
                                                for name, s in tests.items()]
    for name, run in runs.items():
        groups += [(f"{name} r{r['round']}", r["matrix"]) for r in run["rounds"]
                   if sum((r.get("matrix") or {}).values())]
    return groups


def matrix_figure(tests: dict[str, Any], runs: dict[str, Any]):
    groups = matrix_groups(tests, runs)
    fig = _figure(max(5.5, 1.0 * len(groups) + 2.5), 4.2)
    ax = fig.subplots()
    bottom = [0] * len(groups)
    labels = [g[0] for g in groups]
    for cell in CELLS:
        heights = [g[1].get(cell, 0) for g in groups]
        ax.bar(labels, heights, bottom=bottom, label=CELL_LABELS[cell], color=CELL_COLORS[cell])
        bottom = [b + h for b, h in zip(bottom, heights, strict=True)]
    ax.set(title="Matrix cells per test system and loop round", ylabel="mutants")
    ax.title.set_fontsize(10)
    ax.tick_params(axis="x", labelrotation=30, labelsize=8)
    _count_axis(ax)
    _legend_below(fig, ax, ncols=2)
    return fig


def plot_matrix(tests: dict[str, Any], runs: dict[str, Any]) -> bytes:
    return _png(matrix_figure(tests, runs))


def cost_figure(runs: dict[str, Any]):
    fig = _figure(8, 4.2)
    left, right = fig.subplots(1, 2)
    width = 0.8 / max(1, len(runs))
    all_rounds: list[int] = []
    for i, (name, run) in enumerate(runs.items()):
        offset = (i - (len(runs) - 1) / 2) * width  # bars of the runs side by side, centred on the round
        all_rounds += [r["round"] for r in run["rounds"]]
        rounds = [r["round"] + offset for r in run["rounds"]]
        mutant = [r["mutant_usd"] for r in run["rounds"]]
        other = [r["usd"] - r["mutant_usd"] for r in run["rounds"]]
        left.bar(rounds, other, width=width, label=f"{name}: agent")
        left.bar(rounds, mutant, width=width, bottom=other, hatch="//", label=f"{name}: mutants")
        right.plot([r["round"] for r in run["rounds"]], [r["cumulative_usd"] for r in run["rounds"]], marker="o",
                   label=f"{name}: cumulative")
    left.set(title="Cost by round (USD)", xlabel="round", ylabel="USD")
    right.set(title="Cumulative cost (USD)", xlabel="round", ylabel="USD")
    for ax in (left, right):
        _round_axis(ax, all_rounds)
        _count_axis(ax)
    handles, labels = left.get_legend_handles_labels()
    handles2, labels2 = right.get_legend_handles_labels()
    fig.legend(handles + handles2, labels + labels2, loc="outside lower center", ncols=3, fontsize=7, frameon=False)
    return fig


def plot_cost(runs: dict[str, Any]) -> bytes:
    return _png(cost_figure(runs))


def plot_injection(injection: dict[str, Any]) -> bytes:
    return _png(injection_figure(injection))


def injection_figure(injection: dict[str, Any]):
    """Delta Resolved per class of the injected test (Borderline a group of its own when present), one bar per
    test source, each labelled with its n; room above and below the bars for the labels, the legend below."""
    fig = _figure(7.0, 4.0)
    ax = fig.subplots()
    groups = [("all sources", injection["overall"]), *injection["sources"].items()]
    classes = ["all", *injection["overall"]["by_class"]]
    width = 0.8 / len(groups)
    for i, (name, data) in enumerate(groups):
        cells = [data["overall"], *(data["by_class"].get(c) or {"n": 0, "delta": None} for c in classes[1:])]
        offset = (i - (len(groups) - 1) / 2) * width
        bars = ax.bar([k + offset for k in range(len(classes))], [c["delta"] or 0.0 for c in cells], width=width,
                      label=name)
        ax.bar_label(bars, labels=[f"n={c['n']}" for c in cells], fontsize=7)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(classes)), classes)
    ax.set(title="Test injection: change in Resolved by class of the injected test", ylabel="delta Resolved")
    ax.title.set_fontsize(10)
    ax.margins(y=0.15)  # the n= labels above (and below) the tallest bars stay inside the axes
    _legend_below(fig, ax)
    return fig


def plots(report: dict[str, Any]) -> dict[str, bytes]:
    """The report's figures as PNG bytes (only those with data)."""
    out: dict[str, bytes] = {}
    runs = report.get("runs") or {}
    tests = report.get("tests") or {}
    if runs:
        out["rounds"] = plot_rounds(runs)
    if any(r.get("laxity") is not None for s in tests.values() for r in s["instances"].values() if "error" not in r):
        out["laxity"] = plot_laxity(tests, report["settings"]["tau"])
    if matrix_groups(tests, runs):
        out["matrix"] = plot_matrix(tests, runs)
    if runs:
        out["cost"] = plot_cost(runs)
    if report.get("injection"):
        out["injection"] = plot_injection(report["injection"])
    return out


# --- content -----------------------------------------------------------------------------------------------

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
        sm = section["summary"]
        out.append(Block("h2", f"Fixes: {name}"))
        out.append(Block("p", f"{section['source']}: {sm['resolved_instances']} of {sm['total_instances']} resolved "
                              f"(rate {fmt(sm['resolved_rate'])}); submitted {sm['submitted_instances']}, empty "
                              f"{sm['empty_patch_instances']}, did not apply {sm['apply_failed_instances']}, errors "
                              f"{sm['error_instances']}, missing {sm['missing_instances']}."))
        out.append(Block("table", headers=["instance", "resolved", "applied", "F2P failing", "P2P failing", "note"],
                         rows=[[iid, r.get("resolved"), r.get("patch_successfully_applied"),
                                *(len(r["tests_status"][k]["failure"]) if r.get("patch_successfully_applied")
                                  else None for k in ("FAIL_TO_PASS", "PASS_TO_PASS")),
                                r.get("error") or r.get("reason") or ""]
                               for iid, r in section["instances"].items()]))
    for name, section in report["tests"].items():
        sm = section["summary"]
        out.append(Block("h2", f"Tests: {name}"))
        out.append(Block("p", f"{section['source']}: {sm['fail_to_pass_instances']} of {sm['total_instances']} F->P "
                              f"(rate {fmt(sm['fail_to_pass_rate'])}); mean laxity {fmt(sm['mean_laxity'])}; "
                              f"matrix a/b/g/d {_matrix(sm['matrix'])}."))
        out.append(Block("table", headers=["instance", "F->P", "class", "laxity", "matrix a/b/g/d", "note"],
                         rows=[[iid, r.get("fail_to_pass"), r.get("test_class", "Error"), _laxity(r),
                                _matrix(r.get("matrix")), r.get("error") or r.get("reason") or ""]
                               for iid, r in section["instances"].items()]))
    figure("laxity")
    figure("matrix")
    if report["coupling"]:
        out.append(Block("h2", "Coupling of test and fix errors"))
        rows = []
        for name, both in report["coupling"].items():
            for definition, c in both.items():
                rows.append([name, definition, c["n"], c["cells"]["both_right"], c["cells"]["test_wrong_only"],
                             c["cells"]["fix_wrong_only"], c["cells"]["both_wrong"], c["p_test_wrong"],
                             c["p_fix_wrong"], c["p_joint"], c["coupling_factor"], c["p_fix_wrong_given_test_wrong"],
                             c["p_test_wrong_given_fix_wrong"], len(c["excluded"])])
        out.append(Block("table", headers=["system", "test wrong =", "n", "both right", "test wrong only",
                                           "fix wrong only", "both wrong", "P(test wrong)", "P(fix wrong)",
                                           "P(joint)", "coupling factor", "P(fix wrong | test wrong)",
                                           "P(test wrong | fix wrong)", "excluded"], rows=rows))
    if report["overfitting"]:
        out.append(Block("h2", "Test overfitting"))
        out.append(Block("table", headers=["system", "pairs", "pass own test", "overfit", "fails golden",
                                           "fails regression", "rate", "excluded"],
                         rows=[[name, o["n"], o["passes_own_test"], o["overfit"], o["overfit_golden"],
                                o["overfit_regression"], o["rate"], len(o["excluded"])]
                               for name, o in report["overfitting"].items()]))
    out += refinement_blocks(report.get("refinement") or {})
    inj = report.get("injection")
    if inj:
        out.append(Block("h2", "Test injection"))
        rows = []
        for source, data in [*inj["sources"].items(), ("(all sources)", inj["overall"])]:
            for cls, d in [("all", data["overall"]), *data["by_class"].items()]:
                rows.append([source, cls, d["n"], d["baseline_resolved"], d["injected_resolved"], d["gained"],
                             d["lost"], d["delta"]])
        out.append(Block("table", headers=["test source", "test class", "n", "resolved without", "resolved with",
                                           "gained", "lost", "delta"], rows=rows))
        figure("injection")
    cut = report["cutoffs"]
    if report["tests"] or cut["injection"]:
        out.append(Block("h2", "Cutoff sensitivity (Rigorous / Lax split)"))
        systems = list(report["tests"]) if len(report["tests"]) > 1 else []  # one system: its counts are the total
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
        out.append(Block("table", headers=headers, rows=rows))
    for name, run in report["runs"].items():
        out.append(Block("h2", f"Loop run: {name}"))
        t = run["totals"]
        out.append(Block("p", f"{t['instances']} instances, {t['records']} records; final Resolved "
                              f"{fmt(t['resolved_rate'])}, F->P {fmt(t['fail_to_pass_rate'])}; cost {fmt(t['usd'])} "
                              f"USD ({fmt(t['usd_per_instance'])} per instance), mutant share "
                              f"{fmt(t['mutant_share'])}."))
        out.append(Block("table", headers=["round", "active", "Resolved", "F->P", "unknown Resolved / F->P",
                                           "decisions",
                                           "matrix a/b/g/d", "USD", "cumulative USD", "mutant share (cum.)",
                                           "tokens"],
                         rows=[[r["round"], r["active"], f"{r['resolved']}/{r['resolved_known']}",
                                f"{r['fail_to_pass']}/{r['fail_to_pass_known']}",
                                f"{r['resolved_unknown']} / {r['fail_to_pass_unknown']}",
                                ", ".join(f"{k} {v}" for k, v in r["decisions"].items()), _matrix(r["matrix"]),
                                r["usd"], r["cumulative_usd"], r["mutant_share"], r["tokens"]]
                               for r in run["rounds"]]))
        out.append(Block("h3", "Cost per instance"))
        out.append(Block("table", headers=["instance", "rounds", "final decision", "USD", "mutant USD", "tokens",
                                           "resolved", "F->P"],
                         rows=[[iid, p["rounds"], p["final_decision"], p["usd"], p["mutant_usd"], p["tokens"],
                                p["resolved"], p["fail_to_pass"]] for iid, p in run["per_instance"].items()]))
    if report["runs"]:
        figure("rounds")
        figure("cost")
    errors = [[iid, "instance", msg] for iid, msg in report["instances"]["errors"].items()]
    errors += [[iid, "fixes", msg] for iid, msg in report["instances"]["fix_errors"].items()]
    if errors:
        out.append(Block("h2", "Errors"))
        out.append(Block("table", headers=["instance", "what", "error"], rows=sorted(errors)))
    out.append(Block("h2", "Definitions"))
    out.append(Block("table", headers=["term", "definition"], rows=[[k, v] for k, v in report["definitions"].items()]))
    return out


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


# --- rendering ---------------------------------------------------------------------------------------------

def _md_cell(value: Any) -> str:
    return fmt(value).replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    """Markdown (no figures: the HTML page has them)."""
    lines: list[str] = []
    for block in blocks(report):
        if block.kind in ("h1", "h2", "h3"):
            lines += ["#" * int(block.kind[1]) + " " + block.text, ""]
        elif block.kind == "p":
            lines += [block.text, ""]
        elif block.kind == "table":
            lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            lines.append("|" + "---|" * len(block.headers))
            lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
            lines.append("")
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
td { max-width: 40em; white-space: normal; overflow-wrap: break-word; }  /* full notes, wrapped between words */
th { background: #f0f0f0; }
figure { margin: 1em 0 2em; } figcaption { font-weight: 600; margin-bottom: 0.4em; }
img { max-width: 100%; }
.wide { max-width: 100%; overflow-x: auto; }  /* a table wider than the page scrolls inside it */
"""


def render_html(report: dict[str, Any], figures: dict[str, bytes] | None = None) -> str:
    """One self-contained page: inline CSS, every plot a ``data:image/png;base64`` URI."""
    figures = plots(report) if figures is None else figures
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             "<title>coharden evaluation report</title>", f"<style>{STYLE}</style>", "</head>", "<body>"]
    for block in blocks(report, figures):
        if block.kind in ("h1", "h2", "h3", "p"):
            parts.append(f"<{block.kind}>{html.escape(block.text)}</{block.kind}>")
        elif block.kind == "table":
            parts.append('<div class="wide"><table>')
            parts.append("<thead><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in block.headers)
                         + "</tr></thead>")
            parts.append("<tbody>")
            parts += ["<tr>" + "".join(f"<td>{html.escape(fmt(v))}</td>" for v in row) + "</tr>" for row in block.rows]
            parts.append("</tbody></table></div>")
        elif block.kind == "figure":
            data = base64.b64encode(block.image).decode("ascii")
            parts.append(f'<figure><figcaption>{html.escape(block.text)}</figcaption>'
                         f'<img alt="{html.escape(block.text)}" src="data:image/png;base64,{data}"></figure>')
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)
