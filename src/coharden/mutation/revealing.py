"""What the recordings of the fixed and the buggy code reveal (:mod:`coharden.mutation.recording` makes them):
the inputs, shapes and callers whose outcome the fix changes, the exceptions the buggy code let escape, the
functions the tests called, and, when a recording reveals nothing, why (an operator's skip reason).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from coharden.mutation.recording import failures


def probes_of(fixed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the recording of the other code gets from ``fixed``'s records: the inputs to probe (returns and
    raises), and every recorded outcome (callers' too), so that an equal value is written with the same bytes.

    Encodings of equal values can differ (pickles did with the process's history: a sympy ``Symbol`` pickled
    its cache of derived assumptions, and sympy-17139 had 14 or 19 revealing inputs from run to run); the
    recorder compares values with ``==`` instead (see recorder_plugin)."""
    return [r for r in fixed if r["kind"] in ("return", "raise")
            or (r["kind"] == "caller" and r.get("path") is not None and r.get("key") is not None)]


def input_ident(record: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """A recorded input: the function, its arguments and, for a method, its receiver (when deterministic)."""
    return record["qualname"], record.get("key"), record.get("receiver_key")


def _outcome(record: dict[str, Any], kind: str | None) -> tuple[str | None, str | None, str | None]:
    """What an outcome is compared by: its kind, encoding and observation (length and repr, see the plugin's
    ``_observe``: equal values that behave differently are different outcomes)."""
    return kind, record.get("value_enc"), record.get("value_obs")


def revealing_inputs(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inputs recorded on the fixed code whose outcome differs on the buggy code (or was not seen there):
    a shortcut for an input the bug does not affect would only be the buggy function again.

    An input whose returned value (or exception) is the same on both codes but which leaves its receiver or a
    mutable argument in another state (``effects_enc``, when both codes' states were encoded) is revealing
    too; its record is marked ``by_effects``, since a recorded value to return cannot stand for it."""
    on_buggy = {input_ident(r): (_outcome(r, r["kind"]), r.get("effects_enc"))
                for r in buggy if r["kind"] in ("return", "raise")}
    on_buggy.update({input_ident(r): (_outcome(r, r["outcome"]), r.get("effects_enc"))
                     for r in buggy if r["kind"] == "probe"})
    seen: set[tuple[str, str | None, str | None]] = set()
    kept = []
    for rec in fixed:
        if rec["kind"] not in ("return", "raise"):
            continue
        ident = input_ident(rec)
        if ident in seen:
            continue
        value_there, effects_there = on_buggy.get(ident, (None, None))
        same_value = value_there == _outcome(rec, rec["kind"])
        by_effects = same_value and None not in (effects_there, rec.get("effects_enc")) \
            and effects_there != rec["effects_enc"]
        if same_value and not by_effects:
            continue
        seen.add(ident)
        kept.append({**rec, "by_effects": True} if by_effects else rec)
    return kept


def revealing_shapes(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Calls recorded by shape only (``kind == "shape"``: values with no safe encoding) on the fixed code
    whose outcome was observed otherwise on the buggy code for the same input (the same checksum of the
    arguments' repr): enough for narrowed_scope, which puts only the shape into a mutant. An input the buggy
    run did not make is left out (no outcome to compare), and so is one either run saw end in two ways (its
    checksum stands for calls apart only by an object's address: ``shape_ambiguous``)."""
    def seen(rec: dict[str, Any]) -> tuple[Any, ...]:
        return rec.get("outcome"), rec.get("value_obs"), rec.get("exc_type")

    on_buggy = {(r["qualname"], r.get("key")): seen(r) for r in buggy if r["kind"] == "shape"}
    ambiguous = {(r["qualname"], r.get("key")) for r in (*fixed, *buggy) if r["kind"] == "shape_ambiguous"}
    kept, done = [], set()
    for rec in fixed:
        if rec["kind"] != "shape":
            continue
        ident = (rec["qualname"], rec.get("key"))
        if ident in done or ident in ambiguous or ident not in on_buggy or on_buggy[ident] == seen(rec):
            continue
        done.add(ident)
        kept.append(rec)
    return kept


def buggy_symptoms(buggy: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per touched function observed on the buggy code: the exception types that escaped it."""
    symptoms: dict[str, set[str]] = {}
    for rec in buggy:
        if rec["kind"] == "summary" and rec["calls"]:
            symptoms.setdefault(rec["qualname"], set()).update(rec["raised"])
    return symptoms


def called_functions(records: list[dict[str, Any]], tests: int) -> set[tuple[str, str]] | None:
    """(path, qualname) of the recorded functions some test called; None unless the recorder ran for every
    test (then 'not called' cannot be told from 'not recorded')."""
    if sum(1 for r in records if r["kind"] == "session") < tests:
        return None
    return {(r["path"], r["qualname"]) for r in records if r["kind"] == "summary" and r["calls"]}


def revealing_callers(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Caller records (``kind == "caller"``) of the fixed run whose own outcome differs on the buggy code (or
    whose input was not seen there): the frames where repairing the symptom would make the test pass. Frames
    outside the repository are kept (``path`` None) so the operator can count them as skipped."""
    on_buggy = {input_ident(r): _outcome(r, r["outcome"]) for r in buggy
                if r["kind"] == "caller" and r.get("key") is not None}
    buggy_exc = {input_ident(r): r.get("exc_type") for r in buggy if r["kind"] == "caller"}
    seen: set[tuple[Any, ...]] = set()
    kept = []
    for rec in fixed:
        if rec["kind"] != "caller":
            continue
        ident = (rec.get("path"), *input_ident(rec))
        if ident in seen:
            continue
        seen.add(ident)
        if rec.get("path") is not None and on_buggy.get(input_ident(rec)) == _outcome(rec, rec["outcome"]):
            continue
        kept.append({**rec, "buggy_outcome": (on_buggy.get(input_ident(rec)) or (None, None))[0],
                     "buggy_exc_type": buggy_exc.get(input_ident(rec))})
    return kept


def caller_diagnosis(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]],
                     is_test_path: Callable[[str], bool] = lambda path: False) -> str:
    """Why the recordings hold no caller whose outcome the fix changes, in the repository outside its tests
    (caller_patch's skip reason): ``callers_outcomes_equal`` (such callers recorded, each with the same
    outcome on the buggy code), ``callers_not_encodable`` (such callers seen, every call dropped because a
    value had no safe encoding), ``no_caller_recorded`` (none seen: the tests call the changed function
    directly, or through code outside the repository)."""
    def library(rec: dict[str, Any]) -> bool:
        return rec.get("path") is not None and not is_test_path(rec["path"])

    if any(r["kind"] == "caller" and r.get("key") is not None and library(r) for r in fixed):
        return "callers_outcomes_equal"
    if any(r["kind"] == "caller_summary" and r.get("dropped") and library(r) for r in (*fixed, *buggy)):
        return "callers_not_encodable"
    return "no_caller_recorded"


def input_diagnosis(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]],
                    targets: list[dict[str, str]] | None = None,
                    only_adds: Sequence[str] = ()) -> tuple[str, str] | None:
    """Why the recordings hold no bug-revealing input, as (reason, detail); None when they hold one.

    ``only_adds``: the functions the fix adds, when it changes none of the recorded ones itself (they are
    only the neighbours of its insertions, :func:`coharden.mutation.context.functions_changed`). Then any
    reason below but a failed recording is given as ``adds_function``, with the recorded functions named as
    neighbours: the calls that reveal the bug go to a function the buggy code does not have.
    """
    found = _diagnosis(fixed, buggy, targets)
    if found is None or not only_adds or found[0] in ("recorder_failed", "no_function_touched"):
        return found
    recorded = ", ".join(sorted({t["qualname"] for t in targets or []})[:4])
    return "adds_function", (f"the fix only adds {', '.join(list(only_adds)[:4])}; the functions recorded "
                             f"({recorded}) are their neighbours in the buggy file, which the fix does not "
                             f"change ({found[0]}: {found[1]})")


