"""LLM mutant operators: the paper's MPE pool, prompted, sampled, admitted through the mechanical filter.

Five operators: ``vanilla`` and the four targeted ones (``symptom_suppression``, ``incomplete_fix``,
``input_specific_shortcut``, ``behavior_substitution``). Each has an instruction and its typical realizations
(``prompts/operators.yaml``). The prompt (``prompts/system.md``, ``prompts/user.md``) shows the issue, the fix,
the fixed code and the two tests as an anonymous pair, *Test 1* / *Test 2*, whose order is drawn per sample
from the seed: the model is never told which test is the candidate.

Edit format: SEARCH/REPLACE blocks against the FIXED file contents (the mutant is a variant of the fix). A
block applies by an exact, unique, whole-line match (trailing whitespace ignored); a SEARCH text that is
missing or occurs more than once makes the sample inadmissible with that reason. This is the format aider
found to apply most reliably: the model copies text it can see instead of computing line numbers and hunk
lengths, which models routinely get wrong in unified diffs, and a failed match is detected exactly instead
of being "fuzzily" applied somewhere else. The mutant patch is then made with
:func:`coharden.patches.make_patch` against the BUGGY base content, like every mechanical mutant.

Sampling: for each operator, N samples (temperature > 0, distinct ``sample_index`` so each sample is its own
record/replay entry), all operators' samples in parallel on a thread pool. A sample that does not parse as
blocks, does not apply, touches a test file or a file outside the fix, or fails admission (does not parse as
Python, equals the fix or the buggy code, duplicates a mutant already in the pool) is inadmissible and is
resampled from the same operator, up to ``N * (1 + max_resample_factor)`` attempts per operator.

Determinism: sampling runs in *rounds*. Each round requests, per operator, as many samples as it still lacks;
when the round is complete its replies are admitted in (operator, sample index) order. Which samples are
admitted, their ids and all counts are therefore a function of the replies only, not of which call finished
first, so a replayed run reproduces a recorded run exactly.

Fail closed: a truncated or withheld reply, a budget refusal, or any other LLM error stops the pool: no new
call is started (queued samples of the round are skipped), the replies already received are still admitted
(finished results are kept and their mutants are run), and the report is marked incomplete with the reason.
:func:`coharden.mpe.evaluate.evaluate` then withholds laxity and class (``Inconclusive``) for that result:
nothing is classified from a broken pool. An operator that used all its attempts without reaching N
admissible mutants is *not* a broken pool (the model simply produced fewer valid variants): its shortfall is
reported and the pool counts as complete.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.execution.executor import InstanceExecutor
from coharden.llm import (
    BudgetExceeded,
    Completion,
    LLMClient,
    LLMError,
    ReplayMiss,
    TruncatedReply,
    UnusableReply,
    Usage,
)
from coharden.llm.cache import canonical_json
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.pool import AdmissionFilter, Pool, admit_llm, fix_context
from coharden.patches import is_test_path, make_patch
from coharden.schema.mutant import TARGETED_OPERATORS, Mutant, Operator
from coharden.schema.testpatch import TestPatch

LLM_OPERATORS: tuple[Operator, ...] = (Operator.VANILLA, *TARGETED_OPERATORS)
SOURCE = "llm"

# --- prompts -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OperatorPrompt:
    """What the prompt says about one operator."""

    instruction: str
    realizations: tuple[str, ...]


def _prompt_text(name: str) -> str:
    return resources.files("coharden.mutation").joinpath("prompts", name).read_text(encoding="utf-8")


@cache
def operator_prompts() -> dict[Operator, OperatorPrompt]:
    """The instruction and typical realizations of every LLM operator (``prompts/operators.yaml``)."""
    data = yaml.safe_load(_prompt_text("operators.yaml"))
    prompts = {Operator(name): OperatorPrompt(" ".join(spec["instruction"].split()),
                                              tuple(" ".join(r.split()) for r in spec["realizations"]))
               for name, spec in data.items()}
    missing = [op.value for op in LLM_OPERATORS if op not in prompts]
    if missing:  # pragma: no cover - a packaging error
        raise RuntimeError(f"prompts/operators.yaml lacks operators {missing}")
    return prompts


@cache
def system_prompt() -> str:
    return _prompt_text("system.md").strip()


@cache
def _user_template() -> Template:
    return Template(_prompt_text("user.md"))


EXAMPLE_BLOCK = """path/to/file.py
<<<<<<< SEARCH
exact lines of the fixed code
=======
the lines that replace them
>>>>>>> REPLACE"""


def _fenced(text: str, lang: str = "") -> str:
    """``text`` in a markdown code fence longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def _excerpts(change: FileChange, context: int, whole_file_lines: int) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of the fixed file to show: the whole file if short, else windows of
    ``context`` lines around every changed line, merged."""
    lines = change.new_lines
    if len(lines) <= whole_file_lines:
        return [(1, max(1, len(lines)))]
    centres: list[int] = []
    for _tag, _i1, _i2, j1, j2 in change.opcodes():
        centres += list(range(j1 + 1, j2 + 1)) or [j1 + 1]
    ranges: list[tuple[int, int]] = []
    for c in sorted(set(centres)):
        start, end = max(1, c - context), min(len(lines), c + context)
        if ranges and start <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
        else:
            ranges.append((start, end))
    return ranges or [(1, min(len(lines), 2 * context))]


def render_fixed_code(ctx: FixContext, context: int = 40, whole_file_lines: int = 400) -> str:
    parts: list[str] = []
    for change in ctx.files:
        lang = "python" if change.path.endswith(".py") else ""
        lines = change.new_lines
        ranges = _excerpts(change, context, whole_file_lines)
        parts.append(f"## {change.path}")
        for start, end in ranges:
            if len(ranges) > 1 or (start, end) != (1, max(1, len(lines))):
                parts.append(f"lines {start}-{end} of {len(lines)}:")
            parts.append(_fenced("".join(lines[start - 1:end]), lang))
    return "\n\n".join(parts)


def build_messages(ctx: FixContext, tests: tuple[TestPatch, TestPatch], operator: Operator, *,
                   problem_statement: str = "", swap: bool = False, context: int = 40,
                   whole_file_lines: int = 400) -> list[dict[str, str]]:
    """The chat messages of one sample. ``tests`` are shown as Test 1, Test 2 (reversed when ``swap``);
    nothing else about them (names, which is the candidate) reaches the prompt."""
    spec = operator_prompts()[operator]
    first, second = (tests[1], tests[0]) if swap else tests
    fix_diff = make_patch((c.path, c.old or None, c.new) for c in ctx.files)
    issue = problem_statement.strip()
    user = _user_template().substitute(
        issue_section=f"# Issue\n\n{issue}\n\n" if issue else "",
        fix_diff=_fenced(fix_diff, "diff"),
        fixed_code=render_fixed_code(ctx, context, whole_file_lines),
        test_1=_fenced(first.patch, "diff"),
        test_2=_fenced(second.patch, "diff"),
        operator=operator.value,
        instruction=spec.instruction,
        realizations="\n".join(f"- {r}" for r in spec.realizations),
        example=_fenced(EXAMPLE_BLOCK),
        editable_files=", ".join(f"`{c.path}`" for c in ctx.files),
    )
    return [{"role": "system", "content": system_prompt()}, {"role": "user", "content": user.strip() + "\n"}]


def prompt_hash(messages: Sequence[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON of the messages (the request hash also covers model, params, sample)."""
    return hashlib.sha256(canonical_json(list(messages)).encode("ascii")).hexdigest()


