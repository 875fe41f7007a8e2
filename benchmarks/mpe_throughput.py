"""MPE throughput: admissible mutants evaluated per second, measured side by side in one run.

    python benchmarks/mpe_throughput.py [EXAMPLE_DIR] [--test lax] [--limit N] [--rounds 2] [--naive]

On a bundled example (default examples/printer_brackets, candidate 'lax' against the golden test) the same
mechanical mutant pool is evaluated, with no result store so nothing is served from a cache, four ways (one
worker, warm fork server each):

* combined, netns: candidate and reference in one pytest process, network isolation only (the old default);
* combined, bwrap: the same inside the bubblewrap sandbox;
* separate, netns: candidate and reference in separate processes, network isolation only;
* separate, bwrap: separate processes in the sandbox, one after the other;
* separate, bwrap, 2 lanes: the same, the two processes at once (two workspaces; the default).

The modes are interleaved round by round so drifting machine load hits all alike; the fastest round of each
counts. Prints mutants/second per mode and the cost of the sandbox, of the separation and of both against
the old default (goal: both together < 20 %). ``--naive`` adds a hand-written loop (fresh checkout and
``python -m pytest`` per mutant and test). Checks that every mode agrees on every mutant's verdicts.
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
from coharden.execution.pytest_results import junit_classname, parse_junit, split_node_id
from coharden.execution.sandbox import bwrap_path
from coharden.instances import load_local, resolve_repo
from coharden.mutation.pool import PoolRequest, build_pool
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


MODES = {  # name: (combine, bwrap, test lanes)
    "combined, netns": (True, False, 1),
    "combined, bwrap": (True, True, 1),
    "separate, netns": (False, False, 1),
    "separate, bwrap": (False, True, 1),
    "separate, bwrap, 2 lanes": (False, True, 2),
}


def run_mode(ex: InstanceExecutor, mutants: list[Mutant], candidate: TestPatch, reference: TestPatch,
             combine: bool) -> list[tuple[bool, bool] | None]:
    """(candidate passed, reference passed) per mutant, None where either verdict is inadmissible."""
    out: list[tuple[bool, bool] | None] = []
    for mutant in mutants:
        cand, ref = ex.verdicts(mutant.patch, [candidate, reference], combine=combine)
        out.append((cand.passed, ref.passed) if cand.admissible and ref.admissible else None)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("example", nargs="?", default=str(Path(__file__).parents[1] / "examples/printer_brackets"))
    parser.add_argument("--test", default="lax")
    parser.add_argument("--limit", type=int, default=None, help="use only the first N mutants")
    parser.add_argument("--rounds", type=int, default=2, help="timed rounds per mode (default 2)")
    parser.add_argument("--naive", action="store_true", help="also time a hand-written loop")
    args = parser.parse_args()

    cache = Path(tempfile.mkdtemp(prefix="coharden-bench-"))
    executors: dict[str, InstanceExecutor] = {}
    try:
        base = Settings(cache_dir=cache, workers=1)
        local = load_local(Path(args.example), cache)
        inst = local.instance
        repo = resolve_repo(inst, None)
        candidate_patch = {c.name: c.patch for c in local.candidates}[args.test]
        modes = {name: mode for name, mode in MODES.items() if not mode[1] or bwrap_path()}
        for name, (_, bwrap, lanes) in modes.items():
            executors[name] = InstanceExecutor(inst, repo, base.with_overrides(bwrap=bwrap, test_lanes=lanes), None)
        first = next(iter(executors.values()))
        reference = first.golden_test()
        candidate = first.test_patch(candidate_patch, name=args.test)
        mutants = build_pool(first, PoolRequest(inst.patch, [candidate, reference], seed=0)).mutants[: args.limit]
        print(f"{inst.instance_id}: {len(mutants)} mutants, candidate {args.test!r} vs golden, "
              f"{args.rounds} rounds", flush=True)
        for name, ex in executors.items():  # warm-up: workspace, fork server, OS caches
            ex.verdicts("", [candidate, reference], combine=modes[name][0])
        timings: dict[str, list[float]] = {name: [] for name in modes}
        results: dict[str, list[tuple[bool, bool] | None]] = {}
        for _ in range(args.rounds):
            for name, ex in executors.items():
                start = time.monotonic()
                results[name] = run_mode(ex, mutants, candidate, reference, combine=modes[name][0])
                timings[name].append(time.monotonic() - start)
        commit = first.base_commit
        naive: list[tuple[bool, bool] | None] | None = None
        if args.naive:
            start = time.monotonic()
            pairs = [(naive_verdict(repo, commit, m, candidate, base.python),
                      naive_verdict(repo, commit, m, reference, base.python)) for m in mutants]
            timings["naive"] = [time.monotonic() - start]
            naive = [None if None in pair else pair for pair in pairs]  # type: ignore[misc]
    finally:
        for ex in executors.values():
            ex.close()
        shutil.rmtree(cache, ignore_errors=True)

    reference_run = results["combined, netns"]
    admissible = sum(1 for r in reference_run if r is not None)
    agree = all(r == reference_run for r in results.values()) and (
        naive is None or all(n == r for n, r in zip(naive, reference_run, strict=True) if r is not None))
    rate = {name: admissible / min(seconds) for name, seconds in timings.items()}
    for name, seconds in timings.items():
        print(f"{name:>24}: {min(seconds):7.2f} s  {rate[name]:6.2f} admissible mutants/s")
    old = rate["combined, netns"]
    for name in ("combined, bwrap", "separate, netns", "separate, bwrap", "separate, bwrap, 2 lanes"):
        if name in rate:
            print(f"throughput cost of {name:24} vs combined, netns: {100 * (1 - rate[name] / old):+5.1f} %")
    print("goal: the default (separate, bwrap, 2 lanes) costs < 20 % of the old combined throughput")
    print(f"verdicts agree across the modes: {agree}")
    sys.exit(0 if agree else 1)


if __name__ == "__main__":
    main()
