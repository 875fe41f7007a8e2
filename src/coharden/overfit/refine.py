"""Reward-guided refinement of a (fix, test) pair by an LLM critic.

Start from a fix and a test. While the test is not F->P on (old code, new code) and fewer than
``max_iterations`` critic calls were made:

1. show the critic the two execution logs (the test on the old and on the new code), the focal functions the
   current fix modifies, and the test; with ``extra_context`` also the issue, the fix's files whole (when
   short: an incomplete fix may need a change outside the functions it touched) and which changed lines the
   test does not run;
2. the critic answers with a JSON decision ``{"change": "focal" | "test" | "both"}`` and SEARCH/REPLACE
   blocks (the format of :mod:`coharden.mutation.llm_operators`) against the files it was shown;
3. the edited pair is run (real verdicts, real coverage) and kept only if its reward
   (:mod:`coharden.overfit.reward`) is strictly higher than the current pair's.

Every iteration is recorded with the side that was changed (``focal`` / ``test`` / ``both``) and whether it
was kept. A reply that cannot be used (no decision, malformed blocks, a SEARCH text that does not match, edits
outside the sides the decision names, no change at all) is recorded as ``invalid`` and the loop goes on; it
counts towards the cap. A truncated or withheld reply, a budget refusal or any other LLM error stops the loop
(fail closed) and is reported as the stop reason; the pair kept so far is the result.

Variants: ``hide_test`` shows the critic the test's pass/fail flags only (no test code, no logs) and lets it
change the focal code only; ``extra_context=False`` leaves out the issue text, the whole files and the coverage
feedback.

The golden test and the golden fix are never shown to the critic and never run here.
"""

from __future__ import annotations

import ast
import copy
import json
import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from coharden import pysource
from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import resolve_repo
from coharden.llm import Completion, LLMClient, LLMError, failure_of
from coharden.mutation.context import FileChange, functions_touched
from coharden.mutation.llm_operators import EditFormatError, apply_edit_blocks, parse_edit_blocks
from coharden.overfit.coverage import Backend
from coharden.overfit.reward import PairEvaluation, RewardError, check_backend, coverage_settings, evaluate_pair
from coharden.patches import make_patch, split_patch, touched_files
from coharden.schema.instance import Instance

Side = Literal["focal", "test", "both"]
SIDES: tuple[str, ...] = ("focal", "test", "both")
MAX_ITERATIONS = 15

STOP_FAIL_TO_PASS = "fail_to_pass"
STOP_MAX_ITERATIONS = "max_iterations"
STOP_ERROR = "error"
"""Stop reasons besides an LLM failure's kind (a :class:`~coharden.llm.ErrorKind` value: truncated, cost_cap,
...)."""


class RefineConfig(BaseModel):
    """How the refinement loop runs."""

    max_iterations: int = Field(default=MAX_ITERATIONS, ge=0, le=MAX_ITERATIONS)
    """Critic calls at most (the issue's cap is 15)."""
    hide_test: bool = False
    """The critic sees the test's pass/fail flags only and may change the focal code only."""
    extra_context: bool = True
    """Show the issue text, the fix's files whole (when short) and which changed lines the test misses."""
    backend: Backend = "coverage"
    whole_file_lines: int = 400
    """Test files (and fix files with module-level changes) up to this length are shown whole."""


class IterationRecord(BaseModel):
    """One critic call and what came of it (one line of ``iterations.jsonl``)."""

    run: str
    instance: str
    iteration: int
    """1-based."""
    status: Literal["kept", "rejected", "invalid", "stopped"]
    """kept: higher reward, the new pair; rejected: not higher, discarded; invalid: unusable reply; stopped:
    the call failed (truncated / LLM error) and the loop stopped."""
    decision: str | None = None
    """The critic's JSON decision (focal / test / both)."""
    changed: str | None = None
    """The side the applied edits actually changed (focal / test / both)."""
    reason: str = ""
    reward_before: float
    reward_after: float | None = None
    before: dict[str, Any] = Field(default_factory=dict)
    after: dict[str, Any] | None = None
    fix_patch: str | None = None
    """The candidate fix (only when the focal side changed)."""
    test_patch: str | None = None
    """The candidate test (only when the test side changed)."""
    request_hash: str | None = None
    tokens: int = 0
    usd: float = 0.0
    variant: dict[str, Any] = Field(default_factory=dict)


