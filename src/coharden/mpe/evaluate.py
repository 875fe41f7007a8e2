"""Mutation Patch Evaluation (MPE) of one candidate test against a reference test on one instance.

1. F->P of the candidate and of the reference (the reference must be F->P, or nothing is classified).
2. For a F->P candidate: the mechanical mutant pool of the fix; every mutant is run against both tests in
   one pytest process where possible. A mutant is admissible when it applies and both tests reach
   PASS/FAIL on it; the others are counted by reason.
3. Matrix (alpha, beta, gamma, delta), laxity = beta / admissible with its exact interval, class with cutoff
   tau: from the interval (Rigorous / Borderline / Lax), or the paper's point rule with ``paper_classes``.

Sequential MPE (the default, :mod:`coharden.mpe.sequential`): the whole pool in a seeded order, run in
stratified rounds, stopped as soon as the interval decides the class, or at ``max_mutants`` / the pool's end.
The result states its sampling frame (``frame``: the pool per operator, how many were drawn, how many were
admissible) and why it stopped (``stop``).

The pool is mechanical, LLM (:class:`~coharden.mutation.llm_operators.LLMMutator`), or both mixed (one
admission filter, deduplicated across sources, counted per source). Fail closed: when the LLM pool could not
be completed (truncated reply, cost cap, LLM error) the admitted mutants are still run and reported, but
``laxity`` stays None, the class is ``Inconclusive`` and ``pool_complete`` / ``pool_incomplete_reason`` say
why: nothing is classified from a broken pool.
"""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pool import ExecutorPool
from coharden.execution.verify import FailToPass
from coharden.mpe.early import EarlyPool, EarlyRecording
from coharden.mpe.implied import Implied
from coharden.mpe.sequential import Stop, capped, rounds, stop_reason
from coharden.mpe.workers import Workers
from coharden.mutation.context import FixContext, record_targets
from coharden.mutation.pool import (
    Pool,
    build_pool,
    called_by,
    fix_context,
    mechanical_operators,
    recordings_needed,
    test_labels,
)
from coharden.mutation.registry import BUGGY_RECORDS
from coharden.patches import split_patch
from coharden.schema.estimate import DEFAULT_CONFIDENCE, Estimate
from coharden.schema.matrix import Cell, Matrix, TestClass, cell, classify
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mpe_row import MPERow
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict

if TYPE_CHECKING:
    from coharden.mutation.llm_operators import LLMMutator


class MPEError(CoHardenError):
    """MPE cannot classify: bad fix, or a reference test that is not fail-to-pass."""


class MutantResult(BaseModel):
    mutant: Mutant
    candidate: Verdict
    reference: Verdict
    cell: Cell | None = None

    @property
    def inadmissible_reason(self) -> str | None:
        if self.cell is not None:
            return None
        bad = self.candidate if not self.candidate.admissible else self.reference
        return bad.outcome.value


