"""The 2x2 matrix of a candidate test against a reference test over admissible mutants, and the classes."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from pydantic import BaseModel, Field

from coharden.schema.estimate import side_of


class TestClass(StrEnum):
    __test__ = False

    RIGOROUS = "Rigorous"
    LAX = "Lax"
    BORDERLINE = "Borderline"  # F->P, the laxity's interval straddles tau: the sample cannot tell Rigorous from Lax
    MISALIGNED = "Misaligned"
    NOT_REPRODUCING = "NotReproducing"
    INCONCLUSIVE = "Inconclusive"  # F->P but no admissible mutant: laxity undefined
    INVALID = "Invalid"  # the test does not apply or does not run (inadmissible verdict on buggy/fixed code)


NEEDS_NETWORK = "needs_network"
"""Why a test is not graded here: it fails on the fixed code only where it reaches for the network (the
verdict's ``network``), which test runs do not have. MPE then gives the candidate Inconclusive with this as its
``undecided`` reason (a reference's error starts with it); ``eval`` and ``study table`` read the same rule."""


class Cell(StrEnum):
    ALPHA = "alpha"  # both pass (agree-pass)
    BETA = "beta"  # candidate passes, reference fails (laxity)
    GAMMA = "gamma"  # candidate fails, reference passes (rigor)
    DELTA = "delta"  # both fail (agree-fail)


def cell(candidate_passes: bool, reference_passes: bool) -> Cell:
    if candidate_passes:
        return Cell.ALPHA if reference_passes else Cell.BETA
    return Cell.GAMMA if reference_passes else Cell.DELTA


class Matrix(BaseModel):
    """Mutant ids per cell; counts and laxity derive from them (so every number traces to mutants)."""

    alpha: list[str] = Field(default_factory=list)
    beta: list[str] = Field(default_factory=list)
    gamma: list[str] = Field(default_factory=list)
    delta: list[str] = Field(default_factory=list)

    def add(self, mutant_id: str, which: Cell) -> None:
        getattr(self, which.value).append(mutant_id)

    @property
    def admissible(self) -> int:
        return len(self.alpha) + len(self.beta) + len(self.gamma) + len(self.delta)

    @property
    def laxity(self) -> float | None:
        return len(self.beta) / self.admissible if self.admissible else None

    def counts(self) -> dict[str, int]:
        return {c.value: len(getattr(self, c.value)) for c in Cell}


@dataclass(frozen=True)
class Reproduction:
    """What a test's runs on the buggy and on the fixed code say, as far as its class goes: whether it fails on
    the buggy code, passes on the fixed code, and reached PASS or FAIL on both (``admissible``)."""

    fails_on_buggy: bool
    passes_on_fixed: bool
    admissible: bool = True


FAIL_TO_PASS = Reproduction(fails_on_buggy=True, passes_on_fixed=True)
"""An admissible fail-to-pass test: the class then rests on its laxity."""


def classify(runs: Reproduction, laxity: float | None, tau: float, *, paper_classes: bool = False,
             interval: tuple[float, float] | None = None) -> TestClass:
    """Class of a candidate test whose buggy and fixed runs say ``runs``. ``paper_classes`` maps every non-F->P
    test to Misaligned.

    With ``interval`` (the laxity's, see :mod:`coharden.schema.estimate`) a F->P test is Lax when the interval
    lies at or above ``tau``, Rigorous when it lies below and Borderline when it straddles tau; without it,
    the paper's point rule (Rigorous when ``laxity < tau``, else Lax)."""
    if not runs.admissible:
        result = TestClass.INVALID
    elif not runs.passes_on_fixed:
        result = TestClass.MISALIGNED
    elif not runs.fails_on_buggy:
        result = TestClass.NOT_REPRODUCING
    elif laxity is None:
        return TestClass.INCONCLUSIVE
    elif interval is not None:
        return {"lax": TestClass.LAX, "rigorous": TestClass.RIGOROUS,
                "borderline": TestClass.BORDERLINE}[side_of(interval, tau)]
    else:
        return TestClass.RIGOROUS if laxity < tau else TestClass.LAX
    return TestClass.MISALIGNED if paper_classes else result
