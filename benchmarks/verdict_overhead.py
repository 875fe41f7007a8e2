"""Harness overhead of a coharden verdict over running the same tests with bare pytest.

    python benchmarks/verdict_overhead.py [INSTANCE] [-n 10] [--id ID] [--repos DIR] [--profile]

INSTANCE is an instance directory (instance.yaml) or a SWE-bench records file; without it a small example
project is built in a temporary directory. The golden test's ids are timed on base + golden fix:

* coharden: ``InstanceExecutor.verdict(fix, test)`` with no result store, so every verdict does the full job
  (reset the workspace, apply fix and test with git, run pytest sandboxed, parse JUnit XML);
* bare: ``python -m pytest <ids>`` in a checkout prepared once (fix and test already applied), same
  interpreter, same ids.

The two are interleaved (one of each per round, after a warm-up round) so drifting machine load hits both
alike. Prints the medians, the ratio coharden / bare and the overhead in percent (goal < 25 %), and the
cost of the bwrap sandbox per verdict (each mode with and without it).
``--profile`` adds where coharden's own time goes (git, pytest process, the rest).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.git import apply_patch, git
from coharden.execution.sandbox import bwrap_path
from coharden.instances import load_instances, resolve_repo
from coharden.patches import make_patch, split_patch
from coharden.schema.instance import Instance

_SOURCE = '''\
"""A tiny interval library with a bug: overlaps() treats touching intervals as overlapping."""


class Interval:
    def __init__(self, start, end):
        if end < start:
            raise ValueError("end before start")
        self.start, self.end = start, end

    def __len__(self):
        return self.end - self.start

    def overlaps(self, other):
        return self.start <= other.end and other.start <= self.end

    def merge(self, other):
        if not self.overlaps(other):
            raise ValueError("disjoint")
        return Interval(min(self.start, other.start), max(self.end, other.end))
'''

_TESTS = '''\
import pytest

from intervals import Interval


def test_len():
    assert len(Interval(2, 5)) == 3


def test_bad_interval():
    with pytest.raises(ValueError):
        Interval(3, 1)


def test_merge():
    merged = Interval(1, 4).merge(Interval(3, 6))
    assert (merged.start, merged.end) == (1, 6)
'''

_NEW_TESTS = '''

@pytest.mark.parametrize("a, b", [((0, 1), (1, 2)), ((5, 6), (4, 5))])
def test_touching_intervals_do_not_overlap(a, b):
    assert not Interval(*a).overlaps(Interval(*b))


def test_overlapping_intervals_overlap():
    assert Interval(0, 3).overlaps(Interval(2, 5))
'''


def build_example(root: Path) -> Instance:
    """A small git project with a bug, its fix and a fail-to-pass test."""
    repo = root / "intervals-repo"
    (repo / "tests").mkdir(parents=True)
    (repo / "intervals.py").write_text(_SOURCE)
    (repo / "tests" / "__init__.py").write_text("")
    (repo / "tests" / "test_intervals.py").write_text(_TESTS)
    (repo / "setup.cfg").write_text("[tool:pytest]\n")
    git(["init", "--quiet", "--initial-branch=main"], repo)
    git(["add", "-A"], repo)
    git(["commit", "--quiet", "--no-gpg-sign", "-m", "base"], repo)
    base = git(["rev-parse", "HEAD"], repo).stdout.strip()
    fixed = _SOURCE.replace("self.start <= other.end and other.start <= self.end",
                            "self.start < other.end and other.start < self.end")
    fix = make_patch([("intervals.py", _SOURCE, fixed)])
    test = make_patch([("tests/test_intervals.py", _TESTS, _TESTS + _NEW_TESTS)])
    return Instance(instance_id="intervals-1", repo=str(repo), base_commit=base, patch=fix, test_patch=test)


def load_instance(source: Path, instance_id: str | None, settings: Settings) -> Instance:
    found = load_instances(source, settings.cache_dir, [instance_id] if instance_id else None)
    if len(found) != 1:
        sys.exit(f"{source}: holds {len(found)} instances; choose one with --id")
    return found[0].instance


def _median_ms(values: list[float]) -> float:
    return statistics.median(values) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instance", nargs="?", type=Path, help="instance directory or records file")
    parser.add_argument("-n", type=int, default=10, help="timed verdicts per side (default 10)")
    parser.add_argument("--id", dest="instance_id", help="instance id within a records file")
    parser.add_argument("--repos", type=Path, help="directory holding owner__name repositories")
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--profile", action="store_true", help="profile coharden's verdicts and show where time goes")
    args = parser.parse_args(argv)

    scratch = Path(tempfile.mkdtemp(prefix="coharden-bench-"))
    try:
        settings = Settings(timeout=args.timeout, repos_dir=args.repos, cache_dir=scratch / "cache")
        instance = load_instance(args.instance, args.instance_id, settings) if args.instance else build_example(scratch)
        repo = resolve_repo(instance, settings.repos_dir)
        fix, _ = split_patch(instance.patch, settings.test_patterns)

        # coharden with a warm fork server and with a fresh process per run, each in the bwrap sandbox (where it
        # runs) and with network isolation only: the difference is the sandbox's cost per verdict
        modes = {}
        for server in (True, False):
            for bwrap in ((True, False) if bwrap_path() else (False,)):
                name = f"coharden ({'fork server' if server else 'fresh process'}, {'bwrap' if bwrap else 'netns'})"
                modes[name] = settings.with_overrides(fork_server=server, bwrap=bwrap)
        executors = {name: InstanceExecutor(instance, repo, mode, store=None) for name, mode in modes.items()}
        try:
            first = next(iter(executors.values()))
            test = first.golden_test()
            print(f"instance {instance.instance_id}: {len(test.ids)} test ids, n={args.n}, "
                  f"isolation={', '.join(sorted({e.isolation for e in executors.values()}))}")

            # the bare checkout: base + fix + test, prepared once
            bare = scratch / "bare"
            git(["clone", "--quiet", "--shared", "--no-checkout", str(first.workspace.source), str(bare)], scratch)
            git(["checkout", "--quiet", "--detach", first.base_commit], bare)
            apply_patch(bare, fix)
            apply_patch(bare, test.patch)
            bare_cmd = [first.python, "-m", "pytest", *test.ids]

            def coharden_once(executor: InstanceExecutor) -> tuple[float, float]:
                start = time.perf_counter()
                verdict = executor.verdict(fix, test)
                elapsed = time.perf_counter() - start
                if verdict.outcome.value != "PASS":
                    sys.exit(f"the golden test does not pass on the fix: {verdict.short()}\n{verdict.output_tail}")
                return elapsed, verdict.duration

            def bare_once() -> float:
                start = time.perf_counter()
                proc = subprocess.run(bare_cmd, cwd=bare, capture_output=True, text=True, check=False)
                elapsed = time.perf_counter() - start
                if proc.returncode != 0:
                    sys.exit(f"bare pytest failed (exit {proc.returncode}):\n{proc.stdout[-2000:]}")
                return elapsed

            # warm-up: workspace clone, fork server start, OS caches, bytecode of the bare checkout
            for executor in executors.values():
                coharden_once(executor)
            bare_once()
            totals: dict[str, list[float]] = {name: [] for name in executors}
            inside: dict[str, list[float]] = {name: [] for name in executors}
            theirs: list[float] = []
            profiler = cProfile.Profile() if args.profile else None
            for _ in range(args.n):
                for name, executor in executors.items():
                    if profiler:
                        profiler.enable()
                    total, pytest_time = coharden_once(executor)
                    if profiler:
                        profiler.disable()
                    totals[name].append(total)
                    inside[name].append(pytest_time)
                theirs.append(bare_once())
        finally:
            for executor in executors.values():
                executor.close()

        med_theirs = _median_ms(theirs)
        print(f"{'bare pytest':26} median {med_theirs:8.1f} ms")
        for name in executors:
            med_ours, med_inside = _median_ms(totals[name]), _median_ms(inside[name])
            ratio = med_ours / med_theirs
            print(f"{name:26} median {med_ours:8.1f} ms  (test process {med_inside:.1f} ms, "
                  f"harness {med_ours - med_inside:.1f} ms)  ratio {ratio:.3f}  overhead {100 * (ratio - 1):+.1f} %")
        for kind in ("fork server", "fresh process"):
            sandboxed, plain = (totals.get(f"coharden ({kind}, {level})") for level in ("bwrap", "netns"))
            if sandboxed and plain:
                extra = _median_ms(sandboxed) - _median_ms(plain)
                print(f"bwrap sandbox cost per verdict ({kind}): {extra:+.1f} ms "
                      f"({100 * extra / _median_ms(plain):+.1f} %)")
        print("goal: overhead < 25 %")
        if profiler:
            stats = pstats.Stats(profiler)
            stats.sort_stats("cumulative").print_stats(25)
        return 0
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
