"""What every step of the real-bugs study shares (:mod:`coharden.study.real_bugs`, :mod:`coharden.study.imitation`):
the golden test's name, step record keys, a distinct copy of the golden test, and the guard around a step."""

from __future__ import annotations

import sys
import time
import traceback
from collections.abc import Callable
from typing import Any

from coharden.errors import CoHardenError, RepoError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import study_key
from coharden.patches import make_patch, sha
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict

RECORD_VERSION = 1  # part of every step record's key: bump it when a step computes its row differently


def record_key(kind: str, *parts: Any) -> str:
    return study_key(kind, RECORD_VERSION, *parts)


def golden_copy(ex: InstanceExecutor, golden: TestPatch) -> TestPatch:
    """A regenerated but equivalent copy of the golden test patch (a different patch text, so its verdicts are
    computed, not served from the golden test's)."""
    copy_patch = make_patch((p, ex.base_file(p), c) for p, c in golden.files.items())
    if copy_patch == golden.patch:  # cannot happen with SWE-bench patches; keep the copy distinct
        copy_patch += "\n"
    return ex.test_patch(copy_patch, name="golden-copy", ids=golden.ids)


def guarded(row: dict[str, Any], body: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run one step's ``body`` on ``row``: a repository or environment problem marks the row
    ``environment_error`` (never stored, so a rerun retries it), any other coharden error is the row's
    ``error``; an unexpected exception is reported (with its traceback, on stderr) and treated like an
    environment problem: one step's surprise does not end a study of hours. ``seconds`` is the step's wall
    time either way."""
    started = time.monotonic()
    try:
        body(row)
    except RepoError as exc:
        row.update(error=str(exc), environment_error=True)
    except CoHardenError as exc:
        row["error"] = str(exc)
        row["error_type"] = type(exc).__name__  # e.g. ApplyError: the table says the test does not apply
    except Exception as exc:  # noqa: BLE001 - see the docstring
        traceback.print_exc(file=sys.stderr)
        row.update(error=f"internal error: {type(exc).__name__}: {exc}", environment_error=True)
    row["seconds"] = time.monotonic() - started
    return row


def keep_row(row: dict[str, Any]) -> bool:
    """Store a step's record unless it failed for a reason a rerun could fix: an environment error, or a
    harness error in any of its verdicts (``harness_error``, set by the step that ran them)."""
    return not (row.get("environment_error") or row.get("harness_error"))


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    """A verdict as a step's record keeps it: without its output tail, its reason cut short."""
    data = verdict.model_dump(mode="json", exclude={"output_tail", "cached"})
    data["reason"] = data.get("reason", "")[:500]
    return data


def timed_out(row: dict[str, Any]) -> bool:
    """Whether a verdict row's buggy or fixed run timed out."""
    return any((row.get(side) or {}).get("outcome") == Outcome.TIMEOUT.value for side in ("buggy", "fixed"))


def flag_harness_error(row: dict[str, Any], *verdicts: Verdict) -> None:
    """Mark ``row`` when one of ``verdicts`` is the harness's error, not the test's."""
    if any(v.outcome is Outcome.HARNESS_ERROR for v in verdicts):
        row["harness_error"] = True


def slim_result(data: dict[str, Any]) -> dict[str, Any]:
    """An MPE result without the mutants' patch texts (kept: id, operator, location, cells, verdicts)."""
    for m in data.get("mutants", []):
        mutant = m.get("mutant", {})
        mutant["patch_sha"] = sha(mutant.pop("patch", ""))
        for side in ("candidate", "reference"):
            if isinstance(m.get(side), dict):
                m[side].pop("tests", None)
                m[side]["reason"] = (m[side].get("reason") or "")[:300]
    return data
