"""What the next round's agent is told: sampled surviving mutants as diffs and per-operator counts."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence

from coharden.mpe.result import MPEResult, MutantResult
from coharden.schema.matrix import Cell

MAX_SHOWN = 3
GENERIC_REFINE = ("Review your test and your fix critically: does the test pin down the exact behaviour the issue "
                  "asks for (exact values, exception types and messages, several bug-revealing inputs), and is the "
                  "fix complete? Improve both where they fall short.")


def _show(results: Sequence[MutantResult], seed: int) -> str:
    chosen = list(results)
    if len(chosen) > MAX_SHOWN:
        chosen = random.Random(seed).sample(chosen, MAX_SHOWN)
    return "\n".join(f"- {r.mutant.operator}: {r.mutant.description}\n```diff\n{r.mutant.patch}```"
                     for r in chosen)


def _counts(results: Sequence[MutantResult]) -> str:
    counts = Counter(str(r.mutant.operator) for r in results)
    return ", ".join(f"{op} {n}" for op, n in sorted(counts.items()))


def regression(mpe: MPEResult, seed: int) -> str:
    """The new test accepted wrong fixes the previous test rejected (the beta cell)."""
    lax = [r for r in mpe.mutants if r.cell is Cell.BETA]
    return (f"Your new test is weaker than the previous one: it passes {len(lax)} wrong variants of your fix that "
            f"the previous test rejects (by operator: {_counts(lax)}). The test has been reset to the first "
            f"reproduction test. Write a test that rejects wrong fixes like these (your fix is kept):\n"
            f"{_show(lax, seed)}")


def surviving(mpe: MPEResult, seed: int) -> str:
    """The test did not change: show wrong fixes it still accepts (alpha and beta cells)."""
    accepted = [r for r in mpe.mutants if r.cell in (Cell.ALPHA, Cell.BETA)]
    if not accepted:
        return ("Your test is unchanged from the previous round. Strengthen it: check exact results for several "
                "inputs that reveal the bug.")
    return (f"Your test is unchanged from the previous round and still passes {len(accepted)} variants of your fix "
            f"that may be wrong (by operator: {_counts(accepted)}). Strengthen the test so it rejects the wrong "
            f"ones:\n{_show(accepted, seed)}")


def rejected(message: str) -> str:
    return f"Your previous submission was not accepted: {message.strip() or 'it did not pass the checks'}"