def swap_tests(seed: int, operator: Operator, sample_index: int) -> bool:
    """Whether this sample shows the tests in reversed order: a fair coin per sample, fixed by the seed
    (string seeds are hashed with sha512 by :mod:`random`, so this does not depend on PYTHONHASHSEED)."""
    return random.Random(f"{seed}:{operator.value}:{sample_index}").random() < 0.5


# --- the edit format -------------------------------------------------------------------------------------


class EditFormatError(ValueError):
    """A reply that cannot be turned into a mutant; ``reason`` is the short inadmissibility reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class EditBlock:
    path: str | None
    """The file named on the line before the block (None when no name was found)."""
    search: tuple[str, ...]
    replace: tuple[str, ...]
    reply_line: int
    """1-based line of ``<<<<<<< SEARCH`` in the reply, for messages."""


_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_SUMMARY = re.compile(r"^\s*\**summary\**\s*:\s*\**\s*(.+)$", re.IGNORECASE)


def _path_from(line: str) -> str | None:
    """A file path from the line above a block: ``path``, ``# File: path``, ```` ```python path ````, ..."""
    text = line.strip()
    if text.startswith("```"):
        tokens = text.strip("`").split()
        text = next((t for t in tokens if "/" in t or "." in t), "")
    text = re.sub(r"^(#+\s*)?(file(name)?\s*:\s*)?", "", text, flags=re.IGNORECASE).strip()
    text = text.strip("*`'\"").rstrip(":").strip().strip("*`'\"")
    for prefix in ("./", "a/", "b/"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text or None


def parse_edit_blocks(reply: str) -> tuple[list[EditBlock], str | None]:
    """The SEARCH/REPLACE blocks of a reply and its ``Summary:`` line (if any).

    Raises :class:`EditFormatError` (``no_edit_blocks`` / ``malformed_block``).
    """
    lines = reply.splitlines()
    blocks: list[EditBlock] = []
    summary: str | None = None
    i = 0
    while i < len(lines):
        match = _SUMMARY.match(lines[i])
        if match and summary is None:
            summary = match.group(1).strip().strip("*").strip()
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        start = i
        path: str | None = None
        for j in range(i - 1, max(-1, i - 4), -1):  # the file name: the nearest non-empty line above
            above = lines[j].strip()
            if not above or (above.startswith("```") and _path_from(above) is None):
                continue
            if _REPLACE.match(above):
                break
            path = _path_from(above)
            break
        i += 1
        search: list[str] = []
        while i < len(lines) and not _DIVIDER.match(lines[i]):
            if _SEARCH.match(lines[i]) or _REPLACE.match(lines[i]):
                raise EditFormatError("malformed_block", f"block at reply line {start + 1} has no ======= divider")
            search.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditFormatError("malformed_block", f"block at reply line {start + 1} has no ======= divider")
        i += 1
        replace: list[str] = []
        while i < len(lines) and not _REPLACE.match(lines[i]):
            if _SEARCH.match(lines[i]) or _DIVIDER.match(lines[i]):
                raise EditFormatError("malformed_block", f"block at reply line {start + 1} is not closed by "
                                                         ">>>>>>> REPLACE")
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditFormatError("malformed_block", f"block at reply line {start + 1} is not closed by "
                                                     ">>>>>>> REPLACE")
        i += 1
        if path is None and blocks:  # consecutive blocks without a file line: the same file as before
            path = blocks[-1].path
        blocks.append(EditBlock(path, tuple(search), tuple(replace), start + 1))
    if not blocks:
        raise EditFormatError("no_edit_blocks", "the reply holds no SEARCH/REPLACE block")
    return blocks, summary


def _resolve_path(block: EditBlock, files: dict[str, str], test_patterns: Sequence[str]) -> str:
    """The fix file a block edits; inadmissible when it names a test file or a file outside the fix."""
    path = block.path
    if path is not None and path in files:
        return path
    if path is not None and is_test_path(path, test_patterns):
        raise EditFormatError("touches_test_file", f"block at reply line {block.reply_line} edits test file {path}")
    if path is not None and ("/" in path or re.search(r"\.\w+$", path)):
        raise EditFormatError("unknown_file", f"block at reply line {block.reply_line} edits {path}, which the fix "
                                              f"does not touch (editable: {', '.join(sorted(files))})")
    if len(files) == 1:  # no recognizable file name, and only one file it can mean
        return next(iter(files))
    raise EditFormatError("missing_file_path", f"block at reply line {block.reply_line} names no file of the fix")


def apply_edit_blocks(blocks: Sequence[EditBlock], files: dict[str, str],
                      test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS) -> tuple[dict[str, str], str]:
    """Apply ``blocks`` in order to ``files`` (path -> FIXED content); return (new contents, location).

    Each SEARCH text must match whole lines of the current content exactly once (trailing whitespace is
    ignored: it is invisible in the prompt). Every block's file is checked before any block is applied, so a
    reply touching a test file is rejected as such even if an earlier block fails to match. Raises
    :class:`EditFormatError` with ``touches_test_file``, ``unknown_file``, ``missing_file_path``,
    ``search_empty``, ``search_not_found`` or ``search_ambiguous``.
    """
    paths = [_resolve_path(block, files, test_patterns) for block in blocks]
    current = dict(files)
    location = ""
    for block, path in zip(blocks, paths, strict=True):
        if not any(line.strip() for line in block.search):
            raise EditFormatError("search_empty", f"block at reply line {block.reply_line} has an empty SEARCH part")
        content = current[path]
        newline = "\r\n" if "\r\n" in content else "\n"
        ends_with_newline = content.endswith("\n")
        # split on newlines only: str.splitlines would also split on form feeds and other separators
        lines = (content[:-1] if ends_with_newline else content).split("\n") if content else []
        if newline == "\r\n":
            lines = [line.removesuffix("\r") for line in lines]
        wanted = [s.rstrip() for s in block.search]
        n = len(wanted)
        hits = [k for k in range(len(lines) - n + 1) if [x.rstrip() for x in lines[k:k + n]] == wanted]
        if not hits:
            raise EditFormatError("search_not_found", f"block at reply line {block.reply_line}: SEARCH text not found "
                                                      f"in {path}")
        if len(hits) > 1:
            raise EditFormatError("search_ambiguous", f"block at reply line {block.reply_line}: SEARCH text occurs "
                                                      f"{len(hits)} times in {path}")
        k = hits[0]
        new_lines = lines[:k] + list(block.replace) + lines[k + n:]
        current[path] = newline.join(new_lines) + (newline if ends_with_newline and new_lines else "")
        if not location:
            location = f"{path}:{k + 1}"
    return current, location


def reply_to_raw_mutant(reply: str, ctx: FixContext, operator: Operator, *,
                        test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS,
                        meta: dict[str, Any] | None = None) -> RawMutant:
    """A model reply -> a :class:`RawMutant` holding the full content of every file of the fix."""
    blocks, summary = parse_edit_blocks(reply)
    fixed = {c.path: c.new for c in ctx.files}
    files, location = apply_edit_blocks(blocks, fixed, test_patterns)
    description = (summary or f"LLM {operator.value} variant of the fix")[:300]
    return RawMutant(operator, description, location, files, {**(meta or {}), "blocks": len(blocks)})


# --- settings, reports -----------------------------------------------------------------------------------


class LLMMutatorSettings(BaseModel):
    """How the LLM pool is sampled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    operators: tuple[Operator, ...] = LLM_OPERATORS
    samples: int = Field(default=3, ge=1)
    """N: admissible mutants wanted per operator."""
    max_resample_factor: float = Field(default=1.0, ge=0)
    """At most ``N * (1 + factor)`` attempts (rounded up) per operator."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of every call (> 0: the N samples must be able to differ)."""
    parallel: int = Field(default=8, ge=1)
    """Concurrent LLM calls."""
    seed: int = 0
    """Draws the order in which the two tests are shown, per sample."""
    context_lines: int = Field(default=40, ge=1)
    whole_file_lines: int = Field(default=400, ge=1)
    """Fixed files up to this many lines are shown whole; longer ones as excerpts around the fix."""

    @property
    def max_attempts(self) -> int:
        return self.samples + math.ceil(self.samples * self.max_resample_factor)


def _usage_json(usage: Usage) -> dict[str, Any]:
    """One operator's LLM usage. Cached-call counts are left out: they differ between a recorded run and its
    replay."""
    return {
        "calls": usage.calls,
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "cost_usd": usage.cost_usd,  # exactly rounded (fsum): independent of completion order
        "truncations": usage.truncations,
        "budget_refusals": usage.budget_refusals,
        "errors": dict(sorted(usage.errors_by_kind.items())),
    }


SampleStatus = Literal["admitted", "rejected", "truncated", "unusable", "budget", "error", "skipped"]
FATAL_STATUSES = frozenset({"truncated", "unusable", "budget", "error"})
_FATAL_WHAT = {"truncated": "truncated reply", "unusable": "unusable reply", "budget": "cost cap reached",
               "error": "LLM error"}


class SampleRecord(BaseModel):
    """One attempt of one operator: what came back and what became of it."""

    operator: Operator
    sample_index: int
    status: SampleStatus
    reason: str | None = None
    """Why the sample was rejected (``touches_test_file``, ``equals_fix``, ...) or the error kind."""
    detail: str = ""
    mutant_id: str | None = None
    prompt_hash: str = ""
    request_hash: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class LLMPoolReport(BaseModel):
    """What the LLM operators produced for one fix: per-operator counts, every sample, usage, completeness."""

    model: str
    settings: LLMMutatorSettings
    complete: bool = True
    incomplete_reason: str | None = None
    samples: list[SampleRecord] = Field(default_factory=list)
    usage_per_operator: dict[str, dict[str, Any]] = Field(default_factory=dict)
    usage_total: dict[str, Any] = Field(default_factory=dict)
    cache: dict[str, Any] = Field(default_factory=dict)
    """Run-specific facts (cache mode, replies replayed from the store): dropped from reproducible output."""

    def mutant_ids(self) -> list[str]:
        return [s.mutant_id for s in self.samples if s.mutant_id is not None]

    def per_operator(self) -> dict[str, dict[str, Any]]:
        """Per operator: wanted, attempts (calls tried), admitted, rejected reasons, shortfall."""
        table: dict[str, dict[str, Any]] = {}
        for op in self.settings.operators:
            rows = [s for s in self.samples if s.operator is op]
            admitted = sum(1 for s in rows if s.status == "admitted")
            rejected = Counter(s.reason or "?" for s in rows if s.status == "rejected")
            failed = Counter(s.status for s in rows if s.status in FATAL_STATUSES)
            table[op.value] = {
                "wanted": self.settings.samples,
                "attempts": sum(1 for s in rows if s.status != "skipped"),
                "admitted": admitted,
                "rejected": dict(sorted(rejected.items())),
                "failed": dict(sorted(failed.items())),
                "skipped": sum(1 for s in rows if s.status == "skipped"),
                "shortfall": max(0, self.settings.samples - admitted),
            }
        return table

    def to_dict(self, *, volatile: bool = True) -> dict[str, Any]:
        data = self.model_dump(mode="json", exclude=set() if volatile else {"cache"})
        data["per_operator"] = self.per_operator()
        return data


# --- the mutator -----------------------------------------------------------------------------------------


@dataclass
class _Outcome:
    operator: Operator
    sample_index: int
    status: SampleStatus
    prompt_hash: str = ""
    completion: Completion | None = None
    raw: RawMutant | None = None
    reason: str | None = None
    detail: str = ""
    swap: bool = False


class LLMMutator:
    """Builds the LLM part of a mutant pool with one :class:`LLMClient` (its ledger, budget and store apply).

    >>> mutator = LLMMutator(LLMClient(config, store=CallStore(path)), LLMMutatorSettings(samples=3))
    >>> report = mutator.extend(executor, fix, candidate, reference, pool)   # adds mutants to ``pool``
    """

    source = SOURCE

    def __init__(self, client: LLMClient, settings: LLMMutatorSettings | None = None) -> None:
        self.client = client
        self.settings = settings or LLMMutatorSettings()

    def extend(self, executor: InstanceExecutor, fix: str, candidate: TestPatch, reference: TestPatch,
               pool: Pool) -> LLMPoolReport:
        """Sample, parse, apply and admit LLM mutants of ``fix`` (a source-only patch) into ``pool``."""
        ctx = fix_context(executor, fix)
        return self.build(ctx, (candidate, reference), pool, instance_id=executor.instance.instance_id,
                          problem_statement=executor.instance.problem_statement,
                          test_patterns=executor.settings.test_patterns)

    def build(self, ctx: FixContext, tests: tuple[TestPatch, TestPatch], pool: Pool, *,
              instance_id: str | None = None, problem_statement: str = "",
              test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS) -> LLMPoolReport:
        """The sampling rounds (see the module docs). ``tests`` is (candidate, reference); the prompt shows
        them anonymously in a per-sample order."""
        cfg = self.settings
        report = LLMPoolReport(model=self.client.config.model, settings=cfg)
        tallies = {op: Usage() for op in cfg.operators}
        if not ctx.files:
            report.usage_per_operator = {op.value: _usage_json(t) for op, t in tallies.items()}
            report.usage_total = _usage_json(Usage())
            return report
        stop = threading.Event()  # set by the first failing call: no call starts after it
        fatal: str | None = None
        admission = AdmissionFilter.of(ctx)
        attempts = dict.fromkeys(cfg.operators, 0)
        admitted = dict.fromkeys(cfg.operators, 0)
        since_last = dict.fromkeys(cfg.operators, 0)

        def attempt(task: tuple[Operator, int]) -> _Outcome:
            op, index = task
            swap = swap_tests(cfg.seed, op, index)
            if stop.is_set():
                return _Outcome(op, index, "skipped", detail="not started: the pool had already failed", swap=swap)
            messages = build_messages(ctx, tests, op, problem_statement=problem_statement, swap=swap,
                                      context=cfg.context_lines, whole_file_lines=cfg.whole_file_lines)
            phash = prompt_hash(messages)
            try:
                completion = self.client.complete(messages, instance_id=instance_id, sample_index=index,
                                                  temperature=cfg.temperature)
            except TruncatedReply as exc:
                stop.set()
                return _Outcome(op, index, "truncated", phash, exc.completion, reason="truncated", detail=str(exc),
                                swap=swap)
            except UnusableReply as exc:
                stop.set()
                return _Outcome(op, index, "unusable", phash, exc.completion,
                                reason=f"finish_{exc.completion.finish_reason}", detail=str(exc), swap=swap)
            except BudgetExceeded as exc:
                stop.set()
                return _Outcome(op, index, "budget", phash, reason="budget", detail=str(exc), swap=swap)
            except LLMError as exc:
                stop.set()
                kind = "replay_miss" if isinstance(exc, ReplayMiss) else type(exc).__name__
                return _Outcome(op, index, "error", phash, reason=kind, detail=str(exc), swap=swap)
            try:
                raw = reply_to_raw_mutant(completion.content, ctx, op, test_patterns=test_patterns)
            except EditFormatError as exc:
                return _Outcome(op, index, "rejected", phash, completion, reason=exc.reason, detail=exc.detail,
                                swap=swap)
            # "admitted" provisionally: _settle runs the admission filter and may turn it into "rejected"
            return _Outcome(op, index, "admitted", phash, completion, raw=raw, swap=swap)

        with ThreadPoolExecutor(max_workers=cfg.parallel, thread_name_prefix="llm-mutant") as threads:
            while not stop.is_set():
                tasks: list[tuple[Operator, int]] = []
                for op in cfg.operators:
                    wanted = min(cfg.samples - admitted[op], cfg.max_attempts - attempts[op])
                    tasks += [(op, attempts[op] + k) for k in range(max(0, wanted))]
                    attempts[op] += max(0, wanted)
                if not tasks:
                    break
                for outcome in threads.map(attempt, tasks):  # results in task order: deterministic admission
                    record = self._settle(outcome, ctx, pool, admission, tallies, admitted, since_last)
                    report.samples.append(record)
                    if fatal is None and outcome.status in FATAL_STATUSES:  # the first failure in task order
                        fatal = (f"{_FATAL_WHAT[outcome.status]} (operator {outcome.operator.value} sample "
                                 f"{outcome.sample_index}): {outcome.detail}")

        report.usage_per_operator = {op.value: _usage_json(tallies[op]) for op in cfg.operators}
        total = Usage()
        for tally in tallies.values():
            total.merge(tally)
        report.usage_total = _usage_json(total)
        report.cache = {"mode": self.client.mode.value,
                        "store": str(self.client.store.path) if self.client.store is not None else None,
                        "cached_calls": total.cached_calls}
        if fatal is not None:
            report.complete = False
            report.incomplete_reason = fatal
        return report

    def _settle(self, outcome: _Outcome, ctx: FixContext, pool: Pool, admission: AdmissionFilter,
                tallies: dict[Operator, Usage], admitted: dict[Operator, int],
                since_last: dict[Operator, int]) -> SampleRecord:
        """Account one outcome and, for a parsed reply, admit it (in the caller's deterministic order)."""
        op = outcome.operator
        tally = tallies[op]
        completion = outcome.completion
        if completion is not None:
            tally.add_completion(completion)
        if outcome.status == "truncated":
            tally.truncations += 1
        elif outcome.status == "budget":
            tally.budget_refusals += 1
        elif outcome.status in ("unusable", "error"):
            tally.errors += 1
            tally.errors_by_kind[outcome.reason or outcome.status] += 1
        if outcome.status != "skipped":
            since_last[op] += 1
        record = SampleRecord(
            operator=op, sample_index=outcome.sample_index, status=outcome.status, reason=outcome.reason,
            detail=outcome.detail, prompt_hash=outcome.prompt_hash,
            request_hash=completion.request_hash if completion is not None else None,
            prompt_tokens=completion.prompt_tokens if completion is not None else 0,
            completion_tokens=completion.completion_tokens if completion is not None else 0,
            cost_usd=completion.cost_usd if completion is not None else 0.0,
        )
        if outcome.raw is None or completion is None:
            return record
        raw = outcome.raw
        raw.meta = {
            **raw.meta,
            "model": completion.model,
            "prompt_hash": outcome.prompt_hash,
            "request_hash": completion.request_hash,
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
            "cost_usd": completion.cost_usd,
            "sample_index": outcome.sample_index,
            "attempts": since_last[op],
            "test_order": ["reference", "candidate"] if outcome.swap else ["candidate", "reference"],
        }
        mutant_id = f"{SOURCE}-{op.value}-{admitted[op] + 1}"
        result: Mutant | str = admit_llm(ctx, raw, pool, mutant_id, admission)
        if isinstance(result, str):
            record.status, record.reason = "rejected", result
            record.detail = f"admission: {result}"
            return record
        admitted[op] += 1
        since_last[op] = 0
        record.mutant_id = result.id
        return record
