"""The laxity table of public test generators (issue 37): every reachable SWT-bench instance x every system with
predictions in the shared data directory, as a dataset of one JSON Lines row per (instance, system).

What runs is the real-bugs study's (:class:`~coharden.study.real_bugs.RealBugsStudy`, phases ``verify`` and
``grade``: the golden test's F->P check, then MPE of each system's test against the golden test), so its step
records in the store are shared with ``coharden study real-bugs`` and a rerun resumes from them; on Ray each
instance is one job of :func:`coharden.study.distributed.study_instance_job`. This module decides *which* rows
the table has and what each one says, and writes them:

* the universe: each system's benchmark (:data:`TABLE_SYSTEMS`; SWT-bench Verified for Otter, Otter++,
  AssertFlip; SWT-bench Lite for Devstral-testgen; Lite outside SWE-bench Verified for AssertFlip-Lite);
* one row per (instance of a system's benchmark, system), whatever happened: ``unreachable`` (no clone under
  ``--repos``), ``unchecked`` (not in the environment check), ``env_unverified`` (the check says the golden test
  does not verify here, with its reason), ``pending`` (not run yet), ``env_error`` (this run could not build its
  environment), ``golden_not_f2p``, ``no_prediction``, ``invalid`` (the test does not apply, touches no test
  file, adds no test, ...), ``harness_error``, ``error``, or ``graded`` (the MPE class with its interval);
* the dataset file is append-only, instance by instance, and the last row of a (instance, system) wins: a killed
  run loses at most the instance it was on, the file can be committed as it grows, and a rerun skips every
  instance whose rows are final under the same configuration. Rows are written by the driver only.

The report (:mod:`coharden.study.table_report`) is computed from the dataset alone.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from coharden import __version__
from coharden.config import Settings
from coharden.execution.store import Store
from coharden.instances import load_records
from coharden.jsonl import json_lines
from coharden.patches import is_test_path, touched_files
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.study.data import ASSERTFLIP_REPORT, SWT_IDS, StudyData, StudyError, load_env_check
from coharden.study.real_bugs import RealBugsStudy, StudyConfig

if TYPE_CHECKING:
    from coharden.execution.engine import Engine

DATASET = "table.jsonl"
VERIFIED_RECORDS = "swebench_verified.jsonl"
LITE_RECORDS = "swtbench_lite_instances.jsonl"
PHASES = ("verify", "grade")
SCHEMA = 1  # the rows' layout: bump it when a field changes meaning

VERIFIED = "SWT-bench Verified"
LITE = "SWT-bench Lite"
LITE_ONLY = "SWT-bench Lite outside SWE-bench Verified"


@dataclass(frozen=True)
class TableSystem:
    file: str  # under brt_predictions/ (or any path, for --system NAME=FILE)
    benchmark: str  # VERIFIED, LITE or LITE_ONLY: the instances the system is graded on


#: the systems with predictions in the shared data directory (see its README)
TABLE_SYSTEMS: dict[str, TableSystem] = {
    "Otter": TableSystem("otter_gpt4o_tddbench_verified.jsonl", VERIFIED),
    "Otter++": TableSystem("otter_plus_gpt4o_tddbench_verified.jsonl", VERIFIED),
    "AssertFlip": TableSystem("assertflip_gpt4o_swtbench_verified.jsonl", VERIFIED),
    "AssertFlip-Lite": TableSystem("assertflip_gpt4o_swtbench_lite188.jsonl", LITE_ONLY),
    "Devstral-testgen": TableSystem("devstral_testgen_swtbench_lite.jsonl", LITE),
}
PUBLISHED = {"AssertFlip": ASSERTFLIP_REPORT}  # system -> its published SWT-bench harness report

#: statuses a rerun retries (nothing of them is in the store); every other status is final
TRANSIENT = frozenset({"pending", "env_error", "harness_error"})
#: statuses decided before anything runs: recomputed on every run from the data, the clones and the check
ENVIRONMENT = ("unreachable", "unchecked", "env_unverified")
STATUSES = ("graded", "invalid", "no_prediction", "golden_not_f2p", "harness_error", "env_error", "error",
            "pending", "env_unverified", "unchecked", "unreachable")
#: what a dataset row holds that differs between two runs giving the same results
VOLATILE = frozenset({"seconds", "verify_seconds", "resumed", "coharden"})


# --- data ---------------------------------------------------------------------------------------------------

@dataclass
class TableData:
    """What the table reads: records, benchmarks, predictions, the environment check, the clones present."""

    data_dir: Path
    instances: dict[str, Instance]
    benchmarks: dict[str, set[str]]  # benchmark -> instance ids
    systems: dict[str, TableSystem]
    predictions: dict[str, dict[str, str]]  # system -> instance id -> test patch (its benchmark's only)
    env_check: dict[str, dict[str, Any]]
    env_field: str
    env_source: str
    spec_envs: bool
    reachable: set[str]  # instance ids whose repository has a clone under --repos
    published: dict[str, dict[str, bool]] = field(default_factory=dict)  # system -> id -> F->P by its harness
    notes: list[str] = field(default_factory=list)

    def universe(self, system: str) -> set[str]:
        """The instances ``system`` is graded on: its benchmark's, with a record."""
        cache = self.__dict__.setdefault("_universe", {})
        if system not in cache:
            cache[system] = self.benchmarks[self.systems[system].benchmark] & set(self.instances)
        return cache[system]

    def ordered_ids(self) -> list[str]:
        """Every instance of some system's benchmark, by (repository, version, id): the instances of one
        environment follow one another, so each spec environment is built once and then reused."""
        ids = set().union(*(self.universe(s) for s in self.systems)) if self.systems else set()
        return sorted(ids, key=lambda i: (self.instances[i].repo, str(self.instances[i].version or ""), i))

    def systems_of(self, iid: str) -> list[str]:
        return [s for s in self.systems if iid in self.universe(s)]

    def environment(self, iid: str) -> tuple[str, str]:
        """(status, reason) decided before anything runs: unreachable / unchecked / env_unverified, or
        ("ready", "")."""
        inst = self.instances[iid]
        if iid not in self.reachable:
            return "unreachable", f"no clone of {inst.repo} under --repos ({inst.repo.replace('/', '__')})"
        row = self.env_check.get(iid)
        if row is None:
            return "unchecked", f"not in the environment check {self.env_source} (run coharden study envcheck)"
        if not row.get(self.env_field):
            note = str(row.get("note") or row.get(self.env_field[: -len("verified")] + "note") or "")
            return "env_unverified", note or f"{self.env_source}: not verified"
        return "ready", ""

    def study_data(self, ids: Sequence[str]) -> StudyData:
        """The real-bugs study's data for ``ids`` (in this order): no fixes, every system's predictions."""
        wanted = set(ids)
        return StudyData(
            data_dir=self.data_dir, instances={i: self.instances[i] for i in ids},
            env_check={i: self.env_check[i] for i in ids if i in self.env_check}, env_field=self.env_field,
            swt_ids=set(self.benchmarks.get(VERIFIED, set())) & wanted, study_ids=list(ids),
            predictions={s: {i: p for i, p in preds.items() if i in wanted} for s, preds in self.predictions.items()},
            assertflip_resolved={}, wrong_fixes={}, correct_fixes={}, env_source=self.env_source,
            spec_envs=self.spec_envs)