class MPEResult(BaseModel):
    instance_id: str
    test: str
    reference: str
    test_ids: list[str]
    reference_ids: list[str]
    candidate_buggy: Verdict
    candidate_fixed: Verdict
    reference_buggy: Verdict
    reference_fixed: Verdict
    fail_to_pass: bool
    test_class: TestClass
    tau: float
    laxity: float | None = None
    matrix: Matrix = Field(default_factory=Matrix)
    mutants: list[MutantResult] = Field(default_factory=list)
    pool: dict = Field(default_factory=dict)
    seed: int = 0
    operators: list[str] = Field(default_factory=list)
    timings: dict[str, float] = Field(default_factory=dict)
    # --- mutant sources (mechanical / llm); added fields, the ones above keep their meaning ----------------
    mutators: list[str] = Field(default_factory=lambda: ["mechanical"])
    pool_complete: bool = True
    """False when a mutant source failed (LLM truncation, cost cap, error): laxity and class are withheld."""
    pool_incomplete_reason: str | None = None
    llm_pool: dict | None = None
    """The LLM pool report (per operator and per sample), when the LLM mutator ran."""
    candidate_timeouts: int = 0
    """Mutants on which the candidate hit its time limit (inadmissible: they count neither way in laxity)."""
    reference_timeouts: int = 0
    time_limits: dict[str, float] = Field(default_factory=dict)
    """The time limits on mutants: each test's run on the fixed code scaled (MPEConfig.timeout_factor/floor)."""
    tampering: list[str] = Field(default_factory=list)
    """What the candidate did that could forge its results (see coharden.execution.tampering)."""
    isolation: str = ""
    """How test processes were confined (bwrap, netns, guard)."""
    warnings: list[str] = Field(default_factory=list)
    """What weakens the class and must be said with it: e.g. the pool lacks the input-based kinds although
    the tests call a function the fix touches (see :attr:`coharden.mutation.pool.Pool.warnings`)."""
    llm_usage: dict = Field(default_factory=dict)
    """LLM ledger totals ``{"per_operator": {...}, "per_source": {"mechanical": ..., "llm": ...}}``."""
    # --- the estimate (issue 33) -----------------------------------------------------------------------------
    confidence: float = DEFAULT_CONFIDENCE
    """Confidence level of ``interval`` and of every per-operator interval."""
    interval: list[float] | None = None
    """The laxity's interval [low, high] (exact Clopper-Pearson; the point itself when ``census``)."""
    census: bool = False
    """Every mutant of the pool was run: the laxity is the pool's, not an estimate."""
    point_classes: bool = False
    """The class is the paper's point rule (``--paper-classes``), not the interval's."""
    sequential: bool = False
    stop: str = ""
    """Why no more mutants were run: decided, cap, pool (spent), fixed budget."""
    rounds: int = 0
    """Sequential rounds run (one mutant of each operator with mutants left per round)."""
    frame: dict[str, dict[str, int]] = Field(default_factory=dict)
    """The sampling frame per operator: ``pool`` (admitted mutants), ``drawn`` (run), ``admissible``."""
    # --- fewer runs (issue 35) -------------------------------------------------------------------------------
    runs: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Per test (``candidate`` / ``reference``): test processes ``made`` for its verdicts in this MPE (F->P
    checks, mutants, its reach pass), verdicts served from the store (``cached``) and verdicts ``implied``
    without a run (see :mod:`coharden.mpe.implied`). The input recorder's runs are not counted here."""
    flaky: list[str] = Field(default_factory=list)
    """Tests whose two runs on the fixed code disagreed (``candidate: PASS, then FAIL``): never given implied
    outcomes."""
    reach: dict[str, str] = Field(default_factory=dict)
    """Per test: ``complete`` when its reach pass can imply outcomes, else why not (``MPEConfig.implied``)."""

    def estimate(self) -> Estimate:
        """The pooled laxity with its interval."""
        return Estimate(beta=len(self.matrix.beta), admissible=self.matrix.admissible, confidence=self.confidence,
                        census=self.census)

    def per_operator(self) -> dict[str, dict[str, object]]:
        """Each operator's cells and laxity, with its own interval (the point when the operator's whole pool
        was drawn) and its pool size."""
        table = _tally_rows(self.mutants, lambda r: r.mutant.operator.value)
        for op, row in table.items():
            frame = self.frame.get(op, {})
            census = bool(frame) and frame.get("drawn") == frame.get("pool")
            bounds = Estimate(beta=int(row["beta"]), admissible=int(row["admissible"]),  # type: ignore[call-overload]
                              confidence=self.confidence, census=census).interval
            row["interval"] = list(bounds) if bounds else None
            if frame:
                row["pool"] = frame.get("pool", 0)
        return table

    @property
    def balanced_laxity(self) -> float | None:
        """The mean of the per-operator laxities (operators with an admissible mutant): every operator weighs
        the same, however many mutants it made. Reported beside ``laxity``; the class uses ``laxity``."""
        rates = [row["laxity"] for row in self.per_operator().values() if row["laxity"] is not None]
        return sum(rates) / len(rates) if rates and self.laxity is not None else None  # type: ignore[arg-type]

    def per_source(self) -> dict[str, dict[str, object]]:
        """Like :meth:`per_operator`, per mutant source (``mechanical`` / ``llm``), each with its operators."""
        table = _tally_rows(self.mutants, lambda r: r.mutant.source)
        for source, row in table.items():
            row["operators"] = _tally_rows([r for r in self.mutants if r.mutant.source == source],
                                           lambda r: r.mutant.operator.value)
        return table

    def inadmissible_counts(self) -> dict[str, int]:
        reasons = Counter(reason for r in self.mutants if (reason := r.inadmissible_reason) is not None)
        return dict(sorted(reasons.items()))

    def verdicts(self) -> list[Verdict]:
        """Every verdict the result holds: both tests on buggy and fixed code, and on every mutant."""
        return [self.candidate_buggy, self.candidate_fixed, self.reference_buggy, self.reference_fixed,
                *(v for r in self.mutants for v in (r.candidate, r.reference))]

    @property
    def harness_error(self) -> bool:
        """A verdict is a harness error (the runner, not the code, failed): a rerun may give another result."""
        return any(v.outcome is Outcome.HARNESS_ERROR for v in self.verdicts())

    def row(self) -> MPERow:
        """The summary row graders and reports keep (see :class:`~coharden.schema.mpe_row.MPERow`)."""
        return MPERow(fail_to_pass=self.fail_to_pass, test_class=self.test_class.value, laxity=self.laxity,
                      interval=self.interval, drawn=len(self.mutants),
                      matrix=self.matrix.counts() if self.fail_to_pass else None, admissible=self.matrix.admissible,
                      inadmissible=self.inadmissible_counts(), test_ids=self.test_ids,
                      buggy=self.candidate_buggy.outcome.value, fixed=self.candidate_fixed.outcome.value,
                      pool_complete=self.pool_complete,
                      reason=f"buggy: {self.candidate_buggy.short()}; fixed: {self.candidate_fixed.short()}")

    def lax_mutants(self) -> list[MutantResult]:
        """The wrong fixes the candidate lets through (the beta cell)."""
        return [r for r in self.mutants if r.cell is Cell.BETA]

    def to_json(self, *, timings: bool = True) -> dict:
        # runs made / cached depend on what the store held, like timings on the machine
        data = self.model_dump(mode="json", exclude={"timings", "time_limits", "runs"} if not timings else set())
        for verdict_key in ("candidate_buggy", "candidate_fixed", "reference_buggy", "reference_fixed"):
            _strip_verdict(data[verdict_key], timings)
        for m in data["mutants"]:
            _strip_verdict(m["candidate"], timings)
            _strip_verdict(m["reference"], timings)
        data["matrix_counts"] = self.matrix.counts()
        data["admissible"] = self.matrix.admissible
        data["per_operator"] = self.per_operator()
        data["balanced_laxity"] = self.balanced_laxity
        data["inadmissible"] = self.inadmissible_counts()
        data["per_source"] = self.per_source()
        data["estimate"] = self.estimate().to_json()
        if not timings and data.get("llm_pool"):
            data["llm_pool"].pop("cache", None)  # cache mode / replayed calls: differ between record and replay
        return data


