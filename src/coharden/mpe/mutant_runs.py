"""Running an MPE's mutants against both tests: every drawn mutant at once (a fixed budget) or round by round
until the interval decides the class (sequential MPE, :mod:`coharden.mpe.sequential`), with the matrix and the
sampling frame of what ran, and the laxity and class they give (:func:`classify_result`)."""

from __future__ import annotations

import functools
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from coharden.execution.executor import InstanceExecutor
from coharden.mpe import behaviours
from coharden.mpe.implied import Implied
from coharden.mpe.result import IMPLAUSIBLE, MPEResult, MutantResult
from coharden.mpe.sequential import Stop, capped, rounds, stop_reason
from coharden.mpe.workers import Workers
from coharden.schema.estimate import Estimate
from coharden.schema.matrix import FAIL_TO_PASS, Matrix, TestClass, cell, classify
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome

#: hears (stage, done, total) while an MPE runs; total is None while unknown
Progress = Callable[[str, int, int | None], None]


def _quiet(stage: str, done: int, total: int | None) -> None:
    """The default progress callback: nobody listens."""


def matrix_of(results: Sequence[MutantResult]) -> Matrix:
    """The matrix of the admissible mutants run."""
    matrix = Matrix()
    for mr in results:
        if mr.cell is not None:
            matrix.add(mr.mutant.id, mr.cell)
    return matrix


def counted_matrix(results: Sequence[MutantResult], config: MPEConfig) -> Matrix:
    """The matrix laxity is computed on: over distinct behaviours (each set on the results here) or mutants."""
    if not config.counts_behaviours:
        return matrix_of(results)
    behaviours.assign(results)
    return behaviours.behaviour_matrix(results)


def sampling_frame(results: Sequence[MutantResult], pool: Sequence[Mutant],
                   over_budget: Counter[tuple[str, str]] | None = None) -> dict[str, dict[str, int]]:
    """The sampling frame per operator: its admitted mutants (``pool``: drawn ones plus, for a fixed budget,
    those left over budget), how many were run, how many of those were admissible (counted: plausible too) and
    how many broke a PASS_TO_PASS test (``implausible``)."""
    frame: dict[str, dict[str, int]] = {}

    def row_of(op: str) -> dict[str, int]:
        return frame.setdefault(op, {"pool": 0, "drawn": 0, "admissible": 0, "implausible": 0})

    for mutant in pool:
        row_of(str(mutant.operator))["pool"] += 1
    for (op, reason), n in (over_budget or Counter()).items():
        if reason == "over_budget" and op in frame:
            frame[op]["pool"] += n
    for mr in results:
        row = row_of(str(mr.mutant.operator))
        row["drawn"] += 1
        row["admissible"] += mr.cell is not None
        row["implausible"] += mr.inadmissible_reason == IMPLAUSIBLE
    return dict(sorted(frame.items()))