def _lines(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
    return [row for _, row in json_lines(path, StudyError)]


def load_table_data(data_dir: Path, repos_dir: Path, *, envcheck: Path | None, python_version: str | None,
                    systems: Sequence[str] | None = None, system_files: dict[str, Path] | None = None
                    ) -> TableData:
    """The table's inputs from the shared data directory: SWE-bench Verified and SWT-bench Lite records, the
    benchmarks' ids, the predictions of ``systems`` (default: every one of :data:`TABLE_SYSTEMS`; ``system_files``
    adds systems graded on SWT-bench Verified), AssertFlip's published report, the environment check
    (``envcheck``, else the data directory's sympy check on ``python_version``) and which clones exist."""
    data_dir, repos_dir = Path(data_dir), Path(repos_dir)
    instances: dict[str, Instance] = {}
    for name in (VERIFIED_RECORDS, LITE_RECORDS):
        for inst in load_records(data_dir / name) if (data_dir / name).is_file() else []:
            instances.setdefault(inst.instance_id, inst)
    if not instances:
        raise StudyError(f"{data_dir}: neither {VERIFIED_RECORDS} nor {LITE_RECORDS} found (is --data the shared "
                         "data directory?)")
    swt = data_dir / SWT_IDS
    verified = {line.strip() for line in swt.read_text().splitlines() if line.strip()} if swt.is_file() else set()
    lite_path = data_dir / LITE_RECORDS
    lite = {row["instance_id"] for row in _lines(lite_path)} if lite_path.is_file() else set()
    swe_verified = {row["instance_id"] for row in _lines(data_dir / VERIFIED_RECORDS)} \
        if (data_dir / VERIFIED_RECORDS).is_file() else set()
    benchmarks = {VERIFIED: verified, LITE: lite, LITE_ONLY: lite - swe_verified}

    chosen: dict[str, TableSystem] = {}
    for name in systems if systems is not None else list(TABLE_SYSTEMS):
        if name not in TABLE_SYSTEMS:
            raise StudyError(f"unknown system {name!r} (known: {', '.join(TABLE_SYSTEMS)}; or give its "
                             "predictions with --system NAME=FILE)")
        chosen[name] = TableSystem(str(data_dir / "brt_predictions" / TABLE_SYSTEMS[name].file),
                                   TABLE_SYSTEMS[name].benchmark)
    for name, path in (system_files or {}).items():
        chosen[name] = TableSystem(str(path), VERIFIED)
    notes: list[str] = []
    predictions: dict[str, dict[str, str]] = {}
    for name, system in chosen.items():
        universe = benchmarks[system.benchmark] & set(instances)
        mine: dict[str, str] = {}
        outside = 0
        for row in _lines(Path(system.file)):
            iid = str(row.get("instance_id"))
            if iid not in universe:
                outside += 1
                continue
            if iid in mine:
                notes.append(f"{name}: duplicate prediction for {iid}; the first one is used")
                continue
            mine[iid] = row.get("model_patch") or ""
        if outside:
            notes.append(f"{name}: {outside} predictions outside {system.benchmark} (or without a record): "
                         "not graded")
        predictions[name] = dict(sorted(mine.items()))

    published: dict[str, dict[str, bool]] = {}
    for name, file in PUBLISHED.items():
        if name in chosen and (data_dir / file).is_file():
            report = json.loads((data_dir / file).read_text())
            outcome = {i: False for key in ("unresolved_ids", "error_ids") for i in report.get(key, [])}
            outcome.update({i: True for i in report.get("resolved_ids", [])})
            published[name] = outcome
    env_rows, env_field, env_source = load_env_check(data_dir, envcheck, python_version)
    repos = {inst.repo for inst in instances.values()}
    present = {repo for repo in repos if (repos_dir / repo.replace("/", "__")).is_dir()}
    return TableData(data_dir=data_dir, instances=instances, benchmarks=benchmarks, systems=chosen,
                     predictions=predictions, env_check=env_rows, env_field=env_field, env_source=env_source,
                     spec_envs=envcheck is not None, reachable={i for i, inst in instances.items()
                                                                if inst.repo in present},
                     published=published, notes=notes)


# --- configuration -------------------------------------------------------------------------------------------

class TableConfig(BaseModel):
    study: StudyConfig = Field(default_factory=lambda: StudyConfig(verify_all=False))
    repos: list[str] = Field(default_factory=list)  # run only these repositories (owner/name)
    ids: list[str] = Field(default_factory=list)  # run only these instances
    limit: int | None = None  # run at most this many instances now (the rest stay pending)


def source_revision() -> str | None:
    """The git revision of coharden's own source when it runs from a checkout (``git describe --dirty``)."""
    from coharden.execution.git import git

    here = Path(__file__).resolve().parent
    try:
        proc = git(["describe", "--always", "--dirty", "--abbrev=12"], here, check=False)
    except OSError:
        return None
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def run_configuration(config: TableConfig, settings: Settings, data: TableData) -> dict[str, Any]:
    """What every row records of how it was made (``key``: what a rerun must match to reuse the row)."""
    from coharden.execution.executor import environment_id

    mpe = config.study.mpe
    if data.spec_envs and settings.python == sys.executable:  # auto_spec_settings: no --python override
        environment = "spec environments (envcheck)"
    else:  # the interpreter's versions, not its path: the same configuration on every machine
        environment = "python {} pytest {}".format(*environment_id(settings.python).split()[1:3])
    shown = {"tau": mpe.tau, "confidence": mpe.confidence, "paper_classes": mpe.paper_classes,
             "sequential": mpe.is_sequential, "per_operator": None if mpe.is_sequential else mpe.per_operator,
             "max_mutants": mpe.max_mutants if mpe.is_sequential else None, "seed": mpe.seed,
             "operators": "default" if mpe.operators == MPEConfig().operators else [op.value for op in mpe.operators],
             "environment": environment}
    key = hashlib.sha256(json.dumps([SCHEMA, mpe.cache_key(), environment], sort_keys=True, default=str)
                         .encode()).hexdigest()[:12]
    return {**shown, "workers": config.study.workers, "timeout": settings.timeout, "key": key}


# --- rows ----------------------------------------------------------------------------------------------------

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

    def look(name: str, verdict: Any) -> None:
        if isinstance(verdict, dict) and verdict.get("outcome") == "HARNESS_ERROR":
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
        "inadmissible": step.get("inadmissible") or {}, "warnings": step.get("warnings") or [],
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
    elif step.get("test_class") == "Inconclusive":
        from coharden.study.summary import no_admissible_reason

        out["reason"] = step.get("pool_incomplete_reason") or no_admissible_reason(step)
    elif step.get("test_class") in ("Misaligned", "NotReproducing"):
        out["reason"] = "; ".join([_verdict_text("buggy", buggy), _verdict_text("fixed", fixed)])[:600]
    return out


# --- the dataset file ----------------------------------------------------------------------------------------

class Dataset:
    """The table's JSON Lines file: appended to, never rewritten; the last row of a (instance, system) wins."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._latest: dict[tuple[str, str], dict[str, Any]] | None = None

    def read(self) -> list[dict[str, Any]]:
        """Every row in file order. A last line cut short (a run killed while writing) is left out."""
        if not self.path.is_file():
            return []
        text = self.path.read_text()
        if text and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]
        return [row for _, row in json_lines(self.path, StudyError, text=text)]

    def latest(self) -> dict[tuple[str, str], dict[str, Any]]:
        if self._latest is None:
            self._latest = {(r["instance_id"], r["system"]): r for r in self.read()}
        return self._latest

    def append(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append the rows that differ from the latest ones (volatile fields aside); how many were written."""
        latest = self.latest()
        new = [r for r in rows if _stable(latest.get((r["instance_id"], r["system"]))) != _stable(r)]
        if not new:
            return 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.is_file() and self.path.stat().st_size:
            with open(self.path, "rb") as handle:  # a line cut short by a killed run: end it before appending
                handle.seek(-1, os.SEEK_END)
                cut = handle.read(1) != b"\n"
            if cut:
                text = self.path.read_text()
                self.path.write_text(text[: text.rfind("\n") + 1])
        with open(self.path, "a") as handle:
            handle.write("".join(json.dumps(r, sort_keys=True) + "\n" for r in new))
            handle.flush()
            os.fsync(handle.fileno())
        for r in new:
            latest[(r["instance_id"], r["system"])] = r
        return len(new)

    def done(self, iid: str, systems: Sequence[str], key: str) -> bool:
        """Whether every row of ``iid`` is final and made under the configuration ``key``."""
        latest = self.latest()
        rows = [latest.get((iid, s)) for s in systems]
        return all(r is not None and r["status"] not in TRANSIENT and r["status"] not in ENVIRONMENT
                   and r.get("config", {}).get("key") == key for r in rows)


def _stable(row: dict[str, Any] | None) -> Any:
    """What makes a row news: not its times or coharden's revision, and of its configuration only the key (a
    rerun with more workers or another time limit does not write every row again)."""
    if row is None:
        return None
    return {k: (v.get("key") if k == "config" else v) for k, v in row.items() if k not in VOLATILE}


def latest_rows(path: Path) -> list[dict[str, Any]]:
    """The dataset's current rows (the last per (instance, system)), in file order of their last write."""
    return list(Dataset(path).latest().values())


# --- the run -------------------------------------------------------------------------------------------------

@dataclass
class TableRun:
    """What one invocation did."""

    planned: int = 0  # instances of the table
    ran: list[str] = field(default_factory=list)
    skipped: int = 0  # already final in the dataset
    left: int = 0  # runnable and not done, beyond --limit or outside --repo / --id
    written: int = 0  # rows appended
    statuses: dict[str, int] = field(default_factory=dict)


Progress = Callable[[str, int], None]


def run_table(data: TableData, settings: Settings, config: TableConfig, dataset: Dataset, *,
              engine: Engine | None = None, progress: Progress | None = None,
              on_plan: Callable[[int], None] | None = None) -> TableRun:
    """Make (or resume) the table: rows for every instance of every system's benchmark; the runnable instances
    selected by ``config`` run (serially here, or as jobs on ``engine``), each one's rows appended as it ends.
    ``on_plan(n)``: how many instances will run, before the first one starts."""
    run = {**run_configuration(config, settings, data), "revision": source_revision()}
    key = run["key"]
    result = TableRun()
    todo: list[str] = []
    for iid in data.ordered_ids():
        result.planned += 1
        status, reason = data.environment(iid)
        if status != "ready":
            result.written += dataset.append(environment_rows(data, iid, status, reason, run))
            continue
        if dataset.done(iid, data.systems_of(iid), key):
            result.skipped += 1
            continue
        latest = dataset.latest()
        if any((iid, s) not in latest or latest[(iid, s)].get("config", {}).get("key") != key
               or latest[(iid, s)]["status"] in ENVIRONMENT for s in data.systems_of(iid)):
            result.written += dataset.append(environment_rows(data, iid, "pending", "not run yet", run))
        inst = data.instances[iid]
        if (config.repos and inst.repo not in config.repos) or (config.ids and iid not in config.ids):
            result.left += 1
            continue
        todo.append(iid)
    if config.limit is not None and len(todo) > config.limit:
        result.left += len(todo) - config.limit
        todo = todo[: config.limit]
    if on_plan:
        on_plan(len(todo))
    study_config = config.study.model_copy(update={"systems": list(data.systems), "verify_all": False,
                                                   "ids": None, "split": "all", "report_only": False})

    def arrived(iid: str, steps: dict[str, list[dict[str, Any]]]) -> None:
        rows = instance_rows(data, iid, steps, run, settings.test_patterns)
        result.written += dataset.append(rows)
        result.ran.append(iid)
        if progress:
            progress(f"{iid}: " + ", ".join(f"{r['system']} {r['class'] or r['status']}" for r in rows), 1)

    if engine is None and todo:
        store = Store(settings.store)
        try:
            with RealBugsStudy(data.study_data(todo), settings, store, study_config) as study:
                for iid in todo:
                    arrived(iid, study.run_instance(iid, PHASES))
        finally:
            store.close()
    elif todo and engine is not None:
        from coharden.study.distributed import study_instance_job

        jobs = [(study_instance_job, (data.study_data([iid]), settings, study_config, iid, list(PHASES)))
                for iid in todo]
        engine.run(jobs, lambda index, out: arrived(todo[index], out["rows"]))
    for row in dataset.latest().values():
        if row["instance_id"] in data.instances and row["system"] in data.systems:
            result.statuses[row["status"]] = result.statuses.get(row["status"], 0) + 1
    return result