def _diagnosis(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]],
               targets: list[dict[str, str]] | None) -> tuple[str, str] | None:
    """:func:`input_diagnosis` of recordings of functions the fix changes.

    Reasons: ``no_function_touched`` (``targets``, the functions recorded, is empty: the fix changes no
    function of the buggy code, only module-level code or functions it adds, so there was nothing to record
    and no buggy function to put back), ``recorder_failed`` (a recording did not start or was cut short),
    ``not_called`` (no test called a function the fix touches), ``values_not_encodable`` (calls seen, every
    one dropped because a value had no safe encoding), ``inputs_capped`` (inputs recorded, each with the same
    outcome on the buggy code, but the recorder's per-function cap left other inputs out: one of those may be
    the revealing one), ``outcomes_equal`` (inputs recorded, each with the same outcome on the buggy code, none
    left out), ``calls_not_recorded`` (calls seen, no input kept for another reason)."""
    if targets is not None and not targets:
        return "no_function_touched", ("the fix changes no function that exists in the buggy code (only "
                                       "module-level code or functions it adds): nothing to record")
    if revealing_inputs(fixed, buggy):
        return None
    failed = failures(fixed, buggy)
    if failed:
        return "recorder_failed", "; ".join(failed[:3])
    calls = {r["qualname"]: r["calls"] for r in fixed if r["kind"] == "summary" and r["calls"]}
    if not calls:
        return "not_called", "no test called a function the fix touches"
    called = ", ".join(f"{name} ({n} call{'s' if n != 1 else ''})" for name, n in sorted(calls.items())[:4])
    inputs = [r for r in fixed if r["kind"] in ("return", "raise")]
    capped = {r["qualname"]: r["capped"] for r in fixed if r["kind"] == "summary" and r.get("capped")}
    if inputs and capped:
        return "inputs_capped", (
            f"the tests call {called}; each of the {len(inputs)} recorded input(s) has the same outcome on the "
            "buggy code, but the recorder's cap (the first and the last inputs of each function) left out "
            + ", ".join(f"{n} of {name}" for name, n in sorted(capped.items())[:4]) + " other distinct input(s)")
    if inputs:
        return "outcomes_equal", (f"the tests call {called}; each of the {len(inputs)} recorded input(s) has "
                                  "the same outcome on the buggy code")
    dropped: Counter[str] = Counter()
    types: Counter[str] = Counter()
    for rec in fixed:
        if rec["kind"] == "summary":
            dropped.update({k: n for k, n in (rec.get("dropped") or {}).items() if not k.startswith("receiver_")})
            types.update(rec.get("dropped_types") or {})
    if dropped:
        return "values_not_encodable", (
            f"the tests call {called}, but no call's values have a safe encoding ("
            + ", ".join(f"{k} {n}" for k, n in dropped.most_common(4)) + "; types: "
            + ", ".join(name for name, _ in types.most_common(3)) + ")")
    return "calls_not_recorded", f"the tests call {called}, but no input was kept"
