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
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coharden.errors import CoHardenError
from coharden.execution import interrupt
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pool import ExecutorPool
from coharden.execution.verify import FailToPass
from coharden.mpe.early import EarlyPool, EarlyRecording
from coharden.mpe.implied import Implied
from coharden.mpe.mutant_runs import (
    MutantRunPlan,
    Progress,
    classify_result,
    run_mutants,
    run_sequential,
    sampling_frame,
)
from coharden.mpe.plausibility import pass_to_pass
from coharden.mpe.result import MPEResult
from coharden.mpe.sequential import Stop, capped, rounds
from coharden.mpe.workers import Workers
from coharden.mutation.context import FixContext, record_targets
from coharden.mutation.pool import (
    Pool,
    PoolRequest,
    build_pool,
    called_by,
    fix_context,
    recordings_needed,
    test_labels,
)
from coharden.mutation.registry import BUGGY_RECORDS
from coharden.patches import split_patch
from coharden.schema.matrix import NEEDS_NETWORK, Reproduction, TestClass, classify
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome

if TYPE_CHECKING:
    from coharden.mutation.llm_operators import LLMMutator


class MPEError(CoHardenError):
    """MPE cannot classify: bad fix, or a reference test that is not fail-to-pass."""


def _no_usage() -> dict[str, object]:
    """LLM usage of a source that makes no LLM call (mechanical operators)."""
    return {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0, "cost_usd": 0.0, "truncations": 0,
            "budget_refusals": 0, "errors": {}}


def check_fix(fix: str, patterns: Sequence[str]) -> str:
    """The source part of a fix; an empty or test-only fix is an error."""
    if not fix.strip():
        raise MPEError("the fix patch is empty: MPE needs a fix to mutate")
    source, _ = split_patch(fix, patterns)
    if not source.strip():
        raise MPEError("the fix patch touches only test files: MPE needs a source fix to mutate")
    return source


@dataclass(frozen=True)
class MPERequest:
    """What one MPE asks: how ``candidate`` fares against ``reference`` on the mutants of ``fix`` (its test files
    are left out), under ``config``. The two tests are told apart: only the candidate is classified."""

    fix: str
    candidate: TestPatch
    reference: TestPatch
    config: MPEConfig = field(default_factory=MPEConfig)


def evaluate(executor: InstanceExecutor, request: MPERequest, *, llm_mutator: LLMMutator | None = None,
             pool: ExecutorPool | None = None, progress: Progress | None = None) -> MPEResult:
    """MPE of ``request.candidate`` against ``request.reference``. The pool holds the mechanical mutants
    (``config.mechanical``) and those of ``llm_mutator`` (if given); the LLM is only called for a fail-to-pass
    candidate. With ``config.workers`` > 1, mutants run in parallel on executors leased from ``pool`` (the
    caller owns and closes it). ``progress`` hears ("mutants", done, total) as the mutants run."""
    candidate, reference, config = request.candidate, request.reference, request.config
    timings: dict[str, float] = {}
    started = time.monotonic()
    fix = check_fix(request.fix, executor.settings.tests.test_patterns)
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
            wanted = PoolRequest.for_mpe(fix, [candidate, reference], config)
            if targets and BUGGY_RECORDS in recordings_needed(wanted.operators):
                early = EarlyRecording(team, fix, [candidate, reference], targets)
            early_pool = EarlyPool(team, wanted, ctx, early.recorder if early else None)
        return _evaluate(_Run(team, request, llm_mutator=llm_mutator, progress=progress,
                              early_pool=early_pool, ctx=ctx, timings=timings, started=started))
    except KeyboardInterrupt:
        # Ctrl-C: no test process starts any more, and nothing below waits for the running ones (their threads
        # are daemons; each stops at its next test process, or when the caller closes its executor)
        interrupt.request_stop()
        raise
    finally:
        team.close()
        if early is not None and not interrupt.stop_requested():
            early.join()


def _cold_start(team: Workers, timings: dict[str, float]) -> None:
    """Open the workspaces and start (and prime) the fork servers before the first verdict, timed apart as
    ``timings["cold_start_s"]``: the first verdict on an instance pays for them (and for the imports a warm
    server makes), every later one does not, so a benchmark keeps it out of its per-instance ratio. An
    executor that is warm already costs nothing here."""
    mark = time.monotonic()
    team.map([lambda ex: ex.warm_up() for _ in range(team.workers)])
    timings["cold_start_s"] = time.monotonic() - mark


@dataclass
class _Run:
    """What one MPE's phases share: its workers, the request (the fix, both tests, the settings), what was
    started for it (the LLM mutator, the pool built beside the F->P checks, the fix's context), and the phases'
    timings."""

    team: Workers
    request: MPERequest
    llm_mutator: LLMMutator | None = None
    progress: Progress | None = None
    early_pool: EarlyPool | None = None
    ctx: FixContext | None = None
    timings: dict[str, float] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def combine(self) -> bool:
        """Whether both tests share one process: untrusted tests never do (one could rewrite the other's
        result)."""
        return self.request.config.trust_tests


