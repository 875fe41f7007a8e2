"""What a reviewer reads of a check (:class:`~coharden.check.report.CheckReport`): the terminal summary, a
pull-request comment in Markdown (each surviving wrong fix folded in ``<details>``), SARIF 2.1.0 (each one a
finding on the fix's line it changes, for code-scanning views) and JUnit XML (one case per mutant run). Every
string from the repository (commit subject, paths, test ids, mutant diffs) goes through
:mod:`coharden.escaping` for its format; JSON and XML writers quote the rest."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from coharden.check.report import CheckReport
from coharden.escaping import block_text, html_text, log_value, md_code_block, md_inline, md_line

RULE = "surviving-mutant"
FORMATS = ("text", "markdown", "sarif", "junit", "json")


def laxity_line(report: CheckReport) -> str:
    """The laxity with its interval and what it is measured against, in one plain line."""
    est = report.estimate
    if est is None or est.laxity is None:
        return "laxity: n/a (no admissible mutant)"
    low, high = est.interval or (est.laxity, est.laxity)
    what = ("upper bound: every surviving mutant counted as a wrong fix; --reference gives the laxity"
            if report.upper_bound else f"against the reference {report.reference}")
    unit = "mutant behaviours" if report.counted == "behaviours" else "mutants"
    return (f"laxity {est.laxity:.3f} [{low:.2f}, {high:.2f}] at {est.confidence:g} "
            f"({est.beta} of {est.admissible} plausible {unit} let through; {what}; tau {report.tau:g})")


def verdict_line(report: CheckReport) -> str:
    return (f"fail-to-pass: {'yes' if report.fail_to_pass else 'no'} (parent {report.buggy.outcome.value}, "
            f"fix {report.fixed.outcome.value})")


def runs_line(report: CheckReport) -> str:
    runs = report.runs
    if report.from_store:
        return (f"verdicts: none run, the report of an earlier check of this commit from the store "
                f"({report.seconds:.1f}s; that check: {runs['made']} run, {runs['cached']} from the store, "
                f"{runs['implied']} implied, {report.stored_seconds:.1f}s)")
    return (f"verdicts: {runs['made']} run, {runs['cached']} from the store, {runs['implied']} implied "
            f"({report.seconds:.1f}s)")


def text(report: CheckReport, *, show: int = 5) -> str:
    """The terminal summary: plain text, every value from the repository on its own line escaped."""
    change = report.change
    out = [f"coharden check {log_value(change.rev)}: commit {change.short} {log_value(change.subject)}",
           f"buggy code: {change.base[:12]}; fix: {log_value(', '.join(change.fix_files))}; "
           f"test: {log_value(', '.join(change.test_files))}"]
    if change.docs:
        out.append(f"documentation (not checked): {log_value(', '.join(change.doc_files))}")
    if change.dirty:
        out.append("note: the worktree has uncommitted changes; the commit was checked, your files were left as "
                   "they are and no test saw them")
    out.append(f"tests: {log_value(', '.join(report.test_ids) or '(none found)')}")
    out.append(verdict_line(report))
    if report.problem:
        out.append(log_value(report.problem))
        return "\n".join(out) + "\n"
    out.append(laxity_line(report))
    counts = report.matrix
    if report.upper_bound:
        out.append(f"mutants: {len(report.survivors)} surviving behaviours, {len(report.killed)} rejected, "
                   f"{len(report.inadmissible)} not counted (implausible or not run to an outcome)")
    else:
        out.append("matrix: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    out.append(f"class: {report.test_class.value}{' (of the upper bound)' if report.upper_bound else ''}")
    out.append(runs_line(report))
    out += [f"warning: {log_value(w)}" for w in report.warnings]
    if report.survivors:
        out.append(f"\nwrong fixes the test lets through ({len(report.survivors)}; showing "
                   f"{min(show, len(report.survivors))}; each as its change to the fixed code):")
        for s in report.survivors[:show]:
            more = f" (and {s.same} more of the same behaviour)" if s.same else ""
            out.append(f"{log_value(s.id)} {log_value(s.description)} @ {log_value(s.location)}{more}")
            out.append(block_text(s.change.rstrip("\n")))
    return "\n".join(out) + "\n"


def _md_code(text: object) -> str:
    """``text`` as inline code in Markdown text (its Markdown characters escaped, so it shows as itself)."""
    return f"<code>{md_inline(text)}</code>"


def _html_code(text: object) -> str:
    """``text`` as inline code inside an HTML block (a ``<summary>``: no Markdown is read there)."""
    return f"<code>{html_text(text)}</code>"


def markdown(report: CheckReport) -> str:
    """A pull-request comment: the verdict, the laxity with its interval, each surviving mutant folded (its
    summary line is HTML: GitHub reads no Markdown inside ``<summary>``); notes folded at the end."""
    change = report.change
    bound = " (upper bound)" if report.upper_bound and not report.problem else ""
    out = [f"### coharden check of `{change.short}`: {report.test_class.value}{bound}", ""]
    if change.subject:
        out += [md_line(change.subject), ""]
    ftp = "yes" if report.fail_to_pass else "no"
    does = {"PASS": "passes", "FAIL": "fails"}
    out.append(f"- **Fail-to-pass: {ftp}**: the test {does[report.buggy.outcome.value]} on the parent "
               f"`{change.base[:12]}`, {does[report.fixed.outcome.value]} with the fix"
               if report.buggy.admissible and report.fixed.admissible else
               f"- **Fail-to-pass: {ftp}** ({md_inline(verdict_line(report))})")
    out.append(f"- Test: {', '.join(_md_code(t) for t in report.test_ids) or '(none found)'}")
    out.append(f"- Fix: {', '.join(_md_code(f) for f in change.fix_files)}"
               + (f"; documentation not checked: {', '.join(_md_code(f) for f in change.doc_files)}"
                  if change.docs else ""))
    if report.problem:
        out.append(f"- **{md_inline(report.problem)}**")
        return "\n".join(out) + "\n"
    out.append(f"- {_md_laxity(report)}")
    if not report.upper_bound:
        out.append("- Matrix: " + md_inline(", ".join(f"{k} {v}" for k, v in report.matrix.items())))
    if report.survivors:
        count = len(report.survivors)
        out += ["", f"**{count} plausible wrong fix{'es' if count != 1 else ''} the test lets through** (each "
                "as its change to the fixed code):", ""]
        for s in report.survivors:
            more = f" (and {s.same} more of the same behaviour)" if s.same else ""
            out += ["<details>", f"<summary>{_html_code(s.location)}: {html_text(s.description)}{more} "
                    f"({_html_code(s.id)})</summary>", "", md_code_block(s.change, "diff"), "", "</details>"]
    else:
        out += ["", "No plausible wrong fix got past the test."]
    notes = [md_inline(runs_line(report)), *(md_inline(w) for w in report.warnings)]
    out += ["", "<details>", f"<summary>How it was measured ({len(notes)} note{'s' if len(notes) != 1 else ''})"
            "</summary>", "", *(f"- {n}" for n in notes), "", "</details>"]
    return "\n".join(out) + "\n"


def _md_laxity(report: CheckReport) -> str:
    """The laxity for a reader of the comment: the share, its interval, what it counts and against what."""
    est = report.estimate
    if est is None or est.laxity is None:
        return "Laxity: n/a (no plausible mutant ran to an outcome)"
    low, high = est.interval or (est.laxity, est.laxity)
    unit = "wrong-fix behaviours" if report.counted == "behaviours" else "wrong fixes"
    what = (" An upper bound: without `--reference` every surviving mutant counts as a wrong fix, though one may "
            "be correct." if report.upper_bound else f" Against the reference {_md_code(report.reference)}.")
    return (f"Laxity{' (upper bound)' if report.upper_bound else ''}: **{est.laxity:.2f}** "
            f"({est.confidence:.0%} interval {low:.2f} to {high:.2f}; tau {report.tau:g}): {est.beta} of "
            f"{est.admissible} plausible {unit} pass the test.{what}")


def sarif(report: CheckReport, *, version: str = "") -> str:
    """SARIF 2.1.0: each surviving mutant a result on the fix's line it changes (level ``error`` when the class
    fails the check, else ``warning``); a commit not checked is a failed invocation with its reason."""
    level = "error" if report.test_class.value in ("Lax",) else "warning"
    results = [{
        "ruleId": RULE, "level": level,
        "message": {"text": f"A wrong fix survives the regression test: {s.description} ({s.operator}); the "
                            f"test {', '.join(report.test_ids)} passes with it.\n{s.change}"},
        "locations": [{"physicalLocation": {"artifactLocation": {"uri": s.path, "uriBaseId": "%SRCROOT%"},
                                            "region": {"startLine": s.line}}}],
        "partialFingerprints": {"coharden/mutant": s.id},
        "properties": {"mutant": s.id, "operator": s.operator, "sameBehaviour": s.same},
    } for s in report.survivors]
    invocation: dict = {"executionSuccessful": not report.problem}
    if report.problem:
        invocation["toolExecutionNotifications"] = [{"level": "error", "message": {"text": report.problem}}]
    run = {
        "tool": {"driver": {"name": "coharden", "version": version or "0",
                            "informationUri": "https://github.com/coharden/coharden",
                            "rules": [{"id": RULE, "name": "SurvivingMutant",
                                       "shortDescription": {"text": "A plausible wrong fix passes the regression "
                                                                    "test"},
                                       "help": {"text": "The commit's test accepts this variant of the fix; a test "
                                                        "that checks the fixed behaviour more closely rejects it."}}]}},
        "invocations": [invocation],
        "results": results,
        "properties": {"commit": report.change.head, "class": report.test_class.value, **_numbers(report)},
    }
    return json.dumps({"$schema": "https://json.schemastore.org/sarif-2.1.0.json", "version": "2.1.0",
                       "runs": [run]}, indent=2) + "\n"


def _numbers(report: CheckReport) -> dict:
    data = report.to_json()
    return {k: data[k] for k in ("laxity", "interval", "laxity_is_upper_bound", "fail_to_pass")}


def junit(report: CheckReport, *, fail_on: str = "lax") -> str:
    """JUnit XML: a case for the F->P verdict, one for the class under the ``--fail-on`` policy, one per mutant
    (a surviving one a failure, a rejected one passing, one not counted skipped)."""
    suite = ET.Element("testsuite", name=block_text(f"coharden check {report.change.short}"),
                       time=f"{report.seconds:.3f}")
    cases: list[ET.Element] = []

    def case(classname: str, name: str) -> ET.Element:
        element = ET.SubElement(suite, "testcase", classname=classname, name=block_text(name))
        cases.append(element)
        return element

    ftp = case("coharden.check", "fail-to-pass")
    if not report.fail_to_pass or report.problem:
        ET.SubElement(ftp, "failure", message=block_text(report.problem or verdict_line(report)))
    verdict = case("coharden.check", f"class (--fail-on {fail_on})")
    if report.fails(fail_on):
        ET.SubElement(verdict, "failure", message=block_text(f"{report.test_class.value}: {laxity_line(report)}"))
    for s in report.survivors:
        failure = ET.SubElement(case("coharden.mutants", s.id), "failure",
                                message=block_text(f"wrong fix survives: {s.description} at {s.location}"))
        failure.text = block_text(s.change)
    for mutant in report.killed:
        case("coharden.mutants", mutant)
    for mutant, why in report.inadmissible.items():
        ET.SubElement(case("coharden.mutants", mutant), "skipped", message=block_text(why))
    suite.set("tests", str(len(cases)))
    suite.set("failures", str(sum(1 for c in cases if c.find("failure") is not None)))
    suite.set("skipped", str(sum(1 for c in cases if c.find("skipped") is not None)))
    suite.set("errors", "0")
    root = ET.Element("testsuites")
    root.append(suite)
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=True) + "\n"


def render(report: CheckReport, fmt: str, *, fail_on: str = "lax", version: str = "") -> str:
    if fmt == "markdown":
        return markdown(report)
    if fmt == "sarif":
        return sarif(report, version=version)
    if fmt == "junit":
        return junit(report, fail_on=fail_on)
    if fmt == "json":
        return json.dumps(report.to_json(), indent=2, sort_keys=True) + "\n"
    return text(report)
