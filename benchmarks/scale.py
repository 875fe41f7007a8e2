"""Scale: per-mutant overhead over the bare test time, 1 vs 2 workers, and coharden vs mutmut, in one run.

    python benchmarks/scale.py [--module examples/suite/intervals.py] [--tests examples/suite/test_intervals.py]
                               [--limit N] [--no-mutmut]

On one module and its tests (default: the bundled suite example):

* bare: ``python -m pytest <tests>`` in a prepared copy (median of 3);
* naive runner: per mutant, a fresh copy of the project, the mutant written, a fresh ``python -m pytest``;
* fast runner: coharden's kill oracle (one reused copy per worker, only the module rewritten between mutants,
  runs forked from a warm pytest server), with 1 and with 2 workers;
* mutmut: ``mutmut run`` (its own command, ``--max-children 2``) on a copy laid out as mutmut wants it.

Prints per-mutant time and overhead over the bare test time for naive and fast runners, mutants/s for every
engine, and the ratios. Goals from the issue: fast-runner overhead < 15 % of the bare test time, and more
mutants per second than mutmut. coharden runs the whole given test file per mutant; mutmut runs only the
tests that cover the mutated function and skips mutants no test reaches ("no tests"), so its rate is given
both over all mutants and over the mutants it actually ran.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from coharden.config import Settings
from coharden.suite.operators import generate_mutants
from coharden.suite.runner import KillOracle

ROOT = Path(__file__).resolve().parents[1]


def bare_time(project: Path, tests: str, python: str, runs: int = 3) -> float:
    times = []
    for _ in range(runs):
        start = time.monotonic()
        subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], cwd=project,
                       capture_output=True, check=False)
        times.append(time.monotonic() - start)
    return statistics.median(times)


def naive(project: Path, module: str, tests: str, sources: list[str], python: str) -> tuple[float, int]:
    killed = 0
    start = time.monotonic()
    for source in sources:
        with tempfile.TemporaryDirectory(prefix="naive-") as tmp:
            copy = Path(tmp) / "p"
            shutil.copytree(project, copy)
            (copy / module).write_text(source)
            rc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests], cwd=copy,
                                capture_output=True, check=False).returncode
            killed += rc != 0
    return time.monotonic() - start, killed


def fast(module: Path, suite: str, mutants: list, workers: int) -> tuple[float, int]:
    settings = Settings(timeout=60, workers=workers)
    with KillOracle(module, settings, workers=workers) as oracle:
        oracle.baseline(suite)
        start = time.monotonic()
        results = oracle.run_mutants(mutants, suite)
        elapsed = time.monotonic() - start
    return elapsed, sum(1 for r in results.values() if r.status.value == "killed")


def mutmut(module: Path, tests: Path, python_bin: Path) -> dict | None:
    exe = python_bin.parent / "mutmut"
    if not exe.exists():
        return None
    with tempfile.TemporaryDirectory(prefix="mutmut-") as tmp:
        work = Path(tmp)
        pkg = work / "src" / module.stem
        pkg.mkdir(parents=True)
        shutil.copy(module, pkg / "__init__.py")
        (work / "tests").mkdir()
        shutil.copy(tests, work / "tests" / tests.name)
        (work / "setup.cfg").write_text("[mutmut]\npaths_to_mutate=src/\ntests_dir=tests/\n")
        (work / "pyproject.toml").write_text(f'[project]\nname = "{module.stem}"\nversion = "0"\n'
                                             '[tool.pytest.ini_options]\npythonpath = ["src"]\n')
        start = time.monotonic()
        subprocess.run([str(exe), "run", "--max-children", "2"], cwd=work, capture_output=True, check=False)
        elapsed = time.monotonic() - start
        subprocess.run([str(exe), "export-cicd-stats"], cwd=work, capture_output=True, check=False)
        stats_file = work / "mutants" / "mutmut-cicd-stats.json"
        if not stats_file.exists():
            return None
        stats = json.loads(stats_file.read_text())
    return {"seconds": elapsed, **stats}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--module", type=Path, default=ROOT / "examples/suite/intervals.py")
    parser.add_argument("--tests", type=Path, default=ROOT / "examples/suite/test_intervals.py")
    parser.add_argument("--limit", type=int, default=40, help="mutants for the naive and fast runners")
    parser.add_argument("--no-mutmut", action="store_true")
    args = parser.parse_args()
    import sys

    python = sys.executable
    module, tests = args.module.resolve(), args.tests.resolve()
    with tempfile.TemporaryDirectory(prefix="scale-") as tmp:
        project = Path(tmp) / "p"
        project.mkdir()
        shutil.copy(module, project / module.name)
        shutil.copy(tests, project / tests.name)
        source = module.read_text()
        mutants = list(generate_mutants(source, module.name))[: args.limit]
        bare = bare_time(project, tests.name, python)
        naive_s, naive_killed = naive(project, module.name, tests.name, [m.source for m in mutants], python)
    suite = tests.read_text().replace(f"from {module.stem} import", f"from {module.stem} import")
    fast1_s, fast1_killed = fast(module, suite, mutants, 1)
    fast2_s, fast2_killed = fast(module, suite, mutants, 2)
    n = len(mutants)
    per = {"naive": naive_s / n, "fast 1w": fast1_s / n, "fast 2w": fast2_s / n}
    print(f"{module.name}: {n} mutants; bare test run {bare:.3f} s")
    for name, seconds in per.items():
        print(f"  {name:>8}: {seconds:.3f} s/mutant, {1 / seconds:6.2f} mutants/s, "
              f"overhead over bare {100 * (seconds - bare) / bare:+.0f} %")
    print(f"  killed: naive {naive_killed}, fast 1w {fast1_killed}, fast 2w {fast2_killed} (must agree)")
    print(f"ratio fast 1w / naive (speed) : {per['naive'] / per['fast 1w']:.2f}x")
    print(f"ratio 2 workers / 1 worker    : {per['fast 1w'] / per['fast 2w']:.2f}x")
    if not args.no_mutmut:
        result = mutmut(module, tests, Path(python))
        if result is None:
            print("mutmut: not installed (pip install 'coharden[mutmut]'); skipped")
        else:
            ran = result["killed"] + result["survived"] + result["timeout"] + result["suspicious"]
            print(f"mutmut run --max-children 2: {result['total']} mutants in {result['seconds']:.1f} s "
                  f"({result['total'] / result['seconds']:.2f}/s over all, {ran / result['seconds']:.2f}/s over the "
                  f"{ran} it ran; {result['no_tests']} had no covering test)")
            print(f"ratio coharden fast 2w / mutmut (mutants ran per second): "
                  f"{(1 / per['fast 2w']) / (ran / result['seconds']):.2f}x")
    if not naive_killed == fast1_killed == fast2_killed:
        raise SystemExit("runners disagree")


if __name__ == "__main__":
    main()
