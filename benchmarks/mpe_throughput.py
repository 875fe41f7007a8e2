"""MPE throughput: admissible mutants evaluated per second, measured side by side in one run.

    python benchmarks/mpe_throughput.py [EXAMPLE_DIR] [--test lax] [--limit N]

On a bundled example (default examples/printer_brackets, candidate 'lax' against the golden test) the same
mechanical mutant pool is evaluated three ways, with no result store so nothing is served from a cache:

* coharden, 1 worker: one reused workspace, candidate and reference in one warm (forked) pytest process;
* coharden, 2 workers: the same with two workspaces and two fork servers;
* naive loop: per mutant and per test a fresh checkout, ``git apply`` of mutant and test, and a fresh
  ``python -m pytest <ids>``, as a hand-written script would do.

Prints mutants/second for each and the ratios (2 workers vs 1, coharden vs naive). The issue's goal is
>= 2x over the naive loop on 2 cores. Checks that all three agree on every mutant's verdicts.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_runner import junit_classname, parse_junit, split_node_id
from coharden.instances import load_local, resolve_repo
from coharden.mpe.evaluate import run_mutants
from coharden.mutation.pool import build_pool
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch


def naive_verdict(repo: Path, commit: str, mutant: Mutant, test: TestPatch, python: str) -> bool | None:
    """PASS (True) / FAIL (False) / None (did not run) the way a hand-written loop would get it."""
    with tempfile.TemporaryDirectory(prefix="naive-") as tmp:
        work = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", "--shared", str(repo), str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=work, check=True)
        for patch in (mutant.patch, test.patch):
            if subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True).returncode != 0:
                return None
        junit = Path(tmp) / "junit.xml"
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={junit}",
                        "-o", "junit_family=xunit1", *test.ids], cwd=work, capture_output=True)
        cases = parse_junit(junit) or []
        wanted = {junit_classname(i) + "::" + split_node_id(i)[2] for i in test.ids}
        ran = [c for c in cases if f"{c.classname}::{c.name.split('[')[0]}" in wanted]
        if not ran:
            return None
        return all(c.status.value in ("PASSED", "XFAIL") for c in ran)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("example", nargs="?", default=str(Path(__file__).parents[1] / "examples/printer_brackets"))
    parser.add_argument("--test", default="lax")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N mutants")
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="coharden-bench-"))
    try:
        settings = Settings(cache_dir=cache, workers=1)
        local = load_local(Path(args.example), cache)
        inst = local.instance
        repo = resolve_repo(inst, None)
        candidate_patch = {c.name: c.patch for c in local.candidates}[args.test]

        def factory() -> InstanceExecutor:
            return InstanceExecutor(inst, repo, settings, None)

        with factory() as ex:
            reference = ex.golden_test()
            candidate = ex.test_patch(candidate_patch, name=args.test)
            mutants = build_pool(ex, inst.patch, [candidate, reference], seed=0).mutants[: args.limit]
            commit = ex.base_commit
            print(f"{inst.instance_id}: {len(mutants)} mutants, candidate {args.test!r} vs golden", flush=True)

            timings: dict[str, float] = {}
            results = {}
            for workers in (1, 2):
                start = time.monotonic()
                results[workers] = run_mutants(ex, mutants, candidate, reference, workers=workers,
                                               executor_factory=factory)
                timings[f"coharden_{workers}w"] = time.monotonic() - start
        start = time.monotonic()
        naive = [(naive_verdict(repo, commit, m, candidate, settings.python),
                  naive_verdict(repo, commit, m, reference, settings.python)) for m in mutants]
        timings["naive"] = time.monotonic() - start
    finally:
        shutil.rmtree(cache, ignore_errors=True)

    admissible = sum(1 for r in results[1] if r.cell is not None)
    agree = all(
        (r1.candidate.passed, r1.reference.passed) == (r2.candidate.passed, r2.reference.passed) == n
        for r1, r2, n in zip(results[1], results[2], naive, strict=True) if r1.cell is not None
    )
    rate = {k: admissible / v for k, v in timings.items()}
    for key, seconds in timings.items():
        print(f"{key:>12}: {seconds:7.2f} s  {rate[key]:6.2f} admissible mutants/s")
    print(f"ratio 2 workers / 1 worker : {rate['coharden_2w'] / rate['coharden_1w']:.2f}x")
    print(f"ratio coharden 1w / naive  : {rate['coharden_1w'] / rate['naive']:.2f}x")
    print(f"ratio coharden 2w / naive  : {rate['coharden_2w'] / rate['naive']:.2f}x  (goal >= 2x)")
    print(f"verdicts agree across the three runs: {agree}")
    sys.exit(0 if agree else 1)


if __name__ == "__main__":
    main()
