"""The round decision of the CoHarden loop (Algorithm 1), as a pure function of the temporal matrix."""

from __future__ import annotations

from enum import StrEnum

from coharden.mutation.context import normalized
from coharden.schema.estimate import side_of


class Decision(StrEnum):
    CLEAN = "clean"  # laxity <= tau and the test changed non-trivially: return (t_k, c_k)
    REGRESSION = "regression"  # laxity > tau: the test reverts to t0, the fix is kept
    UNCHANGED = "unchanged"  # the test did not change: t_ref <- t_k, continue with retry feedback
    BORDERLINE = "borderline"  # the laxity's interval straddles tau even with more mutants: not clean, continue
    INCONCLUSIVE = "inconclusive"  # no admissible mutant (or no usable reference): check skipped
    GATE_FAILED = "gate_failed"  # the agent's submission was not accepted (F->P gate, clean patch, ...)
    LAX_INIT = "lax_init"  # round 0 wrote t0
    ROUNDS_EXHAUSTED = "rounds_exhausted"  # K rounds used up: return (t_K, c_K)
    COST_CAP = "cost_cap"  # a configured cost cap was reached: return what the finished rounds made
    MODEL_ERROR = "model_error"  # the model failed for good (auth, bad parameter, ...): see the error kind
    DONE = "done"  # a one-shot baseline finished


def same_test(files_a: dict[str, str | None], files_b: dict[str, str | None]) -> bool:
    """Two tests are the same when every file they leave behind has the same AST (whitespace and comments
    do not count)."""
    if set(files_a) != set(files_b):
        return False
    return all(normalized(files_a[p] or "") == normalized(files_b[p] or "") for p in files_a)


def decide(*, admissible: int, laxity: float | None, tau: float, changed: bool,
           interval: tuple[float, float] | None = None) -> Decision:
    """The paper's branches, in its order: no admissible mutant -> inconclusive; laxity above tau ->
    regression; otherwise a changed test is a clean round and an unchanged one is retried.

    With ``interval`` (the laxity's) the same branches read the interval: it lies at or above tau ->
    regression (the test is decided Lax); it lies below -> clean / unchanged (decided Rigorous); it straddles
    tau -> borderline (not clean: the caller has already asked for more mutants)."""
    if admissible == 0 or laxity is None:
        return Decision.INCONCLUSIVE
    if interval is not None:
        side = side_of(interval, tau)  # the class rule of every MPE (coharden.schema.estimate)
        if side == "lax":
            return Decision.REGRESSION
        if side == "borderline":
            return Decision.BORDERLINE
    elif laxity > tau:
        return Decision.REGRESSION
    return Decision.CLEAN if changed else Decision.UNCHANGED
