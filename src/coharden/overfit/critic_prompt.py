"""The critic's prompt and its reply, for :mod:`coharden.overfit.refine`: what one critic call shows (the two
execution logs, the focal functions, the test, and with ``extra_context`` the issue, whole files and the changed
lines the test misses) and how its reply is read (a JSON decision naming the side it changes, then SEARCH/REPLACE
blocks applied to the files it was shown)."""

from __future__ import annotations

import ast
import json
import re
from typing import Literal

from coharden import pysource
from coharden.mutation.context import FileChange, functions_touched
from coharden.mutation.llm_edits import EditFormatError, apply_edit_blocks, parse_edit_blocks
from coharden.overfit.pair import PairState
from coharden.overfit.refine_config import RefineConfig
from coharden.overfit.reward import PairEvaluation
from coharden.schema.instance import Instance

Side = Literal["focal", "test", "both"]
SIDES: tuple[str, ...] = ("focal", "test", "both")


# --- the prompt ------------------------------------------------------------------------------------------------

SYSTEM_PROMPT = """\
You are a critic of a bug fix and of the reproduction test written for it. A good pair has a test that FAILS on \
the old (buggy) code, PASSES on the new (fixed) code, and runs every line the fix changes. You decide what to \
change to get there: the focal code (the functions the fix modifies), the test, or both. Either side may be \
wrong: the fix may be incomplete or incorrect, the test may check the wrong thing or not reach the fix.

Reply with:
1. one JSON object on its own line saying which side you change: {"change": "focal"} or {"change": "test"} \
or {"change": "both"};
2. one or more SEARCH/REPLACE blocks editing only the files of that side. Each block names its file on the line \
above it; the SEARCH part must copy whole lines of the current file exactly (it must occur once), the REPLACE \
part holds the lines that replace them:

path/to/file.py
<<<<<<< SEARCH
exact current lines
=======
new lines
>>>>>>> REPLACE

Write nothing after the last block except an optional `Summary: ...` line."""


def _fenced(text: str, lang: str = "") -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text if text.endswith(chr(10)) or not text else text + chr(10)}{fence}"