class RefineResult(BaseModel):
    """The outcome of refining one instance's pair."""

    run: str
    instance: str
    stop_reason: str
    error: str | None = None
    iterations: int = 0
    initial_fix: str
    initial_test: str
    fix: str
    test: str
    initial: dict[str, Any] = Field(default_factory=dict)
    final: dict[str, Any] = Field(default_factory=dict)
    changed: dict[str, int] = Field(default_factory=dict)
    """How many KEPT iterations changed each side."""
    attempted: dict[str, int] = Field(default_factory=dict)
    """How many usable proposals (kept or not) changed each side."""
    tokens: int = 0
    usd: float = 0.0
    records: list[IterationRecord] = Field(default_factory=list, exclude=True)


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


def build_messages(instance: Instance, evaluation: PairEvaluation, fix_changes: list[FileChange],
                   test_files: dict[str, str], test_patch: str, config: RefineConfig,
                   previous: str = "") -> list[dict[str, str]]:
    """The chat messages of one critic call (see the module docstring for what each variant shows)."""
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


# --- the loop --------------------------------------------------------------------------------------------------

class PairState:
    """A pair as whole files: the files the fix and the test leave behind (what the critic may edit), their base
    content, and the files each side deletes (still deleted when a side's patch is rebuilt after an edit)."""

    def __init__(self, executor: InstanceExecutor, fix: str, test: str) -> None:
        self.fix, self.test = fix, test
        self.base: dict[str, str | None] = {}
        self.fix_files, self.fix_deleted = self._files(executor, fix)
        self.test_files, self.test_deleted = self._files(executor, test)

    def _files(self, executor: InstanceExecutor, patch: str) -> tuple[dict[str, str], list[str]]:
        post = executor.post_images(patch) if patch.strip() else {}
        files: dict[str, str] = {}
        deleted: list[str] = []
        for path in touched_files(patch):
            self.base[path] = executor.base_file(path)
            if post.get(path) is None:
                deleted.append(path)
            else:
                files[path] = post[path] or ""
        return files, deleted

    def changes(self) -> list[FileChange]:
        return [FileChange(p, self.base.get(p) or "", c) for p, c in sorted(self.fix_files.items())]

    def _patch(self, files: dict[str, str], deleted: list[str]) -> str:
        return make_patch([*((p, self.base.get(p), c) for p, c in files.items()),
                           *((p, self.base.get(p), None) for p in deleted)])

    def with_edits(self, fix_files: dict[str, str], test_files: dict[str, str]) -> PairState:
        """A new state with these file contents; an unchanged side keeps its patch text byte for byte (so its
        cached verdicts and coverage runs are reused)."""
        clone = copy.copy(self)
        clone.fix_files, clone.test_files = fix_files, test_files
        if fix_files != self.fix_files:
            clone.fix = self._patch(fix_files, self.fix_deleted)
        if test_files != self.test_files:
            clone.test = self._patch(test_files, self.test_deleted)
        return clone


def split_pair(fix: str, test: str, test_patterns: list[str]) -> tuple[str, str]:
    """The source part of ``fix`` and the test part of ``test`` (the other parts are dropped)."""
    source, _ = split_patch(fix, test_patterns) if fix.strip() else ("", "")
    _, tests = split_patch(test, test_patterns) if test.strip() else ("", "")
    return source, tests


