"""sympy's bin/test as a warm fork against a fresh process per run, side by side (issue 35).

    python benchmarks/sympy_fork.py --records RECORDS --repos REPOS --ids ID ... [--mutants 3] [--rounds 2]

In the spec environments (what the laxity table uses), sympy's tests run with its own runner, ``bin/test``: each
run was a fresh interpreter that imports sympy (about 1.5 s) before running the wanted tests. A runner that
``forks`` now runs as a fork of a fork server that imported sympy once from the base checkout; the fix's and the
mutants' changed function bodies are swapped into the fork (``warm.swap_changed``), as for pytest. Per instance,
two executors on the record's spec environment (built once, coharden's cache), one with fork servers off and one
with them on (``warm_imports`` sympy, ``preload`` mpmath, as the study sets for sympy): the golden test on the
buggy code and on the fix (fail-to-pass checks: whole files) and on ``--mutants`` mechanical mutants of the fix
(a mutant's cell: the wanted tests only), in ``--rounds`` rounds after a warm-up round (server start, sympy's
import: reported apart as the cold start), the executors alternating. Printed: per kind of run the median
seconds each way and their ratio, and whether every verdict is the same. Skips cleanly (exit 0) when the records,
the clone or a spec environment cannot be had.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from coharden.config import Settings
from coharden.environment.derived import auto_spec_settings
from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.instances import load_instances, resolve_repo
from coharden.mutation.pool import PoolRequest, build_pool
from coharden.patches import split_patch

MODES = ("fresh", "fork")


def timed(ex: InstanceExecutor, patch: str, test, mutant: bool) -> tuple[float, str]:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    verdict = ex.verdicts(patch, [test], first_failure=mutant)[0]
    statuses = json.dumps({k: [s.value for s in v] for k, v in sorted(verdict.tests.items())})
    return time.perf_counter() - start, f"{verdict.outcome.value} {statuses}"


def measure(record_file: Path, iid: str, repos: Path, mutants: int, rounds: int, scratch: Path) -> dict | None:
    base = Settings(repos_dir=repos, workers=1, timeout=900)
    found = load_instances(record_file, scratch / "cache", [iid])
    if len(found) != 1:
        return None
    instance = found[0].instance
    repo = resolve_repo(instance, repos)
    settings = auto_spec_settings(instance, repo, base)
    fix, _ = split_patch(instance.patch, settings.test_patterns)
    modes = {"fresh": settings.with_overrides(fork_server=False),
             "fork": settings.with_overrides(fork_server=True, warm_imports=["sympy"], preload=["mpmath"])}
    executors = {name: InstanceExecutor(instance, repo, s) for name, s in modes.items()}
    try:
        test = executors["fresh"].golden_test()
        patches = [("F->P buggy", ""), ("F->P fixed", fix)]
        pool = build_pool(executors["fresh"], PoolRequest(fix, [test])).mutants[:mutants]
        patches += [("mutant", m.patch) for m in pool]
        seconds: dict[tuple[str, str], list[float]] = {}
        verdicts: dict[str, set[str]] = {}
        cold: dict[str, float] = {}
        for round_ in range(rounds + 1):
            for name in (MODES if round_ % 2 == 0 else MODES[::-1]):
                ex = executors[name]
                for k, (kind, patch) in enumerate(patches):
                    wall, verdict = timed(ex, patch, test, kind == "mutant")
                    verdicts.setdefault(f"{kind} {k}", set()).add(verdict)
                    if round_ == 0:
                        cold[name] = cold.get(name, 0.0) + wall
                    else:
                        seconds.setdefault((name, "mutant" if kind == "mutant" else "F->P"), []).append(wall)
        server = executors["fork"].site.current
        forked = (server.warm_runs, server.swapped_runs) if server is not None else (0, 0)
    finally:
        for ex in executors.values():
            ex.close()
    return {"seconds": {k: statistics.median(v) for k, v in seconds.items()}, "cold": cold,
            "same": all(len(v) == 1 for v in verdicts.values()), "verdicts": verdicts, "mutants": len(pool),
            "forked": forked}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, required=True, help="SWE-bench records (JSON Lines)")
    parser.add_argument("--repos", type=Path, required=True, help="owner__name clones")
    parser.add_argument("--ids", nargs="+", required=True)
    parser.add_argument("--mutants", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if not args.records.is_file():
        print("skipped: no records")
        return 0
    ratios: dict[str, list[float]] = {"F->P": [], "mutant": []}
    print(f"{'instance':24} {'F->P fresh':>10} {'fork':>6} {'ratio':>6} {'mutant fresh':>12} {'fork':>6} "
          f"{'ratio':>6} {'cold fresh/fork s':>18} {'warm/swapped':>12}  verdicts")
    with tempfile.TemporaryDirectory() as tmp:
        for iid in args.ids:
            try:
                row = measure(args.records, iid, args.repos, args.mutants, args.rounds, Path(tmp))
            except CoHardenError as exc:
                print(f"{iid:24} skipped: {exc}")
                continue
            if row is None:
                print(f"{iid:24} skipped: not in the records")
                continue
            s = row["seconds"]
            cells = []
            for kind in ratios:
                fresh, fork = s.get(("fresh", kind)), s.get(("fork", kind))
                ratio = fresh / fork if fresh and fork else float("nan")
                if fresh and fork:
                    ratios[kind].append(ratio)
                cells.append(f"{fresh or 0:10.1f} {fork or 0:6.1f} {ratio:6.2f}")
            same = "same" if row["same"] else "DIFFER " + json.dumps({k: sorted(v) for k, v in row["verdicts"].items()
                                                                      if len(v) > 1})[:300]
            print(f"{iid:24} {cells[0]} {cells[1].replace(' ', ' ', 1):>26} "
                  f"{row['cold'].get('fresh', 0):8.1f}/{row['cold'].get('fork', 0):<8.1f} "
                  f"{row['forked'][0]:>5}/{row['forked'][1]:<6}  {same} ({row['mutants']} mutants)")
    for kind, values in ratios.items():
        if values:
            print(f"{kind} runs, fresh process / warm fork, median over {len(values)} instances: "
                  f"{statistics.median(values):.2f}x (min {min(values):.2f}x, max {max(values):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
