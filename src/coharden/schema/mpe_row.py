"""The summary row of one test's MPE, as graders and reports keep it (no mutants, no verdict details)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from coharden.schema.matrix import TestClass


class MPERow(BaseModel):
    """F->P, class and laxity of a candidate test against a reference; ``applied`` False: the test could not
    enter MPE (empty, does not apply, adds no test) and is ``Invalid``."""

    applied: bool = True
    fail_to_pass: bool = False
    test_class: str = TestClass.INVALID.value
    laxity: float | None = None
    interval: list[float] | None = None
    """The laxity's interval [low, high] (see :mod:`coharden.schema.estimate`); None without a laxity."""
    drawn: int = 0
    """Mutants run (sequential MPE may stop before the budget); ``admissible`` of them count."""
    matrix: dict[str, int] | None = None
    """Cell counts (alpha, beta, gamma, delta) of a F->P test; None otherwise."""
    admissible: int = 0
    inadmissible: dict[str, int] = Field(default_factory=dict)
    test_ids: list[str] = Field(default_factory=list)
    buggy: str | None = None
    """The candidate's verdict outcome on the buggy code (None: not run)."""
    fixed: str | None = None
    pool_complete: bool = True
    behaviours: int | None = None
    """Distinct behaviours among the admissible mutants, when laxity counts them (``laxity`` is then over them)."""
    behaviour_matrix: dict[str, int] | None = None
    """Cell counts over behaviours (what ``laxity`` is over when ``behaviours`` is set)."""
    mutant_laxity: float | None = None
    """beta / admissible over mutants, beside a laxity over behaviours."""
    implausible: int = 0
    """Mutants run that broke a PASS_TO_PASS test (left out of laxity)."""
    undecided: str | None = None
    """Why a Borderline or Inconclusive class is not decided (``pool_too_small``, ``cap``, ...)."""
    reason: str = ""
    exec_mode: str | None = None
    """How the candidate ran (its verdict on the fixed code): ``unit_test``, the runner's tests, or
    ``reproduction_script``, a script judged by its exit status (SWT-bench's modes); None: it did not run."""
    applied_with: dict[str, str] = Field(default_factory=dict)
    """How the fix and the candidate were applied on the fixed code (``git apply``, ``patch --fuzz=5``, ...)."""
    dropped_source_files: list[str] | None = None
    """Source files the test prediction also touched (dropped: only its test part is the test)."""

    @classmethod
    def invalid(cls, reason: str, **extra: Any) -> MPERow:
        return cls(applied=False, reason=reason, **extra)

    def to_json(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        if data["dropped_source_files"] is None:
            del data["dropped_source_files"]
        return data