def _tally_rows(results: Sequence[MutantResult], key: Callable[[MutantResult], str]) -> dict[str, dict[str, object]]:
    table: dict[str, dict[str, object]] = {}
    for result in results:
        row = table.setdefault(key(result),
                               {"total": 0, "admissible": 0, "alpha": 0, "beta": 0, "gamma": 0, "delta": 0,
                                "inadmissible": {}})
        row["total"] = int(row["total"]) + 1  # type: ignore[call-overload]
        if result.cell is None:
            reasons: dict[str, int] = row["inadmissible"]  # type: ignore[assignment]
            reason = result.inadmissible_reason or "?"
            reasons[reason] = reasons.get(reason, 0) + 1
        else:
            row["admissible"] = int(row["admissible"]) + 1  # type: ignore[call-overload]
            row[result.cell.value] = int(row[result.cell.value]) + 1  # type: ignore[call-overload]
    for row in table.values():  # each operator's own laxity, beside the pooled one (issue 19, item 11)
        admissible = int(row["admissible"])  # type: ignore[call-overload]
        row["laxity"] = int(row["beta"]) / admissible if admissible else None  # type: ignore[call-overload]
    return dict(sorted(table.items()))


def _no_usage() -> dict[str, object]:
    """LLM usage of a source that makes no LLM call (mechanical operators)."""
    return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "truncations": 0,
            "budget_refusals": 0, "errors": {}}


