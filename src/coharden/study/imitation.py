"""Imitation of real wrong fixes by the mechanical pool, and the validity figure on one shared pool.

A real wrong fix's *signature* is the set of graded tests that accept it (PASS) among every graded test of its
instance: the golden test (its FAIL_TO_PASS ids) and each system's test (Otter, Otter++, AssertFlip). The pool
*imitates* the wrong fix when one of its admissible mutants (every graded test reaches PASS or FAIL on it) has
the same signature: no graded test can tell the mutant from the real wrong fix.

Step ``imitation`` (one stored record per instance with a wrong fix): one pool of the golden fix, its input
recorder fed by every graded test, the study's operators and per-operator budget; every graded test run on
every mutant and on the buggy and fixed code. From the same records, the validity figure with this pool: each
system test that is F->P gets a matrix against the golden test over these mutants (laxity, class), and it
accepts the wrong fix or not.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from coharden.analysis import stats
from coharden.errors import CoHardenError, RepoError
from coharden.mpe.evaluate import check_fix
from coharden.mutation.pool import build_pool
from coharden.patches import sha
from coharden.schema.matrix import Cell, cell, classify
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Verdict

if TYPE_CHECKING:
    from coharden.execution.executor import InstanceExecutor
    from coharden.execution.pool import ExecutorPool
    from coharden.study.real_bugs import RealBugsStudy

KIND = "study.imitation"

#: the by-hand kinds of the 17 sympy wrong fixes (docs/real_bugs_wrong_fixes.md): labels for "kinds missed"
KNOWN_KINDS = {
    "sympy__sympy-14976": "other (equivalent alternative)", "sympy__sympy-15875": "other (stronger answer)",
    "sympy__sympy-16597": "partial generalisation", "sympy__sympy-17318": "fix at another location",
    "sympy__sympy-17630": "fix at another location", "sympy__sympy-18199": "subset of the golden fix",
    "sympy__sympy-18211": "fix at another location", "sympy__sympy-18698": "fix at another location",
    "sympy__sympy-18763": "other (narrower alternative)", "sympy__sympy-20428": "fix at another location",
    "sympy__sympy-20438": "subset of the golden fix", "sympy__sympy-20916": "sub-line incompleteness",
    "sympy__sympy-21596": "partial generalisation", "sympy__sympy-21612": "fix at another location",
    "sympy__sympy-21930": "fix at another location", "sympy__sympy-22080": "fix at another location",
    "sympy__sympy-23950": "partial generalisation",
}


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
    from coharden.study.real_bugs import GOLDEN, _guarded, _keep_row, record_key

    fix = study.data.wrong_fixes.get(iid)
    if fix is None:
        return None
    inst = study.data.instances[iid]
    patches = {GOLDEN: inst.test_patch}
    for system in study.config.systems:
        patch = study.data.predictions.get(system, {}).get(iid, "")
        if patch.strip():
            patches[system] = patch

    def body(row: dict[str, Any]) -> None:
        team = study.team(inst)
        main = team.executors[0]
        specs = _tests(main, patches, row)
        names = list(specs)
        tests = [specs[n] for n in names]
        golden_fix = check_fix(inst.patch, study.settings.test_patterns)
        mark = time.monotonic()
        mpe = study.config.mpe
        pool = build_pool(main, golden_fix, tests, operators=mpe.operators, per_operator=mpe.per_operator,
                          seed=mpe.seed, prefer_exercised=mpe.prefer_exercised)
        row["pool_seconds"] = time.monotonic() - mark
        row["pool"] = pool.summary()
        mark = time.monotonic()
        fixed_runs = _verdicts_all(team, ["", golden_fix, fix.patch, *(m.patch for m in pool.mutants)],
                                   tests, study.config.workers)
        row["run_seconds"] = time.monotonic() - mark
        buggy, fixed, wrong, *on_mutants = ([_outcome(v) for v in vs] for vs in fixed_runs)
        row["harness_error"] = any(v == "HARNESS_ERROR" for vs in (buggy, fixed, wrong, *on_mutants) for v in vs)
        if GOLDEN in names and (buggy[names.index(GOLDEN)], fixed[names.index(GOLDEN)]) != ("FAIL", "PASS"):
            # verify found it F->P: a cached verdict was altered (a test process can reach the store) or flaky
            raise CoHardenError("the golden test is not F->P in the shared run: verdicts unreliable, not stored")
        row.update(tests=names, buggy=dict(zip(names, buggy, strict=True)), fixed=dict(zip(names, fixed, strict=True)),
                   wrong=dict(zip(names, wrong, strict=True)),
                   mutants=[_mutant_json(m, dict(zip(names, v, strict=True)))
                            for m, v in zip(pool.mutants, on_mutants, strict=True)])

    def compute() -> dict[str, Any]:
        return _guarded({"instance_id": iid, "fix_id": fix.fix_id, "errors": {}}, body)

    def keep(row: dict[str, Any]) -> bool:
        return _keep_row(row) and "verdicts unreliable" not in str(row.get("error", ""))

    key = record_key(KIND, *study._instance_key(inst), sha(fix.patch), sorted((n, sha(p)) for n, p in patches.items()),
                     study.config.mpe.cache_key(), sorted(op.value for op in study.config.mpe.operators))
    return study._cached(KIND, key, compute, keep=keep)


def _mutant_json(mutant: Mutant, verdicts: dict[str, str]) -> dict[str, Any]:
    return {"id": mutant.id, "operator": mutant.operator.value, "description": mutant.description,
            "location": mutant.location, "meta": mutant.meta, "patch_sha": sha(mutant.patch), "verdicts": verdicts}


# --- summaries ------------------------------------------------------------------------------------------------

def signature(verdicts: dict[str, str]) -> frozenset[str] | None:
    """The tests that accept (PASS); None when some test reached neither PASS nor FAIL (not comparable)."""
    if any(v not in ("PASS", "FAIL") for v in verdicts.values()):
        return None
    return frozenset(n for n, v in verdicts.items() if v == "PASS")


def _wrong_signature(row: dict[str, Any]) -> frozenset[str]:
    """A wrong fix's signature: a test that does not reach PASS on it rejects it."""
    return frozenset(n for n, v in row.get("wrong", {}).items() if v == "PASS")


