"""The laxity table of public test generators: every reachable SWT-bench instance x every system with
predictions in the shared data directory, as a dataset of one JSON Lines row per (instance, system).

What runs is the real-bugs study's (:class:`~coharden.study.real_bugs.RealBugsStudy`, phases ``verify`` and
``grade``: the golden test's F->P check, then MPE of each system's test against the golden test), so its step
records in the store are shared with ``coharden study real-bugs`` and a rerun resumes from them; on Ray each
instance is one job of :func:`coharden.study.distributed.study_instance_job`. The table decides *which* rows
it has and what each one says (:mod:`coharden.study.table_data` reads its inputs, :mod:`coharden.study.table_rows`
makes its rows), and this module writes them:

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

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.store import Store
from coharden.jsonl import json_lines
from coharden.schema.mpe_config import MPEConfig
from coharden.study.data import StudyError
from coharden.study.real_bugs import RealBugsStudy, StudyConfig
from coharden.study.table_data import TableData
from coharden.study.table_rows import SCHEMA, environment_rows, instance_rows

if TYPE_CHECKING:
    from coharden.execution.engine import Engine
    from coharden.mutation.llm_operators import LLMMutator

DATASET = "table.jsonl"
PHASES = ("verify", "grade")

#: statuses a rerun retries (nothing of them is in the store); every other status is final
TRANSIENT = frozenset({"pending", "env_error", "harness_error"})
#: statuses decided before anything runs: recomputed on every run from the data, the clones and the check
ENVIRONMENT = ("unreachable", "unchecked", "env_unverified")
STATUSES = ("graded", "invalid", "needs_network", "no_prediction", "golden_not_f2p", "harness_error", "env_error",
            "error", "pending", "env_unverified", "unchecked", "unreachable")
#: what a dataset row holds that differs between two runs giving the same results
VOLATILE = frozenset({"seconds", "verify_seconds", "resumed", "coharden"})


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
    from coharden.execution.verdict_cache import environment_id

    mpe = config.study.mpe
    if data.spec_envs and settings.environment.python == sys.executable:  # auto_spec_settings: no --python override
        environment = "spec environments (envcheck)"
    else:  # the interpreter's versions, not its path: the same configuration on every machine
        environment = "python {} pytest {}".format(*environment_id(settings.environment.python).split()[1:3])
    shown = {"tau": mpe.tau, "confidence": mpe.confidence, "paper_classes": mpe.paper_classes,
             "sequential": mpe.is_sequential, "per_operator": None if mpe.is_sequential else mpe.per_operator,
             "max_mutants": mpe.max_mutants if mpe.is_sequential else None, "seed": mpe.seed,
             "operators": "default" if mpe.operators == MPEConfig().operators else [str(op) for op in mpe.operators],
             "mutators": mpe.mutators(), "llm": mpe.llm,
             "environment": environment}
    key = hashlib.sha256(json.dumps([SCHEMA, mpe.cache_key(), environment], sort_keys=True, default=str)
                         .encode()).hexdigest()[:12]
    return {**shown, "workers": config.study.workers, "timeout": settings.sandbox.timeout, "key": key}


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


def take_limit(todo: list[str], limit: int | None, on_plan: Callable[[int], None] | None) -> tuple[list[str], int]:
    """The instances a run takes now (the first ``limit`` of ``todo``) and how many it leaves for a later run;
    ``on_plan`` hears how many it takes (the progress bar's total)."""
    left = 0
    if limit is not None and len(todo) > limit:
        todo, left = todo[:limit], len(todo) - limit
    if on_plan:
        on_plan(len(todo))
    return todo, left


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


@dataclass(frozen=True)
class RunContext:
    """What the command that starts a dataset study's run (the laxity table, validity) gives it beside the
    study's inputs and choices: the settings it runs under and who hears of it: ``progress(text, n)`` a line
    and ``n`` more steps done as the run goes (an instance of the table, a fix of validity), ``on_plan(n)`` how
    many instances will run, before the first one starts (a progress bar's total)."""

    settings: Settings
    progress: Progress | None = None
    on_plan: Callable[[int], None] | None = None
    llm_mutator: LLMMutator | None = None  # joins every graded pool when the study's mpe.llm names its model


def run_table(data: TableData, config: TableConfig, dataset: Dataset, context: RunContext, *,
              engine: Engine | None = None) -> TableRun:
    """Make (or resume) the table: rows for every instance of every system's benchmark; the runnable instances
    selected by ``config`` run under ``context`` (serially here, or as jobs on ``engine``), each one's rows
    appended as it ends."""
    settings, progress = context.settings, context.progress
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
    todo, later = take_limit(todo, config.limit, context.on_plan)
    result.left += later
    study_config = config.study.model_copy(update={"systems": list(data.systems), "verify_all": False,
                                                   "ids": None, "split": "all", "report_only": False})

    def arrived(iid: str, steps: dict[str, list[dict[str, Any]]]) -> None:
        rows = instance_rows(data, iid, steps, run, settings.tests.test_patterns)
        result.written += dataset.append(rows)
        result.ran.append(iid)
        if progress:
            progress(f"{iid}: " + ", ".join(f"{r['system']} {r['class'] or r['status']}" for r in rows), 1)

    if engine is None and todo:
        store = Store(settings.store)
        try:
            with RealBugsStudy(data.study_data(todo), settings, store, study_config, context.llm_mutator) as study:
                for iid in todo:
                    arrived(iid, study.run_instance(iid, PHASES))
        finally:
            store.close()
    elif todo and engine is not None:
        if context.llm_mutator is not None:
            raise CoHardenError("LLM mutants run with the local executor (one client, one budget)")
        from coharden.study.distributed import study_instance_job

        jobs = [(study_instance_job, (data.study_data([iid]), settings, study_config, iid, list(PHASES)))
                for iid in todo]
        engine.run(jobs, lambda index, out: arrived(todo[index], out["rows"]))
    for row in dataset.latest().values():
        if row["instance_id"] in data.instances and row["system"] in data.systems:
            result.statuses[row["status"]] = result.statuses.get(row["status"], 0) + 1
    return result

