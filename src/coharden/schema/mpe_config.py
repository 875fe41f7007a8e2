"""How one Mutation Patch Evaluation is run: the mutant pool, the sampling and the class cutoff, in one record.

Every caller of :func:`coharden.mpe.evaluate.evaluate` (single MPE, the batch, ``coharden eval`` grading, the
real-bugs study, the CoHarden loop) builds one :class:`MPEConfig`; their own configs embed it. The two laxity
cutoffs of the project are defined here and nowhere else:

* :data:`PAPER_TAU` (0.202): the paper's MPE cutoff between Rigorous (laxity < tau) and Lax - the default of
  every MPE classification (``coharden mpe``, ``coharden eval``, the study, the reports);
* :data:`LOOP_TAU` (0.2): the CoHarden loop's regression threshold - a round whose laxity is above it reverts
  the test to t0 (Algorithm 1). It is also the cutoff of the loop's own MPE calls.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from coharden.schema.estimate import DEFAULT_CONFIDENCE, INTERVAL_METHOD
from coharden.schema.mutant import MECHANICAL_DEFAULT, KnownOperator
from coharden.schema.timelimit import TimeLimit

PAPER_TAU = 0.202
"""The paper's MPE laxity cutoff: Rigorous when laxity < PAPER_TAU, else Lax."""
DEFAULT_PER_OPERATOR = 3
"""N, the mutants sampled per operator by default (the paper samples N per operator)."""
LOOP_TAU = 0.2
"""The CoHarden loop's regression threshold: a round with laxity > LOOP_TAU is a regression."""
DEFAULT_SEED = 0
"""The seed of every MPE sampler (the mutant sample, the LLM mutator's prompts, the mutants shown)."""
DEFAULT_MAX_MUTANTS = 120
"""Sequential MPE's default cap on the mutants run for one test: about 11 per operator of the 11 mechanical
operators (the fixed budget runs 3 per operator, 33). Rigorous needs room: 0 of n let through puts the 95 %
interval below 0.202 only from n = 17 on, and n counts distinct behaviours, of which the bundled examples'
pools show one per 3 to 9 plausible mutants; at 40 (the cap before plausibility and behaviours) no bundled test
could reach 17. A test that decides early (most Lax ones) never pays for the cap.
Provisional: the protocol (docs/laxity_estimate.md) fixes the cap on the development split."""
BEHAVIOUR_RULE = "failures:where:scripts"
"""What tells two mutants' behaviours apart beside the outcomes (:mod:`coharden.mpe.behaviours`), named in the
cache key: each failing test's exceptions with the place in the test's own file that raised, read from the
log-based runners' output and a failing reproduction script's traceback too. Rows stored before it counted a
sympy or Django test's or a script's runs by outcome only, and are not served under it."""
MIN_PER_OPERATOR = 1
"""Sequential MPE draws at least this many mutants of every operator (one full round) before it may stop, so
``max_mutants`` may not be below ``MIN_PER_OPERATOR`` times the operators of the pool."""


LLM_SAMPLES = 3
"""LLM mutants wanted per operator by default (the paper samples 56)."""


