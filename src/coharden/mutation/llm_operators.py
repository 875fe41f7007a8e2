"""LLM mutant operators: the paper's MPE pool, prompted, sampled, admitted through the mechanical filter.

Five operators: ``vanilla`` and the four targeted ones (``symptom_suppression``, ``incomplete_fix``,
``input_specific_shortcut``, ``behavior_substitution``). Each has an instruction and its typical realizations
(``prompts/operators.yaml``). The prompt (``prompts/system.md``, ``prompts/user.md``) shows the issue, the fix,
the fixed code and the two tests as an anonymous pair, *Test 1* / *Test 2*, whose order is drawn per sample
from the seed: the model is never told which test is the candidate.

Edit format (:mod:`~coharden.mutation.llm_edits`): SEARCH/REPLACE blocks against the FIXED files, applied by
an exact, unique, whole-line match (aider's finding: models copy text they see far better than they compute hunk
line numbers, and a failed match is detected exactly, never applied "fuzzily" elsewhere); or, for small local
models, one unified diff (``mpe.llm_edit_format=diff``), applied tolerantly. The mutant patch is then made
against the BUGGY base content, like every mechanical mutant.

Sampling: for each operator, N samples (temperature > 0, distinct ``sample_index`` so each sample is its own
record/replay entry), all operators' samples in parallel on a thread pool. A sample that does not parse as
blocks, does not apply, touches a test file or a file outside the fix, or fails admission (does not parse as
Python, equals the fix or the buggy code, duplicates a mutant already in the pool) is inadmissible and is
resampled from the same operator, up to ``N * (1 + max_resample_factor)`` attempts per operator.

Determinism: sampling runs in *rounds*. Each round requests, per operator, as many samples as it still lacks;
when the round is complete its replies are admitted in (operator, sample index) order. Which samples are
admitted, their ids and all counts are therefore a function of the replies only, not of which call finished
first, so a replayed run reproduces a recorded run exactly.

A reply cut off at ``max_tokens`` is never used: it is a rejected sample (reason ``truncated``, or
``repetition`` when its tail repeats one short stretch of text, the loop small models fall into) and is
resampled like any other rejection, counted among the operator's truncations. Only when *every* reply of the
pool was cut off is the pool incomplete (the token limit is too small for the prompt, not one sample bad).

Fail closed: a withheld reply, a budget refusal, or any other LLM error stops the pool: no new
call is started (queued samples of the round are skipped), the replies already received are still admitted
(finished results are kept and their mutants are run), and the report is marked incomplete with the reason.
:func:`coharden.mpe.evaluate.evaluate` then withholds laxity and class (``Inconclusive``) for that result:
nothing is classified from a broken pool. An operator that used all its attempts without reaching N
admissible mutants is *not* a broken pool (the model simply produced fewer valid variants): its shortfall is
reported and the pool counts as complete.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.execution.executor import InstanceExecutor
from coharden.llm import (
    Completion,
    ErrorKind,
    Failure,
    LLMClient,
    LLMError,
    Usage,
    failure_of,
)
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.llm_edits import EditFormatError, reply_to_raw_mutant
from coharden.mutation.llm_prompts import LLM_OPERATORS, EditFormat, build_messages, prompt_hash, swap_tests
from coharden.mutation.pool import AdmissionFilter, Pool, admit_llm, fix_context
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import DEFAULT_SEED, LLM_SAMPLES, MPEConfig
from coharden.schema.mutant import Mutant, Operator
from coharden.schema.testpatch import TestPatch

SOURCE = "llm"

# --- settings, reports -----------------------------------------------------------------------------------


class LLMMutatorSettings(BaseModel):
    """How the LLM pool is sampled."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    operators: tuple[Operator, ...] = LLM_OPERATORS
    samples: int = Field(default=LLM_SAMPLES, ge=1)
    """N: admissible mutants wanted per operator."""
    max_resample_factor: float = Field(default=1.0, ge=0)
    """At most ``N * (1 + factor)`` attempts (rounded up) per operator."""
    temperature: float = Field(default=1.0, gt=0)
    """Sampling temperature of every call (> 0: the N samples must be able to differ)."""
    parallel: int = Field(default=8, ge=1)
    """Concurrent LLM calls."""
    seed: int = DEFAULT_SEED
    """Draws the order in which the two tests are shown, per sample (callers pass the MPE's seed)."""
    context_lines: int = Field(default=40, ge=1)
    whole_file_lines: int = Field(default=400, ge=1)
    """Fixed files up to this many lines are shown whole; longer ones as excerpts around the fix."""
    edit_format: EditFormat = "blocks"
    """What a reply is asked to hold (either format is parsed whatever was asked)."""

    @classmethod
    def of(cls, mpe: MPEConfig, *, samples: int | None = None, seed: int | None = None,
           operators: Sequence[Operator] | None = None) -> LLMMutatorSettings:
        """A command's settings: N samples per operator and the seed (default: the MPE section's
        ``mpe.llm_samples`` and ``mpe.seed``), and the section's other LLM settings (``mpe.llm_edit_format``)."""
        chosen = cls(samples=mpe.llm_samples if samples is None else samples,
                     seed=mpe.seed if seed is None else seed, edit_format=mpe.llm_edit_format)
        return chosen if operators is None else chosen.model_copy(update={"operators": tuple(operators)})

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


