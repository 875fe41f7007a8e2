"""The laxity table's rows: what the row of one (instance, system) says, from the study's step records
(``verify``, ``mpe``) or from the environment when the instance does not run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coharden import __version__
from coharden.patches import is_test_path, touched_files
from coharden.schema.matrix import NEEDS_NETWORK
from coharden.study.table_data import TableData

SCHEMA = 1  # the rows' layout: bump it when a field changes meaning


def _reason(text: Any, limit: int = 400) -> str:
    return " ".join(str(text or "").split())[:limit]


def _verdict_text(name: str, verdict: dict[str, Any] | None) -> str:
    if not verdict:
        return f"{name}: no verdict"
    reason = _reason(verdict.get("reason"), 160)
    return f"{name}: {verdict.get('outcome')}" + (f" ({reason})" if reason else "")


def _harness_errors(row: dict[str, Any]) -> str:
    """The reasons of the HARNESS_ERROR verdicts a step row holds (MPE or verify rows)."""
    found: list[str] = []

    def look(name: str, verdict: Any) -> None:  # a verdict not run (``implied``) only echoes the other test's
        if isinstance(verdict, dict) and verdict.get("outcome") == "HARNESS_ERROR" and not verdict.get("implied"):
            found.append(_verdict_text(name, verdict))

    for key in ("buggy", "fixed", "candidate_buggy", "candidate_fixed", "reference_buggy", "reference_fixed"):
        look(key, row.get(key))
    for m in row.get("mutants", []):
        ident = (m.get("mutant") or {}).get("id", "?")
        look(f"mutant {ident} candidate", m.get("candidate"))
        look(f"mutant {ident} reference", m.get("reference"))
    return "; ".join(dict.fromkeys(found))[:600] or "a verdict was a harness error"


def _invalid_kind(error: str, error_type: str | None, patch: str, test_patterns: Sequence[str]
                  ) -> tuple[str, bool | None]:
    """(why a prediction could not be graded, whether it applies) from its step's error."""
    if not patch.strip():
        return "empty", None
    try:
        files = touched_files(patch)
    except Exception:  # noqa: BLE001 - a malformed patch: git apply says so below
        files = []
    if error_type in ("ApplyError", "PatchError") or (error_type is None and any(
            s in error for s in ("does not apply", "patch failed", "corrupt patch", "git apply"))):
        return "does_not_apply", False
    if files and not any(is_test_path(f, test_patterns) for f in files):
        return "no_test_file", True
    if error_type == "TestIdError" or "no test function" in error:
        return "no_test", True
    return "other", None


def base_row(data: TableData, iid: str, system: str, run: dict[str, Any]) -> dict[str, Any]:
    inst = data.instances[iid]
    published = data.published.get(system, {}).get(iid)
    return {"schema": SCHEMA, "instance_id": iid, "system": system, "repo": inst.repo,
            "version": str(inst.version or ""), "benchmark": data.systems[system].benchmark,
            "has_prediction": iid in data.predictions.get(system, {}),
            **({"published_fail_to_pass": published} if system in data.published else {}),
            "status": "pending", "class": None, "reason": None, "applies": None, "fail_to_pass": None,
            "coharden": {"version": __version__, "revision": run.get("revision")},
            "config": {k: v for k, v in run.items() if k != "revision"}}


def environment_rows(data: TableData, iid: str, status: str, reason: str, run: dict[str, Any]
                     ) -> list[dict[str, Any]]:
    """The rows of an instance that does not run (or has not run yet): one status for every system."""
    return [{**base_row(data, iid, s, run), "status": status, "reason": reason or None}
            for s in data.systems_of(iid)]


def instance_rows(data: TableData, iid: str, steps: dict[str, list[dict[str, Any]]], run: dict[str, Any],
                  test_patterns: Sequence[str]) -> list[dict[str, Any]]:
    """The rows of an instance that ran, from its study step rows (``verify``, ``mpe``)."""
    verify: dict[str, Any] | None = next(iter(steps.get("verify") or []), None)
    graded = {r["system"]: r for r in steps.get("mpe", [])}
    rows = []
    for system in data.systems_of(iid):
        row = base_row(data, iid, system, run)
        if verify is not None:
            row["verify_seconds"] = round(float(verify.get("seconds") or 0.0), 3)
        if verify is None:
            row.update(status="pending", reason="no verify record (report-only run)")
        elif verify.get("environment_error"):
            row.update(status="env_error", reason=_reason(verify.get("error"), 600))
        elif verify.get("harness_error"):
            row.update(status="harness_error", reason=_harness_errors(verify))
        elif verify.get("error"):
            row.update(status="error", reason=_reason(verify.get("error"), 600))
        elif not verify.get("fail_to_pass"):
            row.update(status="golden_not_f2p", reason="golden test here: " + "; ".join(
                _verdict_text(side, verify.get(side)) for side in ("buggy", "fixed")))
        elif not row["has_prediction"]:
            row.update(status="no_prediction", reason=f"{system} has no test for this instance")
        elif system not in graded:
            row.update(status="pending", reason="no grade record (report-only run)")
        else:
            row.update(grade_fields(graded[system], data.predictions[system][iid], test_patterns))
        rows.append(row)
    return rows