def _evaluate(run: _Run) -> MPEResult:
    config, timings = run.request.config, run.timings
    result = _fail_to_pass(run)
    if not result.fail_to_pass or result.test_class is TestClass.INVALID:
        result.timings = timings
        return result
    timeout = run.team.executor.settings.sandbox.timeout
    result.time_limits = {"candidate": config.mutant_limit(result.candidate_fixed.duration, timeout),
                          "reference": config.mutant_limit(result.reference_fixed.duration, timeout)}
    p2p = _pass_to_pass(run.team, run.request.fix, config, result, timings)
    mutant_pool = _mutant_pool(run, result)
    result.pool = mutant_pool.summary()
    result.warnings = list(mutant_pool.warnings)
    implied: Implied | None = None
    if config.implied:  # timed apart from the mutant runs
        reach_mark = time.monotonic()
        drawable = [m for batch in capped(rounds(mutant_pool.mutants, config.seed), config.max_mutants)
                    for m in batch] if config.is_sequential else list(mutant_pool.mutants)
        implied = _reach(run, drawable, result, mutant_pool.fixed_records)
        timings["reach"] = time.monotonic() - reach_mark
    _run_pool(run, mutant_pool, result, implied, p2p)
    classify_result(result, config)
    result.runs = _count_runs(result, implied)
    timings["total"] = time.monotonic() - run.started
    result.timings = timings
    return result


def _fail_to_pass(run: _Run) -> MPEResult:
    """Both tests on the buggy and on the fixed code: the result with their verdicts and the candidate's class
    before any mutant. :class:`MPEError` when the reference is not fail-to-pass (nothing can be classified)."""
    team, request = run.team, run.request
    fix, candidate, reference, config = request.fix, request.candidate, request.reference, request.config
    combine, timings, started, llm_mutator = run.combine, run.timings, run.started, run.llm_mutator
    executor = team.executor
    tau, seed, paper_classes = config.tau, config.seed, config.paper_classes
    # buggy and fixed runs are independent: on two workers they run side by side
    buggy, fixed = team.map([lambda ex: ex.verdicts("", [candidate, reference], combine=combine),
                             lambda ex: ex.verdicts(fix, [candidate, reference], combine=combine)])
    cand, ref = (FailToPass(test_ids=t.ids, buggy=b, fixed=f)
                 for t, b, f in zip([candidate, reference], buggy, fixed, strict=True))
    timings["fail_to_pass"] = time.monotonic() - started - timings.get("cold_start_s", 0.0)
    if not ref.fail_to_pass:
        network = f"{NEEDS_NETWORK}: " if ref.fixed.failed and ref.fixed.network else ""
        raise MPEError(f"{network}the reference test {reference.name or ''} is not fail-to-pass ({ref.summary()}): "
                       "no classification")
    result = MPEResult(
        confidence=config.confidence, point_classes=config.point_classes, sequential=config.is_sequential,
        instance_id=executor.instance.instance_id, test=candidate.name, reference=reference.name,
        test_ids=candidate.ids, reference_ids=reference.ids, candidate_buggy=cand.buggy, candidate_fixed=cand.fixed,
        reference_buggy=ref.buggy, reference_fixed=ref.fixed, fail_to_pass=cand.fail_to_pass, tau=tau, seed=seed,
        operators=[str(op) for op in config.operators],
        mutators=(["mechanical"] if config.mechanical else []) + (["llm"] if llm_mutator is not None else []),
        test_class=classify(Reproduction(cand.buggy.failed, cand.fixed.passed, cand.admissible), laxity=None,
                            tau=tau, paper_classes=paper_classes),
    )
    result.tampering = list(dict.fromkeys([*cand.buggy.tampering, *cand.fixed.tampering]))
    result.isolation = cand.fixed.isolation
    if cand.fixed.failed and cand.fixed.network and not cand.fixed.tampering:
        # one rule everywhere (mpe, eval, study table): a test that fails on the fixed code only where it reaches
        # for the network is not Misaligned - its runs here say nothing about it
        result.test_class = TestClass.INCONCLUSIVE
        result.undecided = NEEDS_NETWORK
        result.warnings.append("the test fails on the fixed code only where it reaches for the network, which "
                               "test runs do not have (the setting network = true gives it): Inconclusive "
                               "(needs_network), its runs here say nothing about the test")
    if config.reject_tampering and result.tampering:
        result.test_class = TestClass.INVALID
    return result


def _pass_to_pass(team: Workers, fix: str, config: MPEConfig, result: MPEResult,
                  timings: dict[str, float]) -> TestPatch | None:
    """The PASS_TO_PASS tests every mutant runs (plausibility), with their time limit in ``result``; None when
    the rule is off or nothing can be measured (then a warning says why)."""
    if not config.measures_plausibility:
        return None
    mark = time.monotonic()
    p2p = pass_to_pass(team.executor, fix)
    timings["pass_to_pass"] = time.monotonic() - mark
    result.plausibility = p2p.to_json()
    if p2p.test is None:
        result.warnings.append(f"plausibility not measured: {p2p.reason}; every admissible mutant counts")
        return None
    if p2p.fixed is not None:
        timeout = team.executor.settings.sandbox.timeout
        result.time_limits["plausibility"] = config.mutant_limit(p2p.fixed.duration, timeout)
    return p2p.test


