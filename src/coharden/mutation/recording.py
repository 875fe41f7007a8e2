"""Run the tests with the input recorder plugin and read what it saw.

The plugin (:mod:`coharden.mutation.recorder_plugin`) runs inside the test interpreter. It records, for the
functions the fix touches, argument -> outcome of their outermost calls, and for each such call up to two
calling frames inside the repository (their own argument -> outcome), so operators can imitate fixes made at
the caller. This module turns its JSON lines into records with repository-relative paths.
"""

from __future__ import annotations

import functools
import hashlib
import json
import keyword
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_runner import PLUGIN_PATH
from coharden.schema.testpatch import TestPatch

Mapper = Callable[[Sequence[Callable[[InstanceExecutor], Any]]], list[Any]]
"""Runs tasks (functions of an executor) and returns their results in order, e.g. on several workers."""

RECORDER = Path(__file__).with_name("recorder_plugin.py")
log = logging.getLogger(__name__)


def _serial(executor: InstanceExecutor) -> Mapper:
    return lambda tasks: [task(executor) for task in tasks]


def record_calls(executor: InstanceExecutor, source_patch: str, tests: Sequence[TestPatch],
                 targets: list[dict[str, str]], probes: list[dict[str, Any]] | None = None, *,
                 mapper: Mapper | None = None) -> list[dict[str, Any]]:
    """Run each test on base + ``source_patch`` with the recorder plugin: the deterministic inputs and outcomes
    of ``targets``, one ``summary`` record per function (calls seen, exception types that escaped), and, for
    ``probes`` (records from another run), a ``probe`` record with this code's outcome on that input.

    Tests that lay down the same files with the same ids (the golden test and a copy of it) are recorded once.
    ``mapper`` runs the per-test recordings (in parallel when it has several workers). With a result store the
    records of one (code, test, targets, probes) are kept, so grading several tests of one instance records the
    reference test once."""
    if not targets:
        return []
    first: dict[str, int] = {}
    for index, test in enumerate(tests):
        first.setdefault(_recording_ident(test), index)
    unique = sorted(set(first.values()))
    runs = (mapper or _serial(executor))(
        [functools.partial(_record_one, source_patch=source_patch, test=tests[i], targets=targets, probes=probes)
         for i in unique])
    by_index = dict(zip(unique, runs, strict=True))
    records: list[dict[str, Any]] = []
    labels: dict[str, str] = {}  # recording ident -> label; two different tests never share one
    for index, test in enumerate(tests):
        ran = by_index[first[_recording_ident(test)]]
        if ran is None:
            continue
        label = test.name or f"test{index}"
        while label in labels.values() and labels.get(_recording_ident(test)) != label:
            label += "'"
        labels[_recording_ident(test)] = label
        records.append({"kind": "session", "from_test": label})
        records += [{**rec, "from_test": label} for rec in ran]
    return records


def _recording_ident(test: TestPatch) -> str:
    """What a recording run depends on from the test: the files it lays down and the ids it runs."""
    files = test.files or {"<patch>": test.patch}
    return json.dumps([sorted(files.items(), key=lambda kv: kv[0]), list(test.ids)], default=str)


def _record_one(executor: InstanceExecutor, *, source_patch: str, test: TestPatch, targets: list[dict[str, str]],
                probes: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The records (paths relative to the repository, None outside it; no ``from_test``) of one test, or None
    when the recorder did not run. Served from / kept in the executor's store when it has one."""
    store = executor.store
    key = hashlib.sha256(json.dumps([
        "recording", 2, executor.env_id, executor.instance.repo, executor.base_commit, source_patch,
        _recording_ident(test), targets, probes or [], hashlib.sha256(RECORDER.read_bytes()).hexdigest(),
    ], sort_keys=True, default=str).encode()).hexdigest()
    if store is not None:
        cached = store.get_record("recording", key)
        if cached is not None:
            return cached["records"]
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-rec-", dir=executor.shared_dir()))
    try:
        shutil.copy(RECORDER, plugin_dir / "coharden_recorder.py")
        root = executor.workspace_root()
        targets_file = plugin_dir / "targets.json"
        targets_file.write_text(json.dumps([{"file": str(root / t["path"]), "qualname": t["qualname"]}
                                            for t in targets]))
        env = {
            PLUGIN_PATH: str(plugin_dir),
            "COHARDEN_RECORD_TARGETS": str(targets_file),
            "COHARDEN_RECORD_ROOT": str(root.resolve()),
        }
        if probes:
            probe_file = plugin_dir / "probes.jsonl"
            probe_file.write_text("".join(json.dumps({
                "file": str(root / r["path"]), "qualname": r["qualname"], "key": r["key"],
                "args_pickle": r["args_pickle"], "receiver_key": r.get("receiver_key"),
                "receiver_pickle": r.get("receiver_pickle"), "kind": r["kind"], "outcome": r.get("outcome"),
                "value_pickle": r.get("value_pickle")}) + "\n" for r in probes))
            env["COHARDEN_RECORD_PROBE"] = str(probe_file)
        out = root / ".coharden-records.jsonl"  # the worktree: writable in the test sandbox
        out.unlink(missing_ok=True)  # never read a file an earlier run left
        run = executor.run_raw(source_patch, test, extra_args=["-p", "coharden_recorder"], readable=[plugin_dir],
                               extra_env={**env, "COHARDEN_RECORD_OUT": str(out)})
        if not out.exists():  # the plugin opens it at start: it ran, even if no target was called
            return None
        records = parse_records(out.read_text(errors="replace"), root.resolve())
        if store is not None and not run.timed_out:
            store.put_record("recording", key, {"records": records})
        return records
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)