def _strip_verdict(verdict: dict, timings: bool) -> None:
    verdict.pop("output_tail", None)
    verdict.pop("cached", None)
    verdict.pop("raised", None)  # the exceptions per failing test (reproduce check reads them), not MPE's
    if verdict.get("implied") is None:
        verdict.pop("implied", None)
    if not timings:
        verdict.pop("duration", None)
        verdict.pop("time_limit", None)  # scaled from measured durations


def check_fix(fix: str, patterns: Sequence[str]) -> str:
    """The source part of a fix; an empty or test-only fix is an error."""
    if not fix.strip():
        raise MPEError("the fix patch is empty: MPE needs a fix to mutate")
    source, _ = split_patch(fix, patterns)
    if not source.strip():
        raise MPEError("the fix patch touches only test files: MPE needs a source fix to mutate")
    return source


#: hears (stage, done, total) while an MPE runs; total is None while unknown
Progress = Callable[[str, int, int | None], None]


def _quiet(stage: str, done: int, total: int | None) -> None:
    """The default progress callback: nobody listens."""


def evaluate(
    executor: InstanceExecutor,
    fix: str,
    candidate: TestPatch,
    reference: TestPatch,
    config: MPEConfig | None = None,
    *,
    llm_mutator: LLMMutator | None = None,
    pool: ExecutorPool | None = None,
    progress: Progress | None = None,  # hears ("mutants", done, total) as the mutants run
) -> MPEResult:
    """MPE of ``candidate`` against ``reference`` with ``config`` (default :class:`MPEConfig`). The pool holds
    the mechanical mutants (``config.mechanical``) and those of ``llm_mutator`` (if given); the LLM is only
    called for a fail-to-pass candidate. With ``config.workers`` > 1, mutants run in parallel on executors
    leased from ``pool`` (the caller owns and closes it)."""
    config = config or MPEConfig()
    timings: dict[str, float] = {}
    started = time.monotonic()
    fix = check_fix(fix, executor.settings.test_patterns)
    team = Workers(executor, config.workers, pool)  # the phases share the workers
    early: EarlyRecording | None = None
    early_pool: EarlyPool | None = None
    ctx: FixContext | None = None
    try:
        if team.parallel and (config.mechanical or config.implied):
            ctx = fix_context(executor, fix)  # before any worker may borrow this executor
        _cold_start(team, timings)
        if team.parallel and config.mechanical and ctx is not None:  # pool and recordings beside the F->P checks
            targets = record_targets(ctx)
            if targets and BUGGY_RECORDS in recordings_needed(_pool_options(config)["operators"]):
                early = EarlyRecording(team, fix, [candidate, reference], targets)
            early_pool = EarlyPool(team, fix, [candidate, reference], ctx, early.recorder if early else None,
                             **_pool_options(config))
        return _evaluate(team, fix, candidate, reference, config, llm_mutator, timings, started, early_pool,
                         progress, ctx)
    finally:
        team.close()
        if early is not None:
            early.join()


