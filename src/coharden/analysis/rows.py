"""Reading result rows (JSON objects of MPE results, graded tests, verdicts) the same way in every report."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

CELLS = ("alpha", "beta", "gamma", "delta")
"""The matrix cells, in the paper's order."""
CLASS_ORDER = ("Rigorous", "Borderline", "Lax", "Inconclusive", "NotReproducing", "Misaligned", "Invalid", "Error")
"""Every class a row can end in, ``Error`` for a row that carries ``error``, in reading order."""


def test_class(row: Mapping[str, Any]) -> str:
    """The row's class; ``Error`` when the row is an error (or has no class)."""
    return "Error" if "error" in row else str(row.get("test_class", "Error"))


def outcome(verdict: Mapping[str, Any] | None) -> str | None:
    """A stored verdict's outcome (None: no verdict)."""
    return None if verdict is None else verdict.get("outcome")