def imitating_operators(row: dict[str, Any]) -> dict[str, list[str]]:
    """Operator -> ids of its admissible mutants whose signature equals the wrong fix's."""
    target = _wrong_signature(row)
    found: dict[str, list[str]] = {}
    for m in row.get("mutants", []):
        if signature(m["verdicts"]) == target:
            found.setdefault(m["operator"], []).append(m["id"])
    return found


def closest(row: dict[str, Any]) -> tuple[int, int]:
    """(most tests any admissible mutant agrees with the wrong fix on, number of tests)."""
    target = _wrong_signature(row)
    names = row.get("tests", [])
    best = 0
    for m in row.get("mutants", []):
        sig = signature(m["verdicts"])
        if sig is not None:
            best = max(best, sum((n in sig) == (n in target) for n in names))
    return best, len(names)


def laxities_per_test(row: dict[str, Any], tau: float, golden: str = "golden") -> list[dict[str, Any]]:
    """Per F->P system test of ``row``: matrix against the golden test over the row's admissible mutants,
    laxity, class, per-operator laxity, and whether it accepts the wrong fix (the golden test rejecting it)."""
    out = []
    gold_rejects = row.get("wrong", {}).get(golden) not in (None, "PASS")
    for name in row.get("tests", []):
        if name == golden:
            continue
        fp = row["buggy"].get(name) == "FAIL" and row["fixed"].get(name) == "PASS"
        counts = {c.value: 0 for c in Cell}
        per_op: dict[str, list[int]] = {}
        for m in row.get("mutants", []):
            cand, ref = m["verdicts"].get(name), m["verdicts"].get(golden)
            if cand not in ("PASS", "FAIL") or ref not in ("PASS", "FAIL"):
                continue
            which = cell(cand == "PASS", ref == "PASS")
            counts[which.value] += 1
            slot = per_op.setdefault(m["operator"], [0, 0])
            slot[0] += which is Cell.BETA
            slot[1] += 1
        admissible = sum(counts.values())
        laxity = counts["beta"] / admissible if admissible and fp else None
        test_class = classify(fails_on_buggy=row["buggy"].get(name) == "FAIL",
                              passes_on_fixed=row["fixed"].get(name) == "PASS", laxity=laxity, tau=tau,
                              admissible=row["buggy"].get(name) in ("PASS", "FAIL")
                              and row["fixed"].get(name) in ("PASS", "FAIL")).value
        verdict = row.get("wrong", {}).get(name)
        accepts = (verdict == "PASS") if gold_rejects and verdict in ("PASS", "FAIL") else None
        out.append({"instance_id": row["instance_id"], "system": name, "test_class": test_class, "laxity": laxity,
                    "counts": counts, "accepts": accepts,
                    "per_operator": {op: b / n for op, (b, n) in sorted(per_op.items()) if n}})
    return out