def refine_pair(executor: InstanceExecutor, client: LLMClient, fix: str, test: str, config: RefineConfig, *,
                run: str = "overfit-refine", on_iteration: Callable[[IterationRecord], None] | None = None
                ) -> RefineResult:
    """Refine one (fix, test) pair on ``executor``'s instance (see the module docstring)."""
    instance = executor.instance
    fix, test = split_pair(fix, test, executor.settings.test_patterns)
    result = RefineResult(run=run, instance=instance.instance_id, stop_reason=STOP_ERROR, initial_fix=fix,
                          initial_test=test, fix=fix, test=test)
    variant = {"hide_test": config.hide_test, "extra_context": config.extra_context}
    evaluations: dict[tuple[str, str], PairEvaluation] = {}

    def evaluate(state: PairState) -> PairEvaluation:
        key = (state.fix, state.test)
        if key not in evaluations:
            evaluations[key] = evaluate_pair(executor, state.fix, state.test, backend=config.backend)
        return evaluations[key]

    try:
        state = PairState(executor, fix, test)
        current = evaluate(state)
    except CoHardenError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.initial = result.final = current.summary()
    previous = ""
    sides: Counter[str] = Counter()
    attempted: Counter[str] = Counter()
    while True:
        if current.fail_to_pass:
            result.stop_reason = STOP_FAIL_TO_PASS
            break
        if result.iterations >= config.max_iterations:
            result.stop_reason = STOP_MAX_ITERATIONS
            break
        result.iterations += 1
        record = IterationRecord(run=run, instance=instance.instance_id, iteration=result.iterations,
                                 status="invalid", reward_before=current.reward, before=current.summary(),
                                 variant=variant)
        messages = build_messages(instance, current, state.changes(), state.test_files, state.test, config,
                                  previous)
        completion = _ask(client, messages, instance.instance_id, result, record)
        if completion is None:
            _finish_record(result, record, on_iteration)
            break
        try:
            decision, changed, new_fix, new_test = apply_reply(completion.content, state.fix_files,
                                                               state.test_files, hide_test=config.hide_test)
        except ReplyError as exc:
            record.reason = str(exc)
            previous = f"Your previous reply could not be used: {exc}. The pair below is unchanged."
            _finish_record(result, record, on_iteration)
            continue
        record.decision, record.changed = decision, changed
        attempted[changed] += 1
        candidate_state = state.with_edits(new_fix, new_test)
        if changed in ("focal", "both"):
            record.fix_patch = candidate_state.fix
        if changed in ("test", "both"):
            record.test_patch = candidate_state.test
        try:
            candidate = evaluate(candidate_state)
        except RewardError as exc:  # a harness problem: stop, the pair kept so far stands
            record.status, record.reason = "stopped", str(exc)
            result.stop_reason, result.error = STOP_ERROR, str(exc)
            _finish_record(result, record, on_iteration)
            break
        previous = _judge(record, current, candidate, changed)
        if record.status == "kept":
            state, current = candidate_state, candidate
            sides[changed] += 1
        _finish_record(result, record, on_iteration)
    result.fix, result.test = state.fix, state.test
    result.final = current.summary()
    result.changed = {s: sides.get(s, 0) for s in SIDES}
    result.attempted = {s: attempted.get(s, 0) for s in SIDES}
    return result


def _ask(client: LLMClient, messages: list[dict[str, str]], instance_id: str, result: RefineResult,
         record: IterationRecord) -> Completion | None:
    """The model's reply for this iteration, its request and cost on ``record``; None when the model failed
    (the record says how, and the result stops with the failure's kind)."""
    try:
        completion = client.complete(messages, instance_id=instance_id, sample_index=result.iterations - 1)
    except LLMError as exc:
        failed = failure_of(exc)
        record.status, record.reason = "stopped", f"{failed.error}: {failed.message}"
        if failed.completion is not None:
            record.request_hash = failed.completion.request_hash
            record.tokens, record.usd = failed.completion.total_tokens, failed.completion.cost_usd
        result.stop_reason, result.error = failed.kind.value, record.reason  # an ErrorKind value
        return None
    record.request_hash, record.tokens, record.usd = (completion.request_hash, completion.total_tokens,
                                                      completion.cost_usd)
    return completion


def _judge(record: IterationRecord, current: PairEvaluation, candidate: PairEvaluation, changed: str) -> str:
    """Keep the candidate pair only when its reward is higher (``record.status`` says which); the note for the
    next prompt ('' when kept)."""
    record.reward_after, record.after = candidate.reward, candidate.summary()
    if candidate.reward > current.reward:
        record.status = "kept"
        record.reason = f"reward {current.reward:.4f} -> {candidate.reward:.4f}"
        return ""
    record.status = "rejected"
    record.reason = f"reward {candidate.reward:.4f} is not higher than {current.reward:.4f}"
    return (f"You changed the {changed} side; that pair scored {candidate.reward:.4f}, not higher than "
            f"the current {current.reward:.4f}, so it was discarded. The pair below is unchanged.")


def _finish_record(result: RefineResult, record: IterationRecord,
                   on_iteration: Callable[[IterationRecord], None] | None) -> None:
    result.tokens += record.tokens
    result.usd += record.usd
    result.records.append(record)
    if on_iteration is not None:
        on_iteration(record)


def refine_instance(instance: Instance, settings: Settings, client: LLMClient, fix: str, test: str,
                    config: RefineConfig, *, store: Store | None = None, run: str = "overfit-refine",
                    on_iteration: Callable[[IterationRecord], None] | None = None) -> RefineResult:
    """:func:`refine_pair` in a fresh executor (its own workspace and fork server) for ``instance``."""
    check_backend(settings, config.backend, instance.python)
    settings = coverage_settings(settings, config.backend)
    repo = resolve_repo(instance, settings.repos_dir)
    with InstanceExecutor(instance, Path(repo), settings, store) as executor:
        return refine_pair(executor, client, fix, test, config, run=run, on_iteration=on_iteration)