SampleStatus = Literal["admitted", "rejected", "failed", "skipped"]
"""What became of a sample; a failed one's ``reason`` is the LLM failure's kind (an ``ErrorKind`` value)."""
#: Rejection reasons of a reply cut off at ``max_tokens`` (counted as truncations too).
CUT_REASONS = frozenset({"truncated", "repetition"})


def is_repetition(text: str, *, min_span: int = 60, max_period: int = 80, min_repeats: int = 3) -> bool:
    """Whether ``text`` ends in one short stretch repeated over and over (``as_int_str, as_int_str, ...``,
    the same line again and again): the degenerate loop a small model falls into until ``max_tokens``."""
    tail = text.rstrip()
    for period in range(1, max_period + 1):
        span = max(min_span, period * min_repeats)
        if len(tail) < span:
            break
        end = tail[-span:]
        if all(end[i] == end[i + period] for i in range(span - period)):
            return True
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return len(lines) >= 2 * min_repeats and len(set(lines[-2 * min_repeats:])) <= 2


class SampleRecord(BaseModel):
    """One attempt of one operator: what came back and what became of it."""

    operator: Operator
    sample_index: int
    status: SampleStatus
    reason: str | None = None
    """Why the sample was rejected (``touches_test_file``, ``equals_fix``, ...), or failed (an ``ErrorKind``
    value: ``truncated``, ``cost_cap``, ...)."""
    detail: str = ""
    mutant_id: str | None = None
    prompt_hash: str = ""
    request_hash: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    """Seconds the model took for this reply (the recorded figure when replayed)."""


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
            rows = [s for s in self.samples if s.operator == op]
            admitted = sum(1 for s in rows if s.status == "admitted")
            rejected = Counter(s.reason or "?" for s in rows if s.status == "rejected")
            failed = Counter(s.reason or "?" for s in rows if s.status == "failed")
            table[str(op)] = {
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
class _Counts:
    """The rounds' counts per operator: LLM usage, attempts started, mutants admitted, attempts since the last."""

    tallies: dict[Operator, Usage]
    attempts: Counter[Operator] = field(default_factory=Counter)
    admitted: Counter[Operator] = field(default_factory=Counter)
    since_last: Counter[Operator] = field(default_factory=Counter)


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
    failure: Failure | None = None


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
        return self.build(ctx, (candidate, reference), pool, instance=executor.instance,
                          test_patterns=executor.settings.tests.test_patterns)

    def build(self, ctx: FixContext, tests: tuple[TestPatch, TestPatch], pool: Pool, *,
              instance: Instance | None = None, test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS
              ) -> LLMPoolReport:
        """The sampling rounds (see the module docs). ``tests`` is (candidate, reference); the prompt shows
        them anonymously in a per-sample order, with the problem statement of ``instance`` (whose id the
        calls are recorded under)."""
        cfg = self.settings
        instance_id = instance.instance_id if instance is not None else None
        problem_statement = instance.problem_statement if instance is not None else ""
        report = LLMPoolReport(model=self.client.config.model, settings=cfg)
        counts = _Counts({op: Usage() for op in cfg.operators})
        tallies = counts.tallies
        if not ctx.files:
            report.usage_per_operator = {str(op): _usage_json(t) for op, t in tallies.items()}
            report.usage_total = _usage_json(Usage())
            return report
        stop = threading.Event()  # set by the first failing call: no call starts after it
        fatal: str | None = None
        admission = AdmissionFilter.of(ctx)
        attempts, admitted = counts.attempts, counts.admitted

        def attempt(task: tuple[Operator, int]) -> _Outcome:
            op, index = task
            swap = swap_tests(cfg.seed, op, index)
            if stop.is_set():
                return _Outcome(op, index, "skipped", detail="not started: the pool had already failed", swap=swap)
            shown = (tests[1], tests[0]) if swap else tests
            messages = build_messages(ctx, shown, op, cfg, problem_statement=problem_statement)
            phash = prompt_hash(messages)
            try:
                completion = self.client.complete(messages, instance_id=instance_id, sample_index=index,
                                                  temperature=cfg.temperature)
            except LLMError as exc:
                failed = failure_of(exc)
                if failed.kind is ErrorKind.TRUNCATED and failed.completion is not None:
                    # a rejected sample, resampled: see the module docs
                    cut = failed.completion
                    looping = is_repetition(cut.content)
                    return _Outcome(op, index, "rejected", phash, cut,
                                    reason="repetition" if looping else "truncated",
                                    detail=f"cut off at {cut.completion_tokens} completion tokens"
                                           + (", repeating itself" if looping else ""), swap=swap)
                stop.set()
                return _Outcome(op, index, "failed", phash, failed.completion, reason=failed.kind.value,
                                detail=failed.message, swap=swap, failure=failed)
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
                    record = self._settle(outcome, ctx, pool, admission, counts)
                    report.samples.append(record)
                    if fatal is None and outcome.failure is not None:  # the first failure in task order
                        fatal = (f"{outcome.failure.what} (operator {outcome.operator} sample "
                                 f"{outcome.sample_index}): {outcome.detail}")

        return self._finish(report, tallies, fatal)

    def _finish(self, report: LLMPoolReport, tallies: dict[Operator, Usage], fatal: str | None) -> LLMPoolReport:
        """The report's usage and cache figures, and whether the pool is complete: not after a failed call
        (``fatal``), nor when every reply tried was cut off at max_tokens."""
        report.usage_per_operator = {str(op): _usage_json(tallies[op]) for op in self.settings.operators}
        total = Usage()
        for tally in tallies.values():
            total.merge(tally)
        report.usage_total = _usage_json(total)
        report.cache = {"mode": self.client.mode.value,
                        "store": str(self.client.store.path) if self.client.store is not None else None,
                        "cached_calls": total.cached_calls}
        tried = [s for s in report.samples if s.status != "skipped"]
        if fatal is None and tried and all(s.reason in CUT_REASONS for s in tried):
            fatal = (f"every reply ({len(tried)}) was cut off at max_tokens "
                     f"({self.client.config.max_tokens}): raise it or shorten the prompt")
        if fatal is not None:
            report.complete = False
            report.incomplete_reason = fatal
        return report

    def _settle(self, outcome: _Outcome, ctx: FixContext, pool: Pool, admission: AdmissionFilter,
                counts: _Counts) -> SampleRecord:
        """Account one outcome in ``counts`` and, for a parsed reply, admit it (in the caller's deterministic order)."""
        op = outcome.operator
        admitted, since_last = counts.admitted, counts.since_last
        tally = counts.tallies[op]
        completion = outcome.completion
        if completion is not None:
            tally.add_completion(completion)
        kind = outcome.failure.kind if outcome.failure is not None else None
        if kind is ErrorKind.TRUNCATED or (outcome.status == "rejected" and outcome.reason in CUT_REASONS):
            tally.truncations += 1
        elif kind is ErrorKind.COST_CAP:
            tally.budget_refusals += 1
        elif kind is not None:
            tally.errors += 1
            tally.errors_by_kind[kind.value] += 1
        if outcome.status != "skipped":
            since_last[op] += 1
        record = SampleRecord(
            operator=op, sample_index=outcome.sample_index, status=outcome.status, reason=outcome.reason,
            detail=outcome.detail, prompt_hash=outcome.prompt_hash,
            request_hash=completion.request_hash if completion is not None else None,
            prompt_tokens=completion.prompt_tokens if completion is not None else 0,
            completion_tokens=completion.completion_tokens if completion is not None else 0,
            cost_usd=completion.cost_usd if completion is not None else 0.0,
            latency_s=completion.latency_s if completion is not None else 0.0,
        )
        if outcome.raw is None or completion is None or outcome.status != "admitted":
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
        mutant_id = f"{SOURCE}-{op}-{admitted[op] + 1}"
        result: Mutant | str = admit_llm(ctx, raw, pool, mutant_id, admission)
        if isinstance(result, str):
            record.status, record.reason = "rejected", result
            record.detail = f"admission: {result}"
            return record
        admitted[op] += 1
        since_last[op] = 0
        record.mutant_id = result.id
        return record