def run_sequential(result: MPEResult, pool: Sequence[Mutant], run: Callable[..., list[MutantResult]],
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
        matrix = counted_matrix(done, config)
        estimate = Estimate(beta=len(matrix.beta), admissible=matrix.admissible, confidence=config.confidence,
                            census=len(done) == len(pool))
        decided = estimate.side(config.tau) in ("lax", "rigorous")
        if decided:
            break
    result.mutants = done
    result.stop = stop_reason(drawn=len(done), pool=len(pool), decided=decided).value
    result.frame = sampling_frame(done, pool)


@dataclass(frozen=True)
class MutantRunPlan:
    """What runs on each mutant, and how: the ``candidate`` and the ``reference`` test and, with
    ``plausibility``, the PASS_TO_PASS tests, run on every mutant before the reference (``limits`` then has
    their limit third): a mutant that breaks one gets no cell (see :mod:`coharden.mpe.plausibility`).
    ``limits``: the time limit of the candidate and of the reference on a mutant; ``combine``: both tests are
    trusted to share a process; ``implied``: the verdicts implied without a run (see :mod:`coharden.mpe.implied`).
    ``skip_unneeded``: a test is not run on a mutant the other test's verdict already makes inadmissible (a
    TIMEOUT: a mutant that never ends costs one limit, not two); the reference runs first, as its verdicts are
    stored and shared by every candidate graded on the instance. ``first_failure``: a process stops at its first
    failure (a cell needs pass / fail only); off when behaviours are told apart by every test's outcome."""

    candidate: TestPatch
    reference: TestPatch
    limits: Sequence[float | None] = (None, None)
    combine: bool = False
    implied: Implied | None = None
    skip_unneeded: bool = False
    plausibility: TestPatch | None = None
    first_failure: bool = True


def run_mutants(team: Workers, mutants: Sequence[Mutant], plan: MutantRunPlan, progress: Progress | None = None,
                timings: dict[str, float] | None = None) -> list[MutantResult]:
    """Verdicts of ``plan``'s tests on every mutant. Each of ``team``'s worker threads (the workers of an MPE
    run, shared with its other phases) leases its own executor (its own workspace), so parallel and serial runs
    see the same files. ``timings["timeouts"]`` gets the seconds spent on mutants with a timed-out verdict (the
    combined run and the attribution runs)."""
    candidate, reference, plausibility, implied = plan.candidate, plan.reference, plan.plausibility, plan.implied
    limits, combine, first_failure, skip_unneeded = plan.limits, plan.combine, plan.first_failure, plan.skip_unneeded
    spent = {"timeouts": 0.0}
    lock_spent = threading.Lock()
    tell = progress or _quiet
    done = [0]
    counting = threading.Lock()
    tell("mutants", 0, len(mutants))

    def one(ex: InstanceExecutor, mutant: Mutant) -> MutantResult:
        mark = time.monotonic()
        given = [implied.implied(mutant, role) if implied is not None else None
                 for role in ("candidate", "reference")]
        tests = [candidate, reference]
        if plausibility is not None:  # never implied: no reach pass is made for them
            given.append(None)
            tests.append(plausibility)
        # the PASS_TO_PASS tests first, then the reference: both stored, shared by every candidate
        todo = sorted((i for i, verdict in enumerate(given) if verdict is None), reverse=True)
        ran = dict(zip(todo, ex.verdicts(mutant.patch, [tests[i] for i in todo],
                                         combine=combine and len(todo) > 1 and plausibility is None,
                                         limits=[limits[i] for i in todo], first_failure=first_failure,
                                         all_or_none=skip_unneeded) if todo else [], strict=True))
        verdicts = [verdict if verdict is not None else ran[i] for i, verdict in enumerate(given)]
        cand, ref = verdicts[0], verdicts[1]
        if any(v.outcome is Outcome.TIMEOUT for v in verdicts):
            with lock_spent:
                spent["timeouts"] += time.monotonic() - mark
        result = MutantResult(mutant=mutant, candidate=cand, reference=ref,
                              plausibility=verdicts[2] if plausibility is not None else None)
        counts = cand.admissible and ref.admissible and (plausibility is None or result.plausible is True)
        result.cell = cell(cand.passed, ref.passed) if counts else None
        with counting:
            done[0] += 1
            tell("mutants", done[0], len(mutants))
        return result

    tasks = [functools.partial(one, mutant=m) for m in mutants]
    try:
        return team.map(tasks)
    finally:
        if timings is not None:
            timings["timeouts"] = timings.get("timeouts", 0.0) + spent["timeouts"]


def classify_result(result: MPEResult, config: MPEConfig) -> None:
    """Matrix, laxity with its interval and class from the mutants run (none from an incomplete pool): over
    distinct behaviours by default, the per-mutant laxity beside it."""
    result.matrix = matrix_of(result.mutants)
    result.counted = "behaviours" if config.counts_behaviours else "mutants"
    result.behaviour_matrix = counted_matrix(result.mutants, config) if config.counts_behaviours else Matrix()
    if result.pool_complete:
        estimate = result.estimate()
        result.laxity = estimate.laxity
        result.mutant_laxity = result.matrix.laxity
        bounds = estimate.interval
        result.interval = list(bounds) if bounds else None
        result.test_class = classify(FAIL_TO_PASS, laxity=result.laxity, tau=config.tau,
                                     paper_classes=config.paper_classes,
                                     interval=None if config.point_classes else bounds)
        result.undecided = undecided_reason(result)
    else:  # fail closed: the finished mutants are kept (matrix, verdicts), no laxity and no class from them
        result.laxity = None
        result.test_class = TestClass.INCONCLUSIVE
    if config.reject_tampering and result.tampering:
        result.test_class = TestClass.INVALID


def undecided_reason(result: MPEResult) -> str | None:
    """Why the class of a F->P test is not decided: ``pool_too_small`` (a Borderline test after every mutant
    of the pool ran: more mutants, not more runs, could decide), ``cap`` (``max_mutants`` reached),
    ``fixed_budget``; for Inconclusive, ``empty_pool`` (no operator made a mutant of this fix) or
    ``no_admissible`` (none was admissible and plausible); :data:`NEEDS_NETWORK` is set before any mutant runs.
    None for a decided class."""
    if result.test_class is TestClass.INCONCLUSIVE:
        return "no_admissible" if result.mutants else "empty_pool"
    if result.test_class is not TestClass.BORDERLINE:
        return None
    return {Stop.POOL.value: "pool_too_small", Stop.CAP.value: "cap"}.get(result.stop, "fixed_budget")
