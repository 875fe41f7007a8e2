"""The run-level ``report.json`` of a batch MPE, in the SWE-bench harness's shape (``make_run_report``:
``total_instances``, ``submitted_instances``, ``completed_instances``, ``resolved_instances``,
``unresolved_instances``, ``empty_patch_instances``, ``error_instances`` and the matching ``*_ids`` lists,
``schema_version`` 2), read as SWT-bench reads tests (``resolved``: the test is F->P), with one ``<Class>_ids``
list and ``<Class>_instances`` count per MPE class (Rigorous, Lax, Borderline, Misaligned, NotReproducing,
Inconclusive, Invalid; ``Error``: not graded for an error).

The harness writes one report per system; a batch may hold several (``model_name_or_path``), so each is under
``models``, and a batch of one system also has its report's fields at the top level, where harness readers
look for them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden.schema.matrix import TestClass

SCHEMA_VERSION = 2
EMPTY_REASON = "the test patch is empty"  # :func:`coharden.patches.prediction_tests` on an empty or None patch


def _system_report(rows: Sequence[dict[str, Any]], total_instances: int) -> dict[str, Any]:
    graded = [r for r in rows if not r.get("not_graded")]
    ids: dict[str, list[str]] = {k: [] for k in ("submitted", "completed", "incomplete", "resolved", "unresolved",
                                                 "empty_patch", "error", "not_graded")}
    by_class: dict[str, list[str]] = {name: [] for name in [*(c.value for c in TestClass), "Error"]}
    for row in rows:
        iid = str(row.get("instance_id"))
        ids["submitted"].append(iid)
        if row.get("not_graded"):
            ids["not_graded"].append(iid)
            continue
        if row.get("applied") is False and row.get("reason") == EMPTY_REASON:
            ids["empty_patch"].append(iid)
        if "error" in row:
            ids["error"].append(iid)
            ids["incomplete"].append(iid)
            by_class["Error"].append(iid)
            continue
        ids["completed"].append(iid)
        ids["resolved" if row.get("fail_to_pass") else "unresolved"].append(iid)
        by_class.setdefault(str(row.get("test_class") or "Error"), []).append(iid)
    report: dict[str, Any] = {"total_instances": total_instances}
    for name in ("submitted", "completed", "resolved", "unresolved", "empty_patch", "error"):
        report[f"{name}_instances"] = len(ids[name])
    report["graded_instances"] = len(graded)
    for name, found in by_class.items():
        report[f"{name}_instances"] = len(found)
    for name, found in ids.items():
        report[f"{name}_ids"] = sorted(found)
    for name, found in by_class.items():
        report[f"{name}_ids"] = sorted(found)
    report["schema_version"] = SCHEMA_VERSION
    return report


def run_report(rows: Sequence[dict[str, Any]], total_instances: int, run_id: str) -> dict[str, Any]:
    """The run's report: per system under ``models`` (and at the top level for a batch of one system)."""
    systems: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        systems.setdefault(str(row.get("model_name_or_path")), []).append(row)
    models = {name: _system_report(found, total_instances) for name, found in systems.items()}
    top = next(iter(models.values())) if len(models) == 1 else {}
    return {**top, "run_id": run_id, "models": models}
