"""The result of one MPE (:func:`coharden.mpe.evaluate.evaluate`): both tests' verdicts on the buggy and fixed
code and on every mutant run, the matrix, the laxity with its interval, the class, and how they were reached
(pool, sampling frame, stop, runs); its JSON and the summary row reports keep."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

from coharden.schema.estimate import DEFAULT_CONFIDENCE, Estimate
from coharden.schema.matrix import Cell, Matrix, TestClass
from coharden.schema.mpe_row import MPERow
from coharden.schema.mutant import Mutant
from coharden.schema.verdict import Outcome, Verdict

IMPLAUSIBLE = "implausible"
"""The inadmissible reason of a mutant that breaks a PASS_TO_PASS test (see :mod:`coharden.mpe.plausibility`)."""
BREAKING = frozenset({Outcome.FAIL.value, Outcome.TIMEOUT.value, Outcome.COLLECTION_ERROR.value})
"""The PASS_TO_PASS outcomes that make a mutant implausible: a test fails, hangs, or no longer collects."""


class MutantResult(BaseModel):
    mutant: Mutant
    candidate: Verdict
    reference: Verdict
    cell: Cell | None = None
    """The mutant's cell when it counts: both tests reached PASS / FAIL on it and it is not implausible."""
    plausibility: Verdict | None = None
    """The PASS_TO_PASS tests' verdict on the mutant (None: plausibility not measured)."""
    behaviour: str | None = None
    """The behaviour it shares with every mutant no test run tells apart (see :mod:`coharden.mpe.behaviours`)."""

    @property
    def plausible(self) -> bool | None:
        """True / False by its PASS_TO_PASS verdict (a fail, a hang or a broken collection: False); None when
        not measured or unknown (see :func:`coharden.mpe.plausibility.plausible`)."""
        verdict = self.plausibility
        if verdict is None:
            return None
        if verdict.outcome is Outcome.PASS:
            return True
        return False if verdict.outcome.value in BREAKING else None

    @property
    def inadmissible_reason(self) -> str | None:
        if self.cell is not None:
            return None
        if self.plausible is False:
            return IMPLAUSIBLE
        bad = next((v for v in (self.candidate, self.reference, self.plausibility) if v is not None
                    and not v.admissible), self.candidate)
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
    # --- the estimate ------------------------------------------------------------------------------------------
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
    # --- a pool that can decide -----------------------------------------------------------------------------
    plausibility: dict = Field(default_factory=dict)
    """How plausibility was measured: ``measured``, ``tests`` (PASS_TO_PASS tests run on every mutant),
    ``reason`` (why not measured), ``left_out`` (names of the record's list not run, per reason); empty when
    the rule is off (``--paper-classes``)."""
    counted: str = "mutants"
    """What ``laxity`` counts: ``behaviours`` (each distinct behaviour once, the default) or ``mutants``."""
    mutant_laxity: float | None = None
    """beta / admissible over mutants, beside a laxity over behaviours."""
    behaviour_matrix: Matrix = Field(default_factory=Matrix)
    """The matrix over behaviours, each named by its first mutant (empty when ``counted`` is ``mutants``)."""
    undecided: str | None = None
    """Why a Borderline test is not decided: ``pool_too_small`` (every mutant of the pool ran), ``cap``
    (``max_mutants`` reached), ``fixed_budget``."""
    # --- fewer runs ------------------------------------------------------------------------------------------
    runs: dict[str, dict[str, int]] = Field(default_factory=dict)
    """Per test (``candidate`` / ``reference``): test processes ``made`` for its verdicts in this MPE (F->P
    checks, mutants, its reach pass), verdicts served from the store (``cached``) and verdicts ``implied``
    without a run (see :mod:`coharden.mpe.implied`). The input recorder's runs are not counted here."""
    flaky: list[str] = Field(default_factory=list)
    """Tests whose two runs on the fixed code disagreed (``candidate: PASS, then FAIL``): never given implied
    outcomes."""
    reach: dict[str, str] = Field(default_factory=dict)
    """Per test: ``complete`` when its reach pass can imply outcomes, else why not (``MPEConfig.implied``)."""

    @property
    def counted_matrix(self) -> Matrix:
        """The matrix the laxity is computed on: over behaviours or over mutants (``counted``)."""
        return self.behaviour_matrix if self.counted == "behaviours" else self.matrix

    def estimate(self) -> Estimate:
        """The pooled laxity with its interval, over what ``counted`` says."""
        matrix = self.counted_matrix
        return Estimate(beta=len(matrix.beta), admissible=matrix.admissible, confidence=self.confidence,
                        census=self.census)

    def per_operator(self) -> dict[str, dict[str, object]]:
        """Each operator's cells and laxity over its mutants, with its own interval and its pool size."""
        table = _tally_rows(self.mutants, lambda r: r.mutant.operator.value)
        for op, row in table.items():
            frame = self.frame.get(op, {})
            bounds = Estimate(beta=int(row["beta"]), admissible=int(row["admissible"]),  # type: ignore[call-overload]
                              confidence=self.confidence).interval
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
                *(v for r in self.mutants for v in (r.candidate, r.reference, r.plausibility) if v is not None)]

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
                      behaviours=self.behaviour_matrix.admissible if self.counted == "behaviours" else None,
                      behaviour_matrix=self.behaviour_matrix.counts()
                      if self.counted == "behaviours" and self.fail_to_pass else None,
                      mutant_laxity=self.mutant_laxity, implausible=self.inadmissible_counts().get(IMPLAUSIBLE, 0),
                      undecided=self.undecided, exec_mode=self.candidate_fixed.exec_mode,
                      applied_with=dict(self.candidate_fixed.applied_with),
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
            for role in ("candidate", "reference", "plausibility"):
                if m.get(role) is not None:
                    _strip_verdict(m[role], timings)
        data["exec_mode"] = self.candidate_fixed.exec_mode
        data["matrix_counts"] = self.matrix.counts()
        data["admissible"] = self.matrix.admissible
        data["per_operator"] = self.per_operator()
        data["balanced_laxity"] = self.balanced_laxity
        data["inadmissible"] = self.inadmissible_counts()
        data["per_source"] = self.per_source()
        data["estimate"] = self.estimate().to_json()
        data["behaviours"] = self.behaviour_matrix.admissible if self.counted == "behaviours" else None
        data["implausible"] = sum(1 for r in self.mutants if r.inadmissible_reason == IMPLAUSIBLE)
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
    for row in table.values():  # each operator's own laxity, beside the pooled one
        admissible = int(row["admissible"])  # type: ignore[call-overload]
        row["laxity"] = int(row["beta"]) / admissible if admissible else None  # type: ignore[call-overload]
    return dict(sorted(table.items()))


def _strip_verdict(verdict: dict, timings: bool) -> None:
    verdict.pop("output_tail", None)
    verdict.pop("cached", None)
    verdict.pop("raised", None)  # the exceptions per failing test (reproduce check reads them), not MPE's
    if verdict.get("implied") is None:
        verdict.pop("implied", None)
    if not timings:
        verdict.pop("duration", None)
        verdict.pop("time_limit", None)  # scaled from measured durations
