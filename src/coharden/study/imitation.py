"""Imitation of real wrong fixes by the mechanical pool, and the validity figure on one shared pool.

A real wrong fix's *signature* is the set of graded tests that accept it (PASS) among every graded test of its
instance: the golden test (its FAIL_TO_PASS ids) and each system's test (Otter, Otter++, AssertFlip). The pool
*imitates* the wrong fix when one of its admissible mutants (every graded test reaches PASS or FAIL on it) has
the same signature: no graded test can tell the mutant from the real wrong fix.

Step ``imitation`` (one stored record per instance with a wrong fix): one pool of the golden fix, its input
recorder fed by every graded test, the study's operators and per-operator budget; every graded test run on
every mutant and on the buggy and fixed code. From the same records, the validity figure with this pool: each
system test that is F->P gets a matrix against the golden test over these mutants (laxity, class), and it
accepts the wrong fix or not. A copy of the golden test runs beside the graded tests on every mutant (the golden
test against itself on this pool). With an LLM mutator (a model configured), its operators' mutants join the same
pool, each marked with its source. The figures are computed in :mod:`coharden.study.imitation_summary`.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from coharden.errors import CoHardenError, RepoError
from coharden.mpe.evaluate import check_fix
from coharden.mutation.pool import PoolRequest, build_pool, fix_context
from coharden.patches import sha
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Verdict

if TYPE_CHECKING:
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.study.real_bugs import RealBugsStudy

KIND = "study.imitation"
#: part of the step's record key: bump it when the pool's operators or the step's row change (2: narrowed_scope
#: narrows conditions; the golden test's copy runs beside the graded tests)
STEP_VERSION = 2


def _outcome(verdict: Verdict) -> str:
    return verdict.outcome.value


def _verdicts_all(team: ExecutorPool, patches: Sequence[str], tests: list[TestPatch],
                  workers: int) -> list[list[Verdict]]:
    """Every test's verdict on every source patch; each task leases one of the team's executors."""

    def one(patch: str) -> list[Verdict]:
        with team.lease() as ex:
            return list(ex.verdicts(patch, tests))

    if workers <= 1 or len(patches) < 2:
        return [one(p) for p in patches]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(one, patches))


def _tests(ex: InstanceExecutor, patches: dict[str, str], row: dict[str, Any]) -> dict[str, TestPatch]:
    specs: dict[str, TestPatch] = {}
    for name, patch in patches.items():
        try:
            specs[name] = ex.golden_test() if name == "golden" else ex.test_patch(patch, name=name)
        except RepoError:
            raise
        except CoHardenError as exc:  # one unusable test: the others are still graded
            row["errors"][name] = str(exc)
    return specs


def imitation_step(study: RealBugsStudy, iid: str) -> dict[str, Any] | None:
    """The stored (or computed) imitation record of instance ``iid``; None without a wrong fix or record."""
    from coharden.study.data import GOLDEN
    from coharden.study.steps import golden_copy, guarded, keep_row, record_key

    fix = study.data.wrong_fixes.get(iid)
    if fix is None:
        return None
    inst = study.data.instances[iid]
    patches = study.data.test_patches(iid, study.config.systems)

    def body(row: dict[str, Any]) -> None:
        team = study.team(inst)
        main = team.executors[0]
        specs = _tests(main, patches, row)
        names = list(specs)
        tests = [specs[n] for n in names]
        # the golden test against itself on this pool: a copy runs beside the graded tests (not one of them)
        copy = [golden_copy(main, specs[GOLDEN])] if GOLDEN in specs else []
        golden_fix = check_fix(inst.patch, study.settings.tests.test_patterns)
        mark = time.monotonic()
        mpe = study.config.mpe
        ctx = fix_context(main, golden_fix)
        pool = build_pool(main, PoolRequest(golden_fix, tests, operators=mpe.operators, per_operator=mpe.per_operator,
                                            seed=mpe.seed, prefer_exercised=mpe.prefer_exercised), ctx=ctx)
        row["pool_seconds"] = time.monotonic() - mark
        row["pool"] = pool.summary()
        if study.llm_mutator is not None and GOLDEN in specs:
            # the LLM operators' mutants join the same pool (deduplicated against it); the prompt shows the
            # golden test and the first graded system test, as the anonymous pair of an MPE run
            mark = time.monotonic()
            other = next((specs[n] for n in names if n != GOLDEN), specs[GOLDEN])
            report = study.llm_mutator.build(ctx, (other, specs[GOLDEN]), pool, instance=inst,
                                             test_patterns=study.settings.tests.test_patterns)
            row["llm_seconds"] = time.monotonic() - mark
            row["llm_pool"] = report.to_dict(volatile=False)
        mark = time.monotonic()
        fixed_runs = _verdicts_all(team, ["", golden_fix, fix.patch, *(m.patch for m in pool.mutants)],
                                   tests + copy, study.config.workers)
        row["run_seconds"] = time.monotonic() - mark
        runs = [[_outcome(v) for v in vs] for vs in fixed_runs]
        copies = [vs[len(names)] if copy else None for vs in runs]
        buggy, fixed, wrong, *on_mutants = (vs[:len(names)] for vs in runs)
        row["harness_error"] = any(v == "HARNESS_ERROR" for vs in (buggy, fixed, wrong, *on_mutants) for v in vs)
        if GOLDEN in names and (buggy[names.index(GOLDEN)], fixed[names.index(GOLDEN)]) != ("FAIL", "PASS"):
            # verify found it F->P: a cached verdict was altered (a test process can reach the store) or flaky
            raise CoHardenError("the golden test is not F->P in the shared run: verdicts unreliable, not stored")
        row.update(tests=names, buggy=dict(zip(names, buggy, strict=True)), fixed=dict(zip(names, fixed, strict=True)),
                   wrong=dict(zip(names, wrong, strict=True)),
                   mutants=[_mutant_json(m, dict(zip(names, v, strict=True)), c)
                            for m, v, c in zip(pool.mutants, on_mutants, copies[3:], strict=True)])
        if copy:
            row["golden_copy"] = {"buggy": copies[0], "fixed": copies[1], "wrong": copies[2]}

    def compute() -> dict[str, Any]:
        return guarded({"instance_id": iid, "fix_id": fix.fix_id, "errors": {}}, body)

    def keep(row: dict[str, Any]) -> bool:
        # an LLM pool that failed closed (truncation, cost cap, LLM error) is not stored: a rerun retries it
        return (keep_row(row) and "verdicts unreliable" not in str(row.get("error", ""))
                and row.get("llm_pool", {}).get("complete", True))

    llm = study.llm_mutator
    key = record_key(KIND, *study.instance_key(inst), sha(fix.patch), sorted((n, sha(p)) for n, p in patches.items()),
                     study.config.mpe.cache_key(), sorted(str(op) for op in study.config.mpe.operators),
                     STEP_VERSION, *([llm.client.config.model, llm.settings.model_dump(mode="json")]
                                     if llm is not None else []))
    return study.cached(KIND, key, compute, keep=keep)


def _mutant_json(mutant: Mutant, verdicts: dict[str, str], copy: str | None = None) -> dict[str, Any]:
    data = {"id": mutant.id, "operator": str(mutant.operator), "source": mutant.source,
            "description": mutant.description, "location": mutant.location, "meta": mutant.meta,
            "patch_sha": sha(mutant.patch), "verdicts": verdicts}
    if copy is not None:
        data["golden_copy"] = copy
    return data