def _cold_start(team: Workers, timings: dict[str, float]) -> None:
    """Open the workspaces and start (and prime) the fork servers before the first verdict, timed apart as
    ``timings["cold_start_s"]``: the first verdict on an instance pays for them (and for the imports a warm
    server makes), every later one does not, so a benchmark keeps it out of its per-instance ratio. An
    executor that is warm already costs nothing here."""
    mark = time.monotonic()
    team.map([lambda ex: ex.warm_up() for _ in range(team.workers)])
    timings["cold_start_s"] = time.monotonic() - mark


def _evaluate(team: Workers, fix: str, candidate: TestPatch, reference: TestPatch, config: MPEConfig,
              llm_mutator: LLMMutator | None, timings: dict[str, float], started: float,
              early_pool: EarlyPool | None, progress: Progress | None, ctx: FixContext | None = None) -> MPEResult:
    executor = team.executor
    tau, seed, paper_classes = config.tau, config.seed, config.paper_classes
    # buggy and fixed runs are independent: on two workers they run side by side
    combine = config.trust_tests  # untrusted tests never share a process: one could rewrite the other's result
    buggy, fixed = team.map([lambda ex: ex.verdicts("", [candidate, reference], combine=combine),
                             lambda ex: ex.verdicts(fix, [candidate, reference], combine=combine)])
    cand, ref = (FailToPass(test_ids=t.ids, buggy=b, fixed=f)
                 for t, b, f in zip([candidate, reference], buggy, fixed, strict=True))
    timings["fail_to_pass"] = time.monotonic() - started - timings.get("cold_start_s", 0.0)
    if not ref.fail_to_pass:
        raise MPEError(f"the reference test {reference.name or ''} is not fail-to-pass ({ref.summary()}): "
                       "no classification")
    fail_to_pass = cand.fail_to_pass
    result = MPEResult(
        confidence=config.confidence, point_classes=config.point_classes, sequential=config.is_sequential,
        instance_id=executor.instance.instance_id, test=candidate.name, reference=reference.name,
        test_ids=candidate.ids, reference_ids=reference.ids, candidate_buggy=cand.buggy, candidate_fixed=cand.fixed,
        reference_buggy=ref.buggy, reference_fixed=ref.fixed, fail_to_pass=fail_to_pass, tau=tau, seed=seed,
        operators=[op.value for op in config.operators],
        mutators=(["mechanical"] if config.mechanical else []) + (["llm"] if llm_mutator is not None else []),
        test_class=classify(fails_on_buggy=cand.buggy.failed, passes_on_fixed=cand.fixed.passed, laxity=None,
                            tau=tau, admissible=cand.admissible, paper_classes=paper_classes),
    )
    result.tampering = list(dict.fromkeys([*cand.buggy.tampering, *cand.fixed.tampering]))
    result.isolation = cand.fixed.isolation
    if config.reject_tampering and result.tampering:
        result.test_class = TestClass.INVALID
    if not fail_to_pass or result.test_class is TestClass.INVALID:
        result.timings = timings
        return result
    result.time_limits = {"candidate": config.mutant_limit(cand.fixed.duration, executor.settings.timeout),
                          "reference": config.mutant_limit(ref.fixed.duration, executor.settings.timeout)}
    mark = time.monotonic()
    if early_pool is not None:
        mutant_pool = early_pool.result()
        timings["early_pool"] = 1.0  # "recording" then overlapped the F->P checks; "pool" is the wait after them
    elif config.mechanical:
        mutant_pool = build_pool(executor, fix, [candidate, reference], mapper=team.map, **_pool_options(config))
    else:
        mutant_pool = Pool()
    timings["pool"] = time.monotonic() - mark
    timings["recording"] = mutant_pool.recording_seconds
    if llm_mutator is not None:
        mark = time.monotonic()
        report = llm_mutator.extend(executor, fix, candidate, reference, mutant_pool)
        timings["llm_pool"] = time.monotonic() - mark
        result.llm_pool = report.to_dict()
        result.llm_usage = {"per_operator": report.usage_per_operator,
                            "per_source": {"mechanical": _no_usage(), "llm": report.usage_total}}
        if not report.complete:
            result.pool_complete = False
            result.pool_incomplete_reason = f"LLM pool incomplete: {report.incomplete_reason}"
    mark = time.monotonic()
    result.pool = mutant_pool.summary()
    result.warnings = list(mutant_pool.warnings)
    implied: Implied | None = None
    if config.implied:  # timed apart from the mutant runs
        reach_mark = time.monotonic()
        drawable = [m for batch in capped(rounds(mutant_pool.mutants, config.seed), config.max_mutants)
                    for m in batch] if config.is_sequential else list(mutant_pool.mutants)
        implied = _reach(team, fix, ctx, candidate, reference, cand.fixed, ref.fixed, drawable, result,
                         mutant_pool.fixed_records)
        timings["reach"] = time.monotonic() - reach_mark
    mark = time.monotonic()
    run = functools.partial(run_mutants, executor, candidate=candidate, reference=reference, timings=timings,
                            team=team, combine=combine, implied=implied,
                            limits=(result.time_limits["candidate"], result.time_limits["reference"]))
    if config.is_sequential:
        _run_sequential(result, mutant_pool.mutants, run, config, progress)
    else:
        result.mutants = run(mutants=mutant_pool.mutants, progress=progress)
        result.stop = Stop.FIXED.value
        result.frame = _frame(result.mutants, mutant_pool.mutants, mutant_pool.dropped)
    result.census = all(row["drawn"] == row["pool"] for row in result.frame.values())
    timings["mutants"] = time.monotonic() - mark
    result.candidate_timeouts = sum(1 for r in result.mutants if r.candidate.outcome is Outcome.TIMEOUT)
    result.reference_timeouts = sum(1 for r in result.mutants if r.reference.outcome is Outcome.TIMEOUT)
    result.tampering = list(dict.fromkeys([*result.tampering, *(n for r in result.mutants
                                                                 for n in r.candidate.tampering)]))
    result.matrix = _matrix(result.mutants)
    if result.pool_complete:
        result.laxity = result.matrix.laxity
        bounds = result.estimate().interval
        result.interval = list(bounds) if bounds else None
        result.test_class = classify(fails_on_buggy=True, passes_on_fixed=True, laxity=result.laxity, tau=tau,
                                     paper_classes=paper_classes,
                                     interval=None if config.point_classes else bounds)
    else:  # fail closed: the finished mutants are kept (matrix, verdicts), no laxity and no class from them
        result.laxity = None
        result.test_class = TestClass.INCONCLUSIVE
    if config.reject_tampering and result.tampering:
        result.test_class = TestClass.INVALID
    result.runs = _count_runs(result, implied)
    timings["total"] = time.monotonic() - started
    result.timings = timings
    return result


