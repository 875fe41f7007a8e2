"""The laxity table's report: Markdown and a laxity histogram figure, regenerated from the dataset
alone (:mod:`coharden.study.table_summary` computes the numbers; nothing runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.analysis import figures
from coharden.errors import CoHardenError
from coharden.escaping import md_cell
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study.summary import LAXITY_EDGES
from coharden.study.table import latest_rows
from coharden.study.table_summary import F2P_CLASSES, PLOT_EDGES, SCALING_CORES, summarize_table

REPORT = "table_report.md"
SUMMARY = "table_summary.json"
FIGURE = "table_laxity.png"

STATUS_MEANING = {
    "graded": "MPE ran: the class, the laxity with its interval",
    "invalid": "the test does not apply, touches no test file, adds no test, or does not run (Invalid)",
    "needs_network": "the test fails on the fixed code only where it reaches for the network, which test runs "
                     "here do not have: not graded (neither F->P nor not; left out of the shares and agreement)",
    "no_prediction": "the system has no test for an instance of its benchmark",
    "golden_not_f2p": "the golden test is not fail-to-pass here although the environment check verified it",
    "harness_error": "a verdict was a harness error (the runner failed, not the code); a rerun retries it",
    "env_error": "this run could not build the instance's environment; a rerun retries it",
    "error": "the step failed with the error given in the row",
    "pending": "not run yet (resume the command)",
    "env_unverified": "the environment check did not verify the golden test here (its reason in the row)",
    "unchecked": "not in the environment check",
    "unreachable": "no clone of the repository under --repos",
}


def share_cell(entry: dict[str, Any] | None, interval: bool = True) -> str:
    """``k/n (p %) [lo, hi]`` of a share (``hits`` of ``total``, an optional ``interval``: the table's
    :func:`~coharden.study.table_summary.share`, the validity study's shares); ``-`` when n is 0."""
    if not entry or not entry["total"]:
        return "-"
    text = f"{entry['hits']}/{entry['total']} ({entry['hits'] / entry['total']:.0%})"
    if interval and entry.get("interval"):
        low, high = entry["interval"]
        text += f" [{low:.0%}, {high:.0%}]"
    return text


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _duration(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return md_cell(v)

    return ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|",
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


def _class_row(entry: dict[str, Any]) -> list[str]:
    return [str(entry["predictions"]), str(entry["evaluated"]), share_cell(entry["fail_to_pass"]),
            *(share_cell(entry["shares"][c]) for c in ("Rigorous", "Borderline", "Lax", "Misaligned")),
            ", ".join(f"{c} {entry['classes'][c]}" for c in ("Inconclusive", "NotReproducing", "Invalid")
                      if entry["classes"][c]) or "-"]


CLASS_HEADER = ["predictions", "evaluated", "F->P of evaluated", "Rigorous of F->P", "Borderline of F->P",
                "Lax of F->P", "Misaligned of evaluated", "other classes"]


def render(summary: dict[str, Any], figure: str | None, dataset: str) -> str:
    out = ["# The laxity table of public test generators", "",
           f"Generated from `{dataset}` alone ({summary['rows']} rows, one per (instance, system); the last row "
           "of a pair wins). Every number below is a share with its exact 95 % (Clopper-Pearson) interval. "
           "Rigorous / Borderline / Lax are shares of the F->P tests, Misaligned and the other classes shares of "
           "the evaluated tests (a prediction tried on an instance whose golden test is F->P here).", ""]
    out += _coverage_section(summary)
    out += _systems_section(summary["systems"])
    out += _histogram_section(summary["systems"], figure)
    out += _repository_section(summary["per_repo"])
    if summary.get("assertflip"):
        out += _assertflip_section(summary["assertflip"])
    if summary.get("pool"):
        out += _pool_section(summary["pool"])
    out += _scaling_section(summary["scaling"])
    out += _configuration_section(summary)
    return "\n".join(out)


def _coverage_section(summary: dict[str, Any]) -> list[str]:
    cov = summary["coverage"]
    allc = cov["all"]
    out = ["## Coverage", "",
           f"**The dataset covers {allc['done']} of {allc['reachable']} reachable instances** ({allc['instances']} "
           f"in the systems' benchmarks; {allc['checked']} in the environment check, {allc['verified']} verified "
           f"there; {allc['pending']} still pending, {allc['env_error']} with an environment error and "
           f"{allc['harness_error']} with a harness error, which a rerun retries). Rows by status: "
           + ", ".join(f"{k} {v}" for k, v in sorted(summary["statuses"].items())) + ".", ""]
    out += _table(["repository", "instances", "reachable", "checked", "verified", "done", "pending",
                   "env error", "harness error"],
                  [[repo, c["instances"], c["reachable"], c["checked"], c["verified"], c["done"], c["pending"],
                    c["env_error"], c["harness_error"]] for repo, c in cov["per_repo"].items()])
    out += _table(["benchmark", "instances", "reachable", "verified", "done"],
                  [[b, c["instances"], c["reachable"], c["verified"], c["done"]]
                   for b, c in cov["per_benchmark"].items()])
    out += ["What a row's status means:", ""] + [f"- `{k}`: {v}" for k, v in STATUS_MEANING.items()
                                                 if k in summary["statuses"]] + [""]
    return out


def _pool_section(pool: dict[str, Any]) -> list[str]:
    def spread(entry: dict[str, Any] | None) -> str:
        return f"{entry['median']:g} ({entry['min']} to {entry['max']})" if entry else "not measured"

    reasons = ", ".join(f"`{k}` {v}" for k, v in sorted(pool["undecided"].items())) or "none"
    counted = ", ".join(f"{k} {v}" for k, v in sorted(pool["counted"].items()))
    return ["## The mutant pool", "",
            f"Over the {pool['tests']} F->P tests of {pool['instances']} instances (every system), per test: "
            f"admissible mutants {spread(pool['admissible'])} (plausible ones only on the "
            f"{pool['plausibility_measured']} tests whose pool measured plausibility), distinct behaviours "
            f"{spread(pool['behaviours'])}, implausible mutants left out {spread(pool['implausible'])}, pool "
            f"{spread(pool['pool'])} (median, range). A test that rejects every admissible unit is Rigorous only "
            f"when it rejected at least {pool['deciding_pool']} (the interval's upper end below tau "
            f"{pool['tau']}); laxity counted over {counted}. Borderline "
            f"{share_cell(pool['borderline'])}; why each stayed undecided: {reasons}.", ""]


def _systems_section(systems: dict[str, Any]) -> list[str]:
    out = ["## Per system", ""]
    out += _table(["system", "benchmark", *CLASS_HEADER],
                  [[s, e["benchmark"], *_class_row(e)] for s, e in systems.items()])
    out += ["Why predictions were not evaluated, and why tests are Invalid:", ""]
    for s, e in systems.items():
        parts = [f"{k} {v}" for k, v in sorted(e["not_evaluated"].items())]
        kinds = [f"{k} {v}" for k, v in sorted(e["invalid_kinds"].items())]
        out.append(f"- {s}: not evaluated: {', '.join(parts) or 'none'}; Invalid: {', '.join(kinds) or 'none'}; "
                   f"median laxity of F->P tests {_num(e['laxity_median'])}, median mutants drawn "
                   f"{_num(e['drawn_median'], 0)}, admissible {_num(e['admissible_median'], 0)}")
    out.append("")
    return out


def _histogram_section(systems: dict[str, Any], figure: str | None) -> list[str]:
    bins = [f"[{lo:.2f}, {hi:.2f}{']' if i == len(LAXITY_EDGES) - 2 else ')'}"
            for i, (lo, hi) in enumerate(zip(LAXITY_EDGES, LAXITY_EDGES[1:], strict=False))]
    out = ["## Laxity of the F->P tests", ""]
    if figure:
        out += [f"![laxity histogram per system]({figure})", ""]
    histogram = [[s, c, *e["laxity_histogram"][c]] for s, e in systems.items() for c in F2P_CLASSES[:3]
                 if any(e["laxity_histogram"][c])]
    out += _table(["system", "class", *bins], histogram) if histogram else ["No F->P test with a laxity yet.", ""]
    return out


def _repository_section(per_repo_summary: dict[str, Any]) -> list[str]:
    out = ["## Per repository", "", "Repositories with an evaluated test (the others: the coverage table).", ""]
    per_repo = [[repo, s, *_class_row(e)] for repo, per in per_repo_summary.items() for s, e in per.items()
                if e["evaluated"]]
    out += _table(["repository", "system", *CLASS_HEADER], per_repo) if per_repo else ["None yet.", ""]
    return out


def _assertflip_section(af: dict[str, Any]) -> list[str]:
    """coharden's F->P against AssertFlip's published report, and the Lax share against the paper's."""
    agreement, lax = af["agreement"], af["lax"]
    conf = agreement["confusion"]
    out = ["## Agreement with AssertFlip's published SWT-bench report", "",
           f"Per instance, coharden's F->P against the SWT-bench harness's resolved flag in AssertFlip's "
           f"published report ({agreement['published']} AssertFlip instances in it): "
           f"**{share_cell(agreement['agree'])}** agree on the {agreement['compared']} instances both evaluated "
           f"(goal: >= 97 %). Both F->P {conf['both']}, coharden only {conf['ours_only']}, the report only "
           f"{conf['theirs_only']}, neither {conf['neither']}. Not compared: "
           + (", ".join(f"{k} {v}" for k, v in sorted(agreement["not_compared"].items())) or "none") + ".", ""]
    if agreement["disagreements"]:
        out += _table(["instance", "coharden", "published", "why (coharden's row)"],
                      [[d["instance_id"], d["ours"], d["theirs"], d["reason"][:300]]
                       for d in agreement["disagreements"]])
    paper = lax["paper"]
    out += ["### The Lax share of AssertFlip's F->P tests", "",
            "The paper (its Table 7) calls 121 of AssertFlip's 198 F->P tests Lax "
            f"({share_cell(paper)}), with LLM mutants and the point rule (laxity >= tau). Its 198 tests' instances "
            "are not in the data directory, so the comparison below is on coharden's instances, not the same "
            "set; the second row keeps the instances the published report also calls F->P (189 resolved "
            "there, the nearest stand-in for the paper's set).", ""]
    rows = []
    for name, entry in (("every F->P test here", lax["here"]),
                        ("F->P here and in the published report", lax["published_f2p"])):
        rows.append([name, entry["n"], share_cell(entry["lax"]), share_cell(entry["lax_or_borderline"]),
                     share_cell(entry["point_rule"]) + f" (tau {entry['tau']})", share_cell(paper)])
    out += _table(["AssertFlip tests", "F->P", "Lax (interval class)", "Lax or Borderline",
                   "laxity >= tau (the paper's rule)", "paper"], rows)
    return out


def _scaling_section(scale: dict[str, Any]) -> list[str]:
    out = ["## Cost and scaling", ""]
    if scale["estimate_core_seconds"] is None:
        return out + ["No graded pair yet: no cost to scale from.", ""]
    hours = ", ".join(f"{c} cores {_duration(scale['hours_on'][c] * 3600)}" for c in SCALING_CORES)
    out += [f"On paper: {scale['pairs']} (instance, system) pairs with a prediction on instances that can "
            f"run here (of {scale['all_pairs']} with a prediction in all) x the median cost of one graded F->P "
            f"pair ({_num(scale['pair_median_core_seconds'], 1)} core-seconds: the MPE step's wall time x its "
            f"workers) + {scale['instances']} golden checks x their median "
            f"({_num(scale['verify_median_seconds'], 1)} s) = {_duration(scale['estimate_core_seconds'])} of "
            f"one core: {hours}; one hour needs about {max(1, round(scale['cores_for_one_hour']))} cores "
            f"(`--executor ray`, one job per instance). Measured so far: {scale['measured_pairs']} evaluated "
            f"pairs and their golden checks took {_duration(scale['measured_core_seconds'])} of one core. The "
            "estimate errs high where tests are Invalid or not F->P (they cost next to nothing) and leaves out "
            "building each repository version's environment once per node; the first system graded on an "
            "instance pays the reference test's runs on the mutants, later ones reuse them.", ""]
    return out


def _configuration_section(summary: dict[str, Any]) -> list[str]:
    out = ["## Configuration", ""]
    for key, entry in summary["configs"].items():
        shown = ", ".join(f"{k} {v}" for k, v in entry["config"].items() if k != "key")
        out.append(f"- `{key}` ({entry['rows']} rows): {shown}")
    out.append("- coharden: " + ", ".join(f"{k} ({v} rows)" for k, v in summary["versions"].items()))
    out.append("")
    return out


def plot(summary: dict[str, Any], path: Path) -> bool:
    """Laxity histograms of the F->P tests, one panel per system, stacked by class; False without matplotlib
    or without a F->P test."""
    systems = {s: e for s, e in summary["systems"].items()
               if any(sum(v) for v in e["laxity_plot_histogram"].values())}
    if not systems:
        return False
    try:
        fig = figures.figure(2.6 * len(systems) + 0.8, 2.8, layout="constrained")
    except CoHardenError:
        return False
    axes = fig.subplots(1, len(systems), sharey=True, squeeze=False)[0]
    lefts = list(PLOT_EDGES[:-1])
    widths = [hi - lo for lo, hi in zip(PLOT_EDGES, PLOT_EDGES[1:], strict=False)]
    tops: list[float] = []
    for ax, (system, entry) in zip(axes, systems.items(), strict=True):
        bottom = [0.0] * len(lefts)
        for name in F2P_CLASSES[:3]:
            counts = entry["laxity_plot_histogram"][name]
            ax.bar(lefts, counts, width=widths, bottom=bottom, align="edge", label=name,
                   color=figures.CLASS_COLORS.get(name), hatch=figures.CLASS_HATCHES.get(name),
                   edgecolor="#5d4037", linewidth=0.4)
            bottom = [b + c for b, c in zip(bottom, counts, strict=True)]
        tops.append(max(bottom))
        ax.axvline(summary_tau(summary), color="grey", linestyle="--", linewidth=1)
        ax.set_title(system, fontsize=9)
        ax.set_xlabel("laxity")
        ax.set_xlim(0, 1)
        figures.integer_axis(ax.yaxis)
    figures.shared_count_limit(axes, tops)
    axes[0].set_ylabel("F->P tests")
    axes[-1].legend(fontsize=7, frameon=False)
    figures.save(fig, path, dpi=120)
    return True


def summary_tau(summary: dict[str, Any]) -> float:
    taus = [entry["config"].get("tau") for entry in summary["configs"].values() if entry["config"].get("tau")]
    return float(taus[0]) if taus else PAPER_TAU


def write_table_report(dataset: Path, output: Path) -> dict[str, Any]:
    """Write ``table_report.md``, ``table_summary.json`` and the figure into ``output`` from ``dataset``."""
    rows = latest_rows(dataset)
    if not rows:
        raise CoHardenError(f"{dataset}: no rows (make the table first: coharden study table ...)")
    output.mkdir(parents=True, exist_ok=True)
    summary = summarize_table(rows)
    made = plot(summary, output / FIGURE)
    try:
        shown = str(dataset.resolve().relative_to(output.resolve()))
    except ValueError:
        shown = dataset.name
    (output / REPORT).write_text(render(summary, FIGURE if made else None, shown) + "\n")
    (output / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    return summary