def _function_source(source: str, qualname: str) -> tuple[int, int] | None:
    """1-based inclusive line span (decorators included) of the function ``qualname`` in ``source``."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return None

    def walk(body: list[ast.stmt], prefix: str) -> tuple[int, int] | None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{node.name}"
                if name == qualname and not isinstance(node, ast.ClassDef):
                    start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                    return start, node.end_lineno or node.lineno
                found = walk(node.body, name + ".")
                if found:
                    return found
        return None

    return walk(tree.body, "")


def focal_code(changes: list[FileChange], whole_file_lines: int = 400) -> str:
    """The functions the fix modifies, in the current (fixed) files; a file whose changes lie outside every
    function is shown whole (or, when long, around the changed lines)."""
    parts: list[str] = []
    for change in changes:
        lines = change.new_lines
        names = functions_touched(change) if change.path.endswith(".py") else []
        spans = [s for s in (_function_source(change.new, n) for n in names) if s]
        inside = {n for s, e in spans for n in range(s, e + 1)}
        outside = [n for n in change.added_lines() if n not in inside]
        parts.append(f"## {change.path}")
        if not spans or outside:
            if len(lines) <= whole_file_lines:
                spans = [(1, max(1, len(lines)))]
            else:
                around = sorted({*outside, *(n for s, _ in spans for n in (s,))}) or [1]
                spans = sorted({(max(1, n - 20), min(len(lines), n + 20)) for n in around} | set(spans))
        for start, end in _merge(spans):
            parts.append(f"lines {start}-{end}:")
            parts.append(_fenced("".join(lines[start - 1:end]), "python" if change.path.endswith(".py") else ""))
    return "\n\n".join(parts)


def _merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _verdict_text(evaluation: PairEvaluation, where: Literal["old", "new"], hide_test: bool) -> str:
    verdict = evaluation.old if where == "old" else evaluation.new
    label = "old (buggy) code" if where == "old" else "new (fixed) code"
    if verdict is None:
        return f"### On the {label}\nnot run: {evaluation.reason}"
    flag = {"PASS": "PASSES", "FAIL": "FAILS"}.get(verdict.outcome.value, f"does not run ({verdict.outcome.value})")
    if hide_test:
        return f"### On the {label}\nThe test {flag}."
    log = verdict.output_tail.strip() or "(no output)"
    reason = f"\nReason: {verdict.reason}" if verdict.reason else ""
    return f"### On the {label}\nThe test {flag}.{reason}\n{_fenced(log, 'text')}"


def _coverage_text(evaluation: PairEvaluation, files: dict[str, tuple[str, str]]) -> str:
    cov = evaluation.coverage
    if cov is None or not cov.total:
        return ""
    lines = [f"The test runs {cov.covered} of the {cov.total} executable lines the fix changes."]
    for path, missed in cov.missed().items():
        old, new = files.get(path, ("", ""))
        for side, numbers, text in (("old", missed["old"], old), ("new", missed["new"], new)):
            source = text.splitlines()
            for n in numbers:
                if 1 <= n <= len(source):
                    lines.append(f"- not run on the {side} code: {path}:{n}: {source[n - 1].strip()}")
    return "\n".join(lines)


def build_messages(instance: Instance, evaluation: PairEvaluation, pair: PairState, config: RefineConfig,
                   previous: str = "") -> list[dict[str, str]]:
    """The chat messages of one critic call on ``pair`` (its fix's changes, its test files and patch; see the
    module docstring for what each variant shows)."""
    fix_changes, test_files, test_patch = pair.changes(), pair.test_files, pair.test
    sections: list[str] = []
    if config.extra_context and instance.problem_statement.strip():
        sections.append(f"# Issue\n\n{instance.problem_statement.strip()}")
    sections.append("# Focal code (the functions the fix modifies, as fixed)\n\n"
                    + focal_code(fix_changes, config.whole_file_lines))
    if config.extra_context:
        whole = [f"## {c.path}\n\n{_fenced(c.new, 'python' if c.path.endswith('.py') else '')}" for c in fix_changes
                 if len(c.new_lines) <= config.whole_file_lines]
        if whole:
            sections.append("# The files of the fix, whole (as fixed)\n\n" + "\n\n".join(whole))
    if config.hide_test:
        sections.append("# The test\n\nThe test is hidden from you; you only see whether it passes. Change the "
                        "focal code only (decision \"focal\").")
    else:
        shown: list[str] = []
        for path, content in sorted(test_files.items()):
            if len(content.splitlines()) <= config.whole_file_lines:
                shown += [f"## {path}", _fenced(content, "python")]
        if not shown:
            shown = ["(the test files are long; the test patch:)", _fenced(test_patch, "diff")]
        sections.append("# The test\n\n" + "\n\n".join(shown))
    sections.append("# Execution\n\n" + "\n\n".join([_verdict_text(evaluation, "old", config.hide_test),
                                                    _verdict_text(evaluation, "new", config.hide_test)]))
    if config.extra_context:
        coverage = _coverage_text(evaluation, {c.path: (c.old, c.new) for c in fix_changes})
        if coverage:
            sections.append("# Coverage of the changed lines\n\n" + coverage)
    if previous:
        sections.append("# Your previous proposal\n\n" + previous)
    editable = [c.path for c in fix_changes] + ([] if config.hide_test else sorted(test_files))
    sections.append("# Your answer\n\nFiles you may edit: " + ", ".join(f"`{p}`" for p in editable)
                    + ". First the JSON decision, then the SEARCH/REPLACE blocks.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(sections) + "\n"}]


# --- the reply -----------------------------------------------------------------------------------------------------

class ReplyError(ValueError):
    """A reply that cannot be used (recorded as an invalid iteration)."""


_DECISION = re.compile(r"\{[^{}]*\"change\"[^{}]*\}")


def parse_decision(reply: str) -> Side:
    """The ``{"change": ...}`` decision of a reply (the first JSON object holding a ``change`` key)."""
    for match in _DECISION.finditer(reply):
        try:
            data = json.loads(match.group(0))
        except json.JSONDecodeError:
            continue
        value = str(data.get("change", "")).strip().lower()
        if value in SIDES:
            return value  # type: ignore[return-value]
        raise ReplyError(f"decision {data.get('change')!r} is not one of focal, test, both")
    raise ReplyError('no JSON decision {"change": "focal" | "test" | "both"} in the reply')


def apply_reply(reply: str, fix_files: dict[str, str], test_files: dict[str, str], *,
                hide_test: bool = False) -> tuple[Side, Side, dict[str, str], dict[str, str]]:
    """(decision, side changed, new fix files, new test files). Raises :class:`ReplyError`."""
    decision = parse_decision(reply)
    if hide_test and decision != "focal":
        raise ReplyError(f"the test is hidden: only the focal code may change, the decision was {decision!r}")
    try:
        blocks, _ = parse_edit_blocks(reply)
        editable = {**fix_files, **({} if hide_test else test_files)}
        edited, _ = apply_edit_blocks(blocks, editable, test_patterns=())
    except EditFormatError as exc:
        raise ReplyError(f"{exc.reason}: {exc.detail}") from exc
    new_fix = {p: edited[p] for p in fix_files}
    new_test = {p: edited[p] for p in test_files} if not hide_test else dict(test_files)
    focal_changed = new_fix != fix_files
    test_changed = new_test != test_files
    if not focal_changed and not test_changed:
        raise ReplyError("the edits change nothing")
    changed: Side = "both" if focal_changed and test_changed else ("focal" if focal_changed else "test")
    if decision != "both" and changed != decision:
        raise ReplyError(f"the decision was {decision!r} but the edits change the {changed} side")
    return decision, changed, new_fix, new_test