MIN_PROMISING = 2
"""The fewest drawable mutants that could be unreached by a test (function bodies only, none the recorder saw
it call) for which its reach pass is made: a pass costs one run, an implied verdict saves one."""


def _reach(team: Workers, fix: str, ctx: FixContext | None, candidate: TestPatch, reference: TestPatch,
           candidate_fixed: Verdict, reference_fixed: Verdict, mutants: Sequence[Mutant],
           result: MPEResult, records: list[dict[str, Any]]) -> Implied | None:
    """The implied-run decider of this MPE, with both tests' reach passes made (see :mod:`coharden.mpe.implied`),
    or None when no drawable mutant could have an implied verdict. Flaky tests go to ``result.flaky`` and a
    warning; ``result.reach`` says per test whether its verdicts may be implied."""
    executor = team.executor
    ctx = ctx or fix_context(executor, fix)
    base = functools.cache(executor.base_file)
    implied = Implied(fix, {c.path: c.new for c in ctx.files}, base,
                      {"candidate": (candidate, candidate_fixed), "reference": (reference, reference_fixed)})
    labels = dict(zip(("candidate", "reference"), test_labels([candidate, reference]), strict=True))
    same = (candidate.patch, list(candidate.ids)) == (reference.patch, list(reference.ids))
    roles = [role for role in (["candidate"] if same else ["candidate", "reference"])
             if implied.promising(mutants, called_by(records, labels[role]) if records else None) >= MIN_PROMISING]
    if not roles:
        result.reach = {role: "no pass: too few drawable mutants could be unreached" for role in labels}
        return None
    team.map([functools.partial(lambda ex, role: implied.measure(ex, role), role=role) for role in roles])
    if same:
        implied.reach["reference"] = implied.reach["candidate"]
        if "candidate" in implied.flaky:
            implied.flaky["reference"] = implied.flaky["candidate"]
    for role in ("candidate", "reference"):
        reach = implied.reach.get(role)
        result.reach[role] = "complete" if implied.usable(role) else \
            (f"flaky on the fixed code ({implied.flaky[role]})" if role in implied.flaky else
             reach.why or "unusable" if reach is not None else "no pass: too few drawable mutants could be unreached")
    result.flaky = [f"{role}: {outcomes}" for role, outcomes in sorted(implied.flaky.items())]
    result.warnings += [f"the {role} test is flaky on the fixed code ({outcomes}): none of its outcomes is implied"
                        for role, outcomes in sorted(implied.flaky.items())]
    return implied


