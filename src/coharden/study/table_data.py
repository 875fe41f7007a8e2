"""What the laxity table reads: SWE-bench Verified and SWT-bench Lite records, each benchmark's
instance ids, the predictions of every system on its benchmark, AssertFlip's published report, the environment
check, and which repositories have a clone."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.instances import load_records
from coharden.jsonl import json_lines
from coharden.schema.instance import Instance
from coharden.study.data import ASSERTFLIP_REPORT, SWT_IDS, StudyData, StudyError, StudySource, load_env_check

VERIFIED_RECORDS = "swebench_verified.jsonl"
LITE_RECORDS = "swtbench_lite_instances.jsonl"

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


def load_table_data(source: StudySource) -> TableData:
    """The table's inputs from ``source``: the data directory's SWE-bench Verified and SWT-bench Lite records, the
    benchmarks' ids, the predictions of ``source.systems`` (default: every one of :data:`TABLE_SYSTEMS`;
    ``source.system_files`` adds systems graded on SWT-bench Verified), AssertFlip's published report, the
    environment check (``source.envcheck``, else the data directory's sympy check on ``source.python_version``)
    and which clones exist under ``source.repos_dir``."""
    if source.repos_dir is None:
        raise StudyError("the laxity table needs the directory of repository clones (--repos)")
    data_dir, repos_dir = Path(source.data_dir), Path(source.repos_dir)
    systems, envcheck = source.systems, source.envcheck
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
    for name, path in source.system_files.items():
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
    env_rows, env_field, env_source = load_env_check(data_dir, envcheck, source.python_version)
    repos = {inst.repo for inst in instances.values()}
    present = {repo for repo in repos if (repos_dir / repo.replace("/", "__")).is_dir()}
    return TableData(data_dir=data_dir, instances=instances, benchmarks=benchmarks, systems=chosen,
                     predictions=predictions, env_check=env_rows, env_field=env_field, env_source=env_source,
                     spec_envs=envcheck is not None, reachable={i for i, inst in instances.items()
                                                                if inst.repo in present},
                     published=published, notes=notes)