def parse_records(text: str, root: Path) -> list[dict[str, Any]]:
    """The recorder's JSON lines as records with repository-relative paths, keeping only well-formed ones.

    The file lies in the worktree, which the test under record can rewrite: its names and paths end up in
    mutants' code and file lists, so a line is dropped (and counted in a log line) unless every field that
    reaches code is what the recorder writes: parameter names that are identifiers, a receiver named
    ``self``/``cls``, a file path (outside the repository it becomes None, never a ``..`` path), string ids."""
    records: list[dict[str, Any]] = []
    dropped = 0
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not _well_formed(rec):
            dropped += 1
            continue
        assert isinstance(rec, dict)
        rec["path"] = _relative(rec.pop("file"), root)
        records.append(rec)
    if dropped:
        log.warning("recorder output: %d malformed line(s) dropped (written by the test under record?)", dropped)
    return records


def _identifier(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _well_formed(rec: Any) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str) or not isinstance(rec.get("file"), str):
        return False
    if not isinstance(rec.get("qualname"), str) or not all(
            _identifier(part) or part == "<locals>" for part in rec["qualname"].split(".")):
        return False
    params = rec.get("params", [])
    if not isinstance(params, list) or not all(_identifier(p) for p in params):
        return False
    if rec.get("receiver") not in (None, "self", "cls"):
        return False
    strings = ("key", "args_pickle", "value_pickle", "value_repr", "receiver_key", "receiver_pickle", "outcome",
               "exc_type", "callee", "shape", "type_shape")
    numbers = ("calls", "depth", "line")
    raised = rec.get("raised", [])
    return (all(rec.get(field) is None or isinstance(rec[field], str) for field in strings)
            and all(rec.get(field) is None or type(rec[field]) is int for field in numbers)
            and isinstance(raised, list) and all(isinstance(name, str) for name in raised))


def probes_of(fixed: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the recording of the other code gets from ``fixed``'s records: the inputs to probe (returns and
    raises), and every recorded outcome (callers' too), so that an equal value is written with the same bytes.

    Pickles of equal values differ with the process's history (a sympy ``Symbol`` pickles its cache of derived
    assumptions), so comparing bytes called an input bug-revealing at random (sympy-17139: 14 or 19 revealing
    inputs from run to run); the recorder compares values with ``==`` instead (see recorder_plugin)."""
    return [r for r in fixed if r["kind"] in ("return", "raise")
            or (r["kind"] == "caller" and r.get("path") is not None and r.get("key") is not None)]


def input_ident(record: dict[str, Any]) -> tuple[str, str | None, str | None]:
    """A recorded input: the function, its arguments and, for a method, its receiver (when deterministic)."""
    return record["qualname"], record.get("key"), record.get("receiver_key")


def revealing_inputs(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inputs recorded on the fixed code whose outcome differs on the buggy code (or was not seen there):
    a shortcut for an input the bug does not affect would only be the buggy function again."""
    on_buggy = {input_ident(r): (r["kind"], r["value_pickle"]) for r in buggy if r["kind"] in ("return", "raise")}
    on_buggy.update({input_ident(r): (r["outcome"], r["value_pickle"]) for r in buggy if r["kind"] == "probe"})
    seen: set[tuple[str, str | None, str | None]] = set()
    kept = []
    for rec in fixed:
        if rec["kind"] not in ("return", "raise"):
            continue
        ident = input_ident(rec)
        if ident in seen or on_buggy.get(ident) == (rec["kind"], rec["value_pickle"]):
            continue
        seen.add(ident)
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


def _relative(file: str, root: Path) -> str | None:
    """``file`` relative to the repository root; None for a file outside it (a caller in the standard
    library or site-packages: operators never patch those)."""
    try:
        relative = Path(os.path.normpath(file)).relative_to(root)
    except ValueError:
        return None
    return None if relative.parts[:1] == ("..",) or not relative.parts else str(relative)


def revealing_callers(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Caller records (``kind == "caller"``) of the fixed run whose own outcome differs on the buggy code (or
    whose input was not seen there): the frames where repairing the symptom would make the test pass. Frames
    outside the repository are kept (``path`` None) so the operator can count them as skipped."""
    on_buggy = {input_ident(r): (r["outcome"], r["value_pickle"]) for r in buggy
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
        if rec.get("path") is not None and on_buggy.get(input_ident(rec)) == (rec["outcome"], rec["value_pickle"]):
            continue
        kept.append({**rec, "buggy_outcome": (on_buggy.get(input_ident(rec)) or (None, None))[0],
                     "buggy_exc_type": buggy_exc.get(input_ident(rec))})
    return kept