def _mutant_pool(run: _Run, result: MPEResult) -> Pool:
    """The pool: mechanical (built beside the F->P checks when ``run.early_pool``, else now) and the LLM's; an
    LLM pool that could not be completed marks the result (fail closed)."""
    team, request = run.team, run.request
    fix, candidate, reference, config = request.fix, request.candidate, request.reference, request.config
    llm_mutator, early_pool, timings = run.llm_mutator, run.early_pool, run.timings
    executor = team.executor
    mark = time.monotonic()
    if early_pool is not None:
        mutant_pool = early_pool.result()
        timings["early_pool"] = 1.0  # "recording" then overlapped the F->P checks; "pool" is the wait after them
    elif config.mechanical:
        mutant_pool = build_pool(executor, PoolRequest.for_mpe(fix, [candidate, reference], config), mapper=team.map)
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
    return mutant_pool


def _run_pool(run: _Run, mutant_pool: Pool, result: MPEResult, implied: Implied | None,
              p2p: TestPatch | None = None) -> None:
    """Run the pool's mutants (all of them, or sequential rounds) into ``result``: verdicts, frame, census,
    timeouts and the tampering the candidate showed on them. ``p2p``: the PASS_TO_PASS tests every mutant
    runs too (plausibility)."""
    team, config, timings, progress = run.team, run.request.config, run.timings, run.progress
    mark = time.monotonic()
    limits = [result.time_limits["candidate"], result.time_limits["reference"]]
    if p2p is not None:
        limits.append(result.time_limits["plausibility"])
    plan = MutantRunPlan(run.request.candidate, run.request.reference, limits=limits, combine=run.combine,
                         implied=implied, skip_unneeded=config.implied, plausibility=p2p,
                         # a behaviour is every test's outcome: no process stops at its first failure then
                         first_failure=not config.counts_behaviours)
    runner = functools.partial(run_mutants, team, plan=plan, timings=timings)
    if config.is_sequential:
        run_sequential(result, mutant_pool.mutants, runner, config, progress)
    else:
        result.mutants = runner(mutants=mutant_pool.mutants, progress=progress)
        result.stop = Stop.FIXED.value
        result.frame = sampling_frame(result.mutants, mutant_pool.mutants, mutant_pool.dropped)
    result.census = all(row["drawn"] == row["pool"] for row in result.frame.values())
    timings["mutants"] = time.monotonic() - mark
    result.candidate_timeouts = sum(1 for r in result.mutants
                                    if r.candidate.outcome is Outcome.TIMEOUT and not r.candidate.implied)
    result.reference_timeouts = sum(1 for r in result.mutants
                                    if r.reference.outcome is Outcome.TIMEOUT and not r.reference.implied)
    result.tampering = list(dict.fromkeys([*result.tampering, *(n for r in result.mutants
                                                                 for n in r.candidate.tampering)]))


MIN_PROMISING = 2
"""The fewest drawable mutants that could be unreached by a test (function bodies only, none the recorder saw
it call) for which its reach pass is made: a pass costs one run, an implied verdict saves one."""


def _reach(run: _Run, mutants: Sequence[Mutant], result: MPEResult,
           records: list[dict[str, Any]]) -> Implied | None:
    """The implied-run decider of this MPE, with both tests' reach passes made (see :mod:`coharden.mpe.implied`),
    or None when no drawable mutant could have an implied verdict. Flaky tests go to ``result.flaky`` and a
    warning; ``result.reach`` says per test whether its verdicts may be implied."""
    team, fix, candidate, reference = run.team, run.request.fix, run.request.candidate, run.request.reference
    candidate_fixed, reference_fixed = result.candidate_fixed, result.reference_fixed
    executor = team.executor
    ctx = run.ctx or fix_context(executor, fix)
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
    """``MPEResult.runs``: per test, the runs made, the verdicts from the store, those implied (the test never
    reaches the mutated code: ``unreached``) and those not needed (the other test's verdict on the mutant is
    inadmissible, so its cell is empty whatever this one says: ``other_inadmissible``). Apart, because only an
    implied verdict is an outcome the test would have had."""
    counts: dict[str, dict[str, int]] = {}
    mine = {"candidate": [result.candidate_buggy, result.candidate_fixed, *(r.candidate for r in result.mutants)],
            "reference": [result.reference_buggy, result.reference_fixed, *(r.reference for r in result.mutants)]}
    for role, verdicts in mine.items():
        row = {"made": 0, "cached": 0, "implied": 0, "not_needed": 0}
        for verdict in verdicts:
            kind = "cached" if verdict.cached else "made"
            if verdict.implied:
                kind = "not_needed" if verdict.implied == "other_inadmissible" else "implied"
            row[kind] += 1
        reach = implied.reach.get(role) if implied is not None else None
        if reach is not None and reach.outcome:  # a reach pass ran, or was served from the store
            row["cached" if reach.cached else "made"] += 1
        counts[role] = row
    return counts