def grade_fields(step: dict[str, Any], patch: str, test_patterns: Sequence[str]) -> dict[str, Any]:
    """What a dataset row says of one graded prediction (the study's ``mpe`` step row)."""
    seconds = round(float(step.get("mpe_wall") or step.get("seconds") or 0.0), 3)
    if "error" in step:
        error = str(step["error"])
        if step.get("environment_error"):
            return {"status": "env_error", "reason": _reason(error, 600), "seconds": seconds}
        kind, applies = _invalid_kind(error, step.get("error_type"), patch, test_patterns)
        if kind == "other" and step.get("error_type") not in (None, "TestIdError"):
            return {"status": "error", "reason": _reason(error, 600), "seconds": seconds}
        return {"status": "invalid", "class": "Invalid", "invalid_kind": kind, "applies": applies,
                "reason": _reason(error, 600), "seconds": seconds}
    if step.get("harness_error"):
        return {"status": "harness_error", "reason": _harness_errors(step), "seconds": seconds}
    buggy, fixed = step.get("candidate_buggy") or {}, step.get("candidate_fixed") or {}
    outcomes = {buggy.get("outcome"), fixed.get("outcome")}
    estimate = step.get("estimate") or {}
    frame = step.get("frame") or {}
    pool = step.get("pool") or {}
    out: dict[str, Any] = {
        "status": "graded", "class": step.get("test_class"), "applies": "APPLY_ERROR" not in outcomes,
        "fail_to_pass": bool(step.get("fail_to_pass")), "buggy": buggy.get("outcome"), "fixed": fixed.get("outcome"),
        "test_ids": step.get("test_ids", []), "laxity": step.get("laxity"), "interval": step.get("interval"),
        "confidence": step.get("confidence"), "census": step.get("census", False),
        "beta": estimate.get("beta"), "admissible": step.get("admissible", 0),
        "drawn": sum(int(r.get("drawn", 0)) for r in frame.values()) if frame else len(step.get("mutants", [])),
        "pool": sum(int(r.get("pool", 0)) for r in frame.values()) if frame else None,
        "matrix": step.get("matrix_counts"), "stop": step.get("stop") or None, "rounds": step.get("rounds"),
        "frame": {op: [r.get("pool", 0), r.get("drawn", 0), r.get("admissible", 0)] for op, r in frame.items()},
        # what the laxity counts and what was left out of it
        "counted": step.get("counted", "mutants"), "behaviours": step.get("behaviours"),
        "mutant_laxity": step.get("mutant_laxity"), "implausible": step.get("implausible", 0),
        "implausible_per_operator": {op: r["implausible"] for op, r in frame.items() if r.get("implausible")},
        "plausibility": step.get("plausibility") or None, "undecided": step.get("undecided"),
        "inadmissible": step.get("inadmissible") or {}, "warnings": step.get("warnings") or [],
        # why an operator made nothing (per operator and reason), and why no input was bug-revealing: the reach
        # of the input-based operators is read off the rows (benchmarks/input_reach.py --table)
        "skipped": pool.get("skipped") or {}, "no_revealing_input": pool.get("no_revealing_input"),
        "tampering": step.get("tampering") or [], "seconds": seconds,
    }
    if step.get("test_class") == "Invalid":
        out["status"] = "invalid"
        if "APPLY_ERROR" in outcomes:
            out["invalid_kind"] = "does_not_apply"
        elif out["tampering"]:
            out["invalid_kind"] = "tampering"
        else:
            out["invalid_kind"] = "does_not_run"
        out["reason"] = "; ".join([_verdict_text("buggy", buggy), _verdict_text("fixed", fixed)]
                                  + [f"tampering: {t}" for t in out["tampering"]])[:600]
    elif step.get("undecided") == NEEDS_NETWORK or (step.get("test_class") in ("Misaligned", "NotReproducing")
                                                     and fixed.get("network")):
        # MPE's one rule (rows stored before it are Misaligned with a network verdict): not a finding about the
        # test, its runs here have no network
        sides = "; ".join([_verdict_text("buggy", buggy), _verdict_text("fixed", fixed)])
        out.update(status="needs_network", reason=f"the test fails on the fixed code only where it reaches for the "
                                                  f"network, which its runs here do not have; {sides}"[:600])
    elif step.get("test_class") == "Inconclusive":
        from coharden.study.summary import no_admissible_reason

        out["reason"] = step.get("pool_incomplete_reason") or no_admissible_reason(step)
    elif step.get("test_class") in ("Misaligned", "NotReproducing"):
        out["reason"] = "; ".join([_verdict_text("buggy", buggy), _verdict_text("fixed", fixed)])[:600]
    return out