def _count_runs(result: MPEResult, implied: Implied | None) -> dict[str, dict[str, int]]:
    """``MPEResult.runs``: per test, the runs made, the verdicts from the store and those implied."""
    counts: dict[str, dict[str, int]] = {}
    mine = {"candidate": [result.candidate_buggy, result.candidate_fixed, *(r.candidate for r in result.mutants)],
            "reference": [result.reference_buggy, result.reference_fixed, *(r.reference for r in result.mutants)]}
    for role, verdicts in mine.items():
        row = {"made": 0, "cached": 0, "implied": 0}
        for verdict in verdicts:
            row["implied" if verdict.implied else "cached" if verdict.cached else "made"] += 1
        reach = implied.reach.get(role) if implied is not None else None
        if reach is not None and reach.outcome:  # a reach pass ran, or was served from the store
            row["cached" if reach.cached else "made"] += 1
        counts[role] = row
    return counts


def _pool_options(config: MPEConfig) -> dict[str, Any]:
    """build_pool's options: N per operator, or (sequential) every mutant in its seeded draw order."""
    mechanical = mechanical_operators()
    return {"operators": [op for op in config.operators if op in mechanical],
            "per_operator": None if config.is_sequential else config.per_operator, "seed": config.seed,
            "prefer_exercised": config.prefer_exercised, "ordered": config.is_sequential}


def _matrix(results: Sequence[MutantResult]) -> Matrix:
    matrix = Matrix()
    for mr in results:
        if mr.cell is not None:
            matrix.add(mr.mutant.id, mr.cell)
    return matrix


def _frame(results: Sequence[MutantResult], pool: Sequence[Mutant],
           over_budget: Counter[tuple[str, str]] | None = None) -> dict[str, dict[str, int]]:
    """The sampling frame per operator: its admitted mutants (``pool``: drawn ones plus, for a fixed budget,
    those left over budget), how many were run and how many of those were admissible."""
    frame: dict[str, dict[str, int]] = {}
    for mutant in pool:
        row = frame.setdefault(mutant.operator.value, {"pool": 0, "drawn": 0, "admissible": 0})
        row["pool"] += 1
    for (op, reason), n in (over_budget or Counter()).items():
        if reason == "over_budget" and op in frame:
            frame[op]["pool"] += n
    for mr in results:
        row = frame.setdefault(mr.mutant.operator.value, {"pool": 0, "drawn": 0, "admissible": 0})
        row["drawn"] += 1
        row["admissible"] += mr.cell is not None
    return dict(sorted(frame.items()))


