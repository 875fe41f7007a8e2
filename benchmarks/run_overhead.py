"""Per-run overhead of a forked test run: (forked run wall) / (the test's own call time reported by pytest),
collect-once vs collect-each-time side by side (issue 35, "cheaper runs").

    python benchmarks/run_overhead.py [INSTANCE] [--id ID] [--repos DIR] [-n 5] [--mutants 3]

INSTANCE is an instance directory (instance.yaml) or a SWE-bench records file (also taken from
``$COHARDEN_RUN_OVERHEAD_INSTANCE``); without one the bundled example ``examples/printer_brackets`` is used.
The golden test runs on the fix and on up to ``--mutants`` mechanical mutants of it (with -x, as MPE runs a
mutant's cell), through the executor's own path (workspace reset, patches applied, a run of the fork server in
the sandbox), in two executors: ``collect_once`` on (the server collects the test once and forks each run after
that collection) and off (every run collects). Rounds interleave the two after a warm-up round (server start,
project import, the zygote's collection), so drifting machine load hits both alike.

Per run: the fork's wall time (request to reply, as ``ForkServer.run`` measures it), the test's own call time
(the sum of pytest's ``call`` phase durations, from the result stream), and the verdict's wall time (reset, apply,
run, parse). Prints medians and the ratios wall / call (goal: <= 1.3).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_results import PytestRun
from coharden.execution.pytest_verdicts import verdict_for
from coharden.instances import load_instances, resolve_repo
from coharden.patches import split_patch
from coharden.schema.instance import Instance
from coharden.schema.testpatch import TestPatch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "printer_brackets"
_CALL = re.compile(r"^\s*(\d+(?:\.\d+)?)s call\s+\S", re.MULTILINE)
_DURATIONS = ["--durations=0", "--durations-min=0"]


def load_instance(source: Path, instance_id: str | None, settings: Settings) -> Instance:
    found = load_instances(source, settings.cache_dir, [instance_id] if instance_id else None)
    if len(found) != 1:
        sys.exit(f"{source}: holds {len(found)} instances; choose one with --id")
    return found[0].instance


def call_time(run: PytestRun) -> float:
    """The sum of the ``call`` phase durations pytest reported (the result stream's, to the microsecond; else
    its ``--durations=0`` report, to the hundredth of a second)."""
    streamed = [e.get("duration") for e in run.stream or [] if "report" in e and e.get("when") == "call"]
    if streamed and all(isinstance(d, (int, float)) for d in streamed):
        return float(sum(streamed))
    return sum(float(m[1]) for m in _CALL.finditer(run.output))


def durations(settings: Settings) -> list[str]:
    """pytest's durations report of every phase; ``--durations-min`` (pytest 6.2 on) only where it is known."""
    version = tuple(int(p) for p in re.findall(r"\d+", settings.pytest_version)[:2])
    return _DURATIONS if not version or version >= (6, 2) else _DURATIONS[:1]


def timed_run(ex: InstanceExecutor, patch: str, test: TestPatch, mutant: bool) -> tuple[float, float, float, str]:
    """(verdict wall, fork wall, call time, outcome) of ``test`` on ``patch``, the executor's path step by step
    (its verdict cache left out: every run is made)."""
    start = time.perf_counter()
    ws = ex.workspace
    ex.workspace_root()
    ws.reset()
    ex.site.prime()
    ws.apply(patch)
    ws.apply(test.patch)
    run = ex._run(list(test.ids), None, ex.site.warm_spec(patch, [test]), extra_args=durations(ex.settings),
                  first_failure=mutant, collect=ex._collect_key(patch, [test]))
    verdict = verdict_for(list(test.ids), run)
    return time.perf_counter() - start, run.duration, call_time(run), verdict.outcome.value