class MPEConfig(BaseModel):
    """The settings of one MPE run. :meth:`cache_key` is the part of a stored row's key they contribute."""

    operators: list[KnownOperator] = Field(default_factory=lambda: list(MECHANICAL_DEFAULT),
                                      description="Mechanical operators of the pool.")
    per_operator: int | None = Field(default=DEFAULT_PER_OPERATOR, ge=1, description="Mutants sampled per "
                                     "operator, seeded (None: all). The same N for every operator, as in the "
                                     "paper, so no operator dominates laxity by its mutant count.")
    seed: int = Field(default=DEFAULT_SEED, ge=0, description="Sampling seed.")
    tau: float = Field(default=PAPER_TAU, ge=0, le=1, description="Laxity cutoff between Rigorous and Lax.")
    paper_classes: bool = Field(default=False, description="Map every non-F->P test to Misaligned.")
    mechanical: bool = Field(default=True, description="The mechanical mutants join the pool.")
    llm: str | None = Field(default=None, description="The LLM mutator's model when LLM mutants join the pool "
                            "(the mutator itself is passed to evaluate()); None: no LLM mutants.")
    llm_samples: int = Field(default=LLM_SAMPLES, ge=1, description="The LLM mutator: mutants wanted per operator.")
    llm_edit_format: Literal["blocks", "diff"] = Field(default="blocks", description="What the LLM mutator asks "
                                                       "a reply to hold: SEARCH/REPLACE blocks, or one unified "
                                                       "diff (small local models write diffs best).")
    prefer_exercised: bool = Field(default=False, description="With per_operator: sample first among mutants "
                                   "that change code the tests run.")
    sequential: bool = Field(default=True, description="Draw mutants in seeded stratified rounds and stop as soon "
                             "as the interval decides the class (or at max_mutants); False: per_operator each, "
                             "all run. paper_classes implies False.")
    max_mutants: int | None = Field(default=DEFAULT_MAX_MUTANTS, ge=1, description="Sequential: the most mutants "
                                    "run for one test (None: the whole pool).")
    confidence: float = Field(default=DEFAULT_CONFIDENCE, gt=0.5, lt=1, description="Confidence level of the "
                              "laxity's interval (exact Clopper-Pearson).")
    workers: int = Field(default=1, ge=1, description="Threads running mutants (not part of the cache key).")
    timeout_factor: float = Field(default=5.0, gt=0, description="A test's time limit on a mutant: this many times "
                                  "its own run on the fixed code (at least timeout_floor, at most the timeout).")
    timeout_floor: float = Field(default=10.0, gt=0, description="Seconds: the smallest time limit on a mutant.")
    trust_tests: bool = Field(default=False, description="Candidate and reference may share one pytest process "
                              "(only for tests you trust: a test in the same process can rewrite the other's result).")
    implied: bool = Field(default=True, description="Runs whose outcome is implied are not made: a test that "
                          "never enters the functions a mutant changes (on the fixed code, stable across two runs) "
                          "gets its fixed-code outcome; False (--no-implied): every run is made (the check mode).")
    reject_tampering: bool = Field(default=False, description="A candidate with tampering notes (conftest.py, "
                                   "pytest hooks, JUnit writes, os._exit) is Invalid.")
    plausibility: bool = Field(default=True, description="The PASS_TO_PASS tests of the golden test's files run on "
                               "every mutant beside the reference; a mutant that breaks one (fails, hangs, or "
                               "breaks collection) is implausible and left out of laxity. paper_classes: off.")
    behaviours: bool = Field(default=True, description="Laxity counts distinct behaviours (mutants whose outcomes "
                             "agree on every test run are one), the per-mutant figure beside it. paper_classes: "
                             "off (every mutant counts).")
    cutoffs: list[float] | None = Field(default=None, description="Cutoffs (0 to 1) of the Rigorous/Lax "
                                        "sensitivity table: a batch's and eval's (None: 0.05 to 0.5), a single "
                                        "MPE's class at each (None: no table). Not part of a result.")
    show_mutants: int = Field(default=5, ge=0, description="How many beta mutants a single MPE prints as diffs.")

    @field_validator("cutoffs", mode="before")
    @classmethod
    def _cutoffs(cls, value: Any) -> Any:
        """Each cutoff a number from 0 to 1, and at least one (a comma-separated text reads too): one message
        for every way a value misses, never Python's own float() error."""
        if value is None:
            return None
        items = value.split(",") if isinstance(value, str) else value
        shown = ",".join(map(str, items)) if isinstance(items, list) else str(items)
        bad = ValueError(f"{shown!r} (allowed: numbers from 0 to 1, comma-separated)")
        try:
            cut = [float(c) for c in items if str(c).strip()]
        except (TypeError, ValueError) as exc:
            raise bad from exc
        if not cut or any(not 0 <= c <= 1 for c in cut):  # nan fails both comparisons
            raise bad
        return cut

    @model_validator(mode="after")
    def _cap_covers_a_round(self) -> MPEConfig:
        if self.sequential and self.max_mutants is not None and \
                self.max_mutants < MIN_PER_OPERATOR * len(self.operators):
            raise ValueError(f"max_mutants {self.max_mutants} is below the per-operator minimum: "
                             f"{MIN_PER_OPERATOR} mutant for each of the {len(self.operators)} operators")
        return self

    @property
    def is_sequential(self) -> bool:
        """Sequential rounds (the default); the paper's classes always use the fixed budget."""
        return self.sequential and not self.paper_classes

    @property
    def measures_plausibility(self) -> bool:
        """Mutants are run against the PASS_TO_PASS tests too, and the implausible ones left out of laxity."""
        return self.plausibility and not self.paper_classes

    @property
    def counts_behaviours(self) -> bool:
        """Laxity is over distinct behaviours, not over mutants."""
        return self.behaviours and not self.paper_classes

    @property
    def point_classes(self) -> bool:
        """The class is the point estimate against tau (the paper's rule), not the interval."""
        return self.paper_classes

    def mutant_limit(self, fixed_seconds: float, timeout: float) -> float:
        """The time limit of a test on a mutant, scaled with its own run on the fixed code (as mutmut does), at
        most ``timeout`` (:class:`~coharden.schema.timelimit.TimeLimit` clamps it)."""
        requested = max(self.timeout_floor, self.timeout_factor * fixed_seconds)
        return round(TimeLimit.of(requested, timeout=timeout).limit, 3)

    def mutators(self) -> list[str]:
        """The mutant sources, as MPE results name them."""
        return (["mechanical"] if self.mechanical else []) + (["llm"] if self.llm is not None else [])

    @classmethod
    def for_loop(cls) -> MPEConfig:
        """The CoHarden loop's MPE defaults: N = 3 mutants per operator, the regression threshold LOOP_TAU."""
        return cls(per_operator=DEFAULT_PER_OPERATOR, tau=LOOP_TAU)

    def cache_key(self) -> list[Any]:
        """What a stored MPE row depends on, as JSON-able parts. Options at their default add nothing, so rows
        stored before an option existed keep their keys - except the draw and the interval's class rule: a
        sequential draw (N per operator then plays no part) and the interval's classes each add a part, since
        every row stored before them was a fixed budget classified by the point rule."""
        key: list[Any] = [None if self.is_sequential else self.per_operator, self.seed, self.tau,
                          sorted(str(op) for op in self.operators)]
        if self.is_sequential:  # rows stored before sequential MPE existed were all fixed-budget
            key.append(f"sequential:max={self.max_mutants}")
        if not self.point_classes:  # and classified by the point rule
            key.append(f"interval:{self.confidence:g}")
            key.append(f"interval_method:{INTERVAL_METHOD}")  # the rule is named, not assumed
            # the pool is a sample, a spent pool no longer collapses the interval to its point; rows
            # stored before it must not be served under it
            key.append("estimate:sample")
        if self.measures_plausibility:
            key.append("plausible:pass_to_pass")
        if self.counts_behaviours:
            key.append("laxity:behaviours")
            key.append(f"behaviour_rule:{BEHAVIOUR_RULE}")  # the rule is named, not assumed
        if self.prefer_exercised:
            key.append("prefer_exercised")
        if self.paper_classes:
            key.append("paper_classes")
        if (self.timeout_factor, self.timeout_floor) != (5.0, 10.0):
            key.append(f"timeouts:{self.timeout_factor:g}x,{self.timeout_floor:g}s")
        if self.trust_tests:
            key.append("trust_tests")
        if self.reject_tampering:
            key.append("reject_tampering")
        if not self.implied:  # the same results, but a check mode must not be answered from implied rows
            key.append("no_implied")
        if not self.mechanical or self.llm is not None:
            key.append(",".join([*(["mechanical"] if self.mechanical else []),
                                 *([f"llm:{self.llm}"] if self.llm is not None else [])]))
        if self.llm is not None and self.llm_edit_format != "blocks":
            key.append(f"llm_format:{self.llm_edit_format}")
        if self.llm is not None and self.llm_samples != LLM_SAMPLES:  # another pool (the default: keys made before)
            key.append(f"llm_samples:{self.llm_samples}")
        return key