def _run_sequential(result: MPEResult, pool: Sequence[Mutant], run: Callable[..., list[MutantResult]],
                    config: MPEConfig, progress: Progress | None) -> None:
    """Run the pool round by round (see :mod:`coharden.mpe.sequential`) until the interval decides the class,
    the cap is reached or the pool is spent. Each round's mutants run in parallel; the decision is taken only
    between rounds, so the mutants run (and the result) do not depend on the number of workers."""
    planned = capped(rounds(pool, config.seed), config.max_mutants)
    total = sum(len(batch) for batch in planned)
    tell = progress or _quiet
    done: list[MutantResult] = []

    def shifted(stage: str, finished: int, _: int | None) -> None:
        tell(stage, len(done) + finished, total)

    decided = False
    for index, batch in enumerate(planned):
        done += run(mutants=batch, progress=shifted)
        result.rounds = index + 1
        matrix = _matrix(done)
        estimate = Estimate(beta=len(matrix.beta), admissible=matrix.admissible, confidence=config.confidence,
                            census=len(done) == len(pool))
        decided = estimate.side(config.tau) in ("lax", "rigorous")
        if decided:
            break
    result.mutants = done
    result.stop = stop_reason(drawn=len(done), pool=len(pool), decided=decided).value
    result.frame = _frame(done, pool)


def run_mutants(executor: InstanceExecutor, mutants: Sequence[Mutant], candidate: TestPatch, reference: TestPatch,
                workers: int = 1, pool: ExecutorPool | None = None, progress: Progress | None = None,
                timings: dict[str, float] | None = None, team: Workers | None = None, *,
                limits: tuple[float | None, float | None] = (None, None), combine: bool = False,
                implied: Implied | None = None) -> list[MutantResult]:
    """Verdicts of both tests on every mutant. With ``workers`` > 1 and a ``pool``, each worker thread leases
    its own executor (its own workspace) from the pool, so parallel and serial runs see the same files
    (``team``: the workers of an MPE run, shared with its other phases). ``timings["timeouts"]`` gets the
    seconds spent on mutants with a timed-out verdict (the combined run and the attribution runs).
    ``limits``: the time limit of the candidate and of the reference on a mutant; ``combine``: both tests are
    trusted to share a process; ``implied``: the verdicts implied without a run (see :mod:`coharden.mpe.implied`)."""
    spent = {"timeouts": 0.0}
    lock_spent = threading.Lock()
    tell = progress or _quiet
    done = [0]
    counting = threading.Lock()
    tell("mutants", 0, len(mutants))

    def one(ex: InstanceExecutor, mutant: Mutant) -> MutantResult:
        mark = time.monotonic()
        # a cell needs pass / fail only: a test process stops at its first failure
        given = [implied.implied(mutant, role) if implied is not None else None
                 for role in ("candidate", "reference")]
        todo = [i for i, verdict in enumerate(given) if verdict is None]
        tests = [candidate, reference]
        ran = iter(ex.verdicts(mutant.patch, [tests[i] for i in todo], combine=combine and len(todo) > 1,
                               limits=[limits[i] for i in todo], first_failure=True) if todo else [])
        cand, ref = (verdict if verdict is not None else next(ran) for verdict in given)
        if Outcome.TIMEOUT in (cand.outcome, ref.outcome):
            with lock_spent:
                spent["timeouts"] += time.monotonic() - mark
        which = cell(cand.passed, ref.passed) if cand.admissible and ref.admissible else None
        with counting:
            done[0] += 1
            tell("mutants", done[0], len(mutants))
        return MutantResult(mutant=mutant, candidate=cand, reference=ref, cell=which)

    tasks = [functools.partial(one, mutant=m) for m in mutants]
    try:
        if team is not None:
            return team.map(tasks)
        with Workers(executor, workers if len(mutants) > 1 else 1, pool) as own:
            return own.map(tasks)
    finally:
        if timings is not None:
            timings["timeouts"] = timings.get("timeouts", 0.0) + spent["timeouts"]