def over_specification(tests: Sequence[dict[str, Any]], fix_rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per class (from this pool): the tests that reject (FAIL on) a correct alternative fix the golden test
    accepts, over the (test, correct fix) pairs of the instances in ``tests``."""
    classes = {(t["instance_id"], t["system"]): t["test_class"] for t in tests}
    pairs = []
    for row in fix_rows:
        verdicts = row.get("verdicts", {})
        if row.get("kind") != "correct" or (verdicts.get("golden") or {}).get("outcome") != "PASS":
            continue
        for name, verdict in verdicts.items():
            cls = classes.get((row["instance_id"], name))
            if cls in ("Rigorous", "Lax") and verdict.get("outcome") in ("PASS", "FAIL"):
                pairs.append({"instance_id": row["instance_id"], "system": name, "test_class": cls,
                              "fix_id": row["fix_id"], "rejects": verdict["outcome"] == "FAIL"})
    per_class = stats.shares_by(pairs, lambda p: p["test_class"], lambda p: p["rejects"])
    return {"per_class": per_class, "pairs": len(pairs), "fixes": len({p["fix_id"] for p in pairs}),
            "rejecting": [p for p in pairs if p["rejects"]]}


def summarize_imitation(rows: Sequence[dict[str, Any]], operators: Sequence[str], tau: float,
                        fix_rows: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """Per operator and overall: the share of real wrong fixes imitated; the kinds missed; validity; and, from
    ``fix_rows`` (the study's fix verdicts), over-specification with this pool's classes."""
    from coharden.study.summary import by_instance

    usable = [r for r in rows if not r.get("error") and r.get("tests")]
    per_fix = []
    for r in usable:
        found = imitating_operators(r)
        best, n = closest(r)
        per_fix.append({"instance_id": r["instance_id"], "kind": KNOWN_KINDS.get(r["instance_id"], "?"),
                        "imitated_by": found, "closest": f"{best}/{n}", "signature": sorted(_wrong_signature(r)),
                        "admissible": sum(1 for m in r.get("mutants", []) if signature(m["verdicts"]) is not None),
                        "generated": r.get("pool", {}).get("generated", {}),
                        "skipped": r.get("pool", {}).get("skipped", {}),
                        "pool_seconds": r.get("pool_seconds")})
    total = len(per_fix)
    per_operator = {op: stats.Share(sum(1 for f in per_fix if op in f["imitated_by"]), total) for op in operators}
    overall = stats.Share(sum(1 for f in per_fix if f["imitated_by"]), total)
    # a wrong fix every graded test rejects is matched by any mutant that fails them all: the informative
    # cases are those some graded test lets through
    accepted = [f for f in per_fix if f["signature"]]
    per_operator_accepted = {op: stats.Share(sum(1 for f in accepted if op in f["imitated_by"]), len(accepted))
                             for op in operators}
    overall_accepted = stats.Share(sum(1 for f in accepted if f["imitated_by"]), len(accepted))
    missed: dict[str, list[str]] = {}
    for f in per_fix:
        if not f["imitated_by"]:
            missed.setdefault(f["kind"], []).append(f["instance_id"])
    tests = [t for r in usable for t in laxities_per_test(r, tau)]
    return {"per_fix": per_fix, "per_operator": per_operator, "overall": overall, "missed_kinds": missed,
            "per_operator_accepted": per_operator_accepted, "overall_accepted": overall_accepted,
            "errors": [r["instance_id"] for r in rows if r.get("error")], "tests": tests,
            "validity": stats.validity(tests), "validity_by_instance": stats.validity(by_instance(tests)),
            "over_specification": over_specification(tests, fix_rows),
            "pool_seconds": [f["pool_seconds"] for f in per_fix if f["pool_seconds"] is not None]}