def _ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def instance_parser(doc: str | None, rounds: int) -> argparse.ArgumentParser:
    """The arguments of a benchmark of one instance (this one's, ``recording_overhead.py``'s): where the
    instance is, its repositories, the timed rounds."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instance", nargs="?", type=Path, default=os.environ.get("COHARDEN_RUN_OVERHEAD_INSTANCE"),
                        help="instance directory or records file (default: the bundled printer_brackets example)")
    parser.add_argument("--id", dest="instance_id", help="instance id within a records file")
    parser.add_argument("--repos", type=Path, help="directory holding owner__name repositories")
    parser.add_argument("-n", type=int, default=rounds, help=f"timed rounds (default {rounds})")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--python", default=os.environ.get("COHARDEN_SYMPY_PYTHON"),
                        help="the tests' interpreter, in place of a record's spec environment (one with pytest)")
    return parser


def open_instance(args: argparse.Namespace, scratch: Path) -> tuple[Instance, Path, Settings]:
    """The instance ``instance_parser``'s arguments name, its repository and its settings (a SWE-bench record's
    spec environment, built once; caches in ``scratch``)."""
    settings = Settings(timeout=args.timeout, repos_dir=args.repos, cache_dir=scratch / "cache", workers=1)
    source = Path(args.instance or EXAMPLE)
    instance = load_instance(source, args.instance_id, settings)
    repo = resolve_repo(instance, settings.repos_dir)
    if args.python:
        settings = settings.with_overrides(python=args.python)
    elif source.is_file():  # a SWE-bench record: its spec environment (built once)
        from coharden.environment.derived import auto_spec_settings

        settings = auto_spec_settings(instance, repo, settings)
    return instance, repo, settings


def main(argv: list[str] | None = None) -> int:
    parser = instance_parser(__doc__, rounds=5)
    parser.add_argument("--mutants", type=int, default=3, help="mechanical mutants besides the fix (default 3)")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="coharden-bench-"))
    try:
        instance, repo, settings = open_instance(args, scratch)
        fix, _ = split_patch(instance.patch, settings.test_patterns)
        executors = {name: InstanceExecutor(instance, repo, settings.with_overrides(collect_once=on), store=None)
                     for name, on in (("collect once", True), ("collect each time", False))}
        try:
            first = next(iter(executors.values()))
            test = first.golden_test()
            patches = [("fix", fix)]
            if args.mutants:
                from coharden.mutation.pool import PoolRequest, build_pool

                mutants = build_pool(first, PoolRequest(fix, [test])).mutants[:args.mutants]
                patches += [(f"mutant {m.operator}", m.patch) for m in mutants]
            print(f"instance {instance.instance_id}: {len(test.ids)} test ids, {len(patches)} patches "
                  f"({', '.join(label for label, _ in patches)}), n={args.n}, isolation={first.isolation}")
            rows: dict[str, list[tuple[float, float, float]]] = {name: [] for name in executors}
            outcomes: dict[str, list[str]] = {name: [] for name in executors}
            for round_ in range(args.n + 1):  # round 0 warms up: server, imports, the zygote's collection
                for name, ex in executors.items():
                    for label, patch in patches:
                        verdict_wall, fork_wall, call, outcome = timed_run(ex, patch, test, label != "fix")
                        if round_:
                            rows[name].append((verdict_wall, fork_wall, call))
                            outcomes[name].append(f"{label}: {outcome}")
            served = {name: (ex.site.current.collected_runs if ex.site.current else 0)
                      for name, ex in executors.items()}
            once = executors["collect once"].site.current
            log = Counter(once.collect_log if once else []).most_common(3)
        finally:
            for ex in executors.values():
                ex.close()
        if len(set(map(tuple, outcomes.values()))) != 1:
            print("outcomes differ between the two modes:", outcomes)
            return 1
        print(f"{'mode':18} {'verdict wall':>13} {'fork wall':>10} {'call time':>11} {'fork - call':>12} "
              f"{'fork/call':>10} {'verdict/call':>13} {'served':>7}")
        for name, values in rows.items():
            verdict_wall, fork_wall, call = (_ms([v[i] for v in values]) for i in range(3))
            extra = _ms([v[1] - v[2] for v in values])
            ratios = [v[1] / v[2] for v in values if v[2] > 0]
            whole = [v[0] / v[2] for v in values if v[2] > 0]
            ratio = f"{statistics.median(ratios):10.2f}" if ratios else f"{'n/a':>10}"
            ratio_v = f"{statistics.median(whole):13.2f}" if whole else f"{'n/a':>13}"
            print(f"{name:18} {verdict_wall:10.1f} ms {fork_wall:7.1f} ms {call * 1000:8.1f} us {extra:9.1f} ms "
                  f"{ratio} {ratio_v} {served[name]:7d}")
        print("ratios: medians of per-run (wall / the test's own call time); goal fork/call <= 1.3")
        if log:
            print("collect once, how the server ran them:", "; ".join(f"{n}x {why}" for why, n in log))
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
