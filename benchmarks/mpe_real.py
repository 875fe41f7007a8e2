"""MPE on real instances: wall time per phase, 1 vs 2 workers, and the naive loop, side by side in one run.

    python benchmarks/mpe_real.py [--data ../shared/data] [--repos /work/repos] \
        [--python /work/envs/sympy311/bin/python] [-n 8 | --ids ID ...] [--naive-runs 2]

For each instance (default: ``-n`` of the sympy study instances, those the environment check verifies on the
test interpreter's Python, spread evenly over the sorted list) it runs, exactly as ``coharden study real-bugs``
does (two long-lived checkouts moved from instance to instance, checked-hash bytecode, fork servers that
preload mpmath, default budget of 3 mutants per operator, seed 0, no result cache from an earlier run):

* the bare golden test on the fixed code (one fork-server run, as the study measures it);
* MPE of the golden test against itself with 1 worker (one test process at a time), then with 2 workers
  (each with its own empty store, so nothing is served from a cache), phase by phase: environment (checkout
  moves + bytecode), F->P checks, recording, pool building, mutant runs, and the seconds mutant runs spent in
  timeouts (combined run plus attribution); the test runs, and how many forked warm (project imported) and
  with changed function bodies swapped in;
* the grading of one prediction (``--system``) right after, in the 2-worker store (the reference's F->P
  verdicts and recordings are shared, as in a study);
* the naive loop: for ``--naive-runs`` (mutant, test) pairs a fresh clone, ``git apply`` of mutant and test
  and a fresh ``python -m pytest <ids>``; its cost for the whole instance is extrapolated as
  (4 F->P runs + 2 runs per mutant) x the mean measured run.

The cold start of each MPE (``timings.cold_start_s``: opening the checkouts, starting and priming the fork
servers - the imports a warm server makes) is printed apart (``cs``) and kept out of the MPE wall and its ratios;
``imp`` is the verdicts implied without a run (a test that never enters the functions a mutant changes, see
``coharden.mpe.implied``) / all verdicts of the MPE, and ``made`` the test processes it made (reach passes
included). ``--no-implied`` runs every one of them (the check mode).

Prints one row per instance, then median / max and the issue's ratios. The machine may be shared: 1 and 2
workers run back to back on each instance so that both see the same load; the load average is printed.
Skips cleanly (exit 0) when the data directory, the repository or the interpreter is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution.pytest_runner import test_environment, verdict_for
from coharden.execution.store import Store
from coharden.mpe.evaluate import MPEResult, check_fix, evaluate
from coharden.patches import make_patch
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.testpatch import TestPatch
from coharden.study.data import SYSTEM_FILES, load_data
from coharden.study.real_bugs import RealBugsStudy, StudyConfig

PHASES = ("environment", "fail_to_pass", "recording", "pool", "mutants", "timeouts")


def naive_run(repo: Path, commit: str, source: str, test: TestPatch, python: str, timeout: float) -> float:
    """One hand-written-loop run: fresh clone at ``commit``, ``git apply`` source and test, fresh pytest."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="naive-") as tmp:
        work = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=work, check=True)
        for patch in (source, test.patch):
            if patch.strip():
                subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, check=False)
        try:
            subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", *test.ids], cwd=work,
                           capture_output=True, env=test_environment(()), timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            pass
    return time.monotonic() - started


def golden_copy(ex: Any, golden: TestPatch) -> TestPatch:
    """The study's candidate for golden-vs-golden: an equivalent copy of the golden patch, so both tests run."""
    patch = make_patch((p, ex.base_file(p), c) for p, c in golden.files.items())
    return ex.test_patch(patch if patch != golden.patch else patch + "\n", name="golden-copy", ids=golden.ids)


def mpe(study: RealBugsStudy, inst: Instance, candidate: TestPatch | None, with_bare: bool) -> dict[str, Any]:
    """One instance on ``study``'s checkouts: environment, optional bare run, MPE; seconds per phase."""
    out: dict[str, Any] = {}
    mark = time.monotonic()
    team = study.team(inst)  # the other checkouts open and warm up in the background (ExecutorPool.warm)
    ex = team.executors[0]
    ex.workspace_root()
    out["environment"] = time.monotonic() - mark
    golden = ex.golden_test()
    fix = check_fix(inst.patch, study.settings.test_patterns)
    if with_bare:
        bare = ex.run_raw(fix, golden)
        out["bare"] = bare.duration
        out["bare_outcome"] = verdict_for(list(golden.ids), bare).outcome.value
    cand = candidate if candidate is not None else golden_copy(ex, golden)
    mark = time.monotonic()
    config = study.config.mpe.model_copy(update={"workers": study.config.workers})  # as the study's _mpe
    result: MPEResult = evaluate(ex, inst.patch, cand, golden, config, pool=team)
    out["mpe"] = time.monotonic() - mark
    timings = result.timings
    out["cold_start"] = timings.get("cold_start_s", 0.0)
    # as the study's mpe_wall (the checkout is open before MPE starts), the cold start left out: the first verdict
    # on an instance pays for server start and imports once, whatever is graded after it
    out["wall"] = out["mpe"] - out["cold_start"]
    out["implied"] = sum(row["implied"] for row in result.runs.values())
    out["made"] = sum(row["made"] for row in result.runs.values())
    out["verdicts_total"] = sum(row["made"] + row["cached"] + row["implied"] for row in result.runs.values())
    out["fail_to_pass"] = timings.get("fail_to_pass", 0.0)
    out["recording"] = timings.get("recording", 0.0)
    # built in the background, the pool's recording overlapped the F->P checks: "pool" is the wait after them
    out["pool"] = timings.get("pool", 0.0) - (0.0 if timings.get("early_pool") else out["recording"])
    out["mutants"] = timings.get("mutants", 0.0)
    out["timeouts"] = timings.get("timeouts", 0.0)
    out["n_mutants"] = len(result.mutants)
    out["result"] = result
    out["golden"], out["candidate"], out["fix"] = golden, cand, fix
    out["verdicts"] = [(m.mutant.id, m.candidate.outcome.value, m.reference.outcome.value) for m in result.mutants]
    return out


def fork_counts(study: RealBugsStudy, inst: Instance) -> tuple[int, int, int]:
    """(test runs, runs forked warm, of those with changed function bodies swapped in) of the study's checkouts
    so far: cumulative, subtract the counts before an instance."""
    runs = warm = swapped = 0
    for ex in study.team(inst).executors:
        runs += ex.runs  # the second lane's runs included
        for server in (ex._server, ex._lane._server if ex._lane is not None else None):  # noqa: SLF001
            if server is not None:  # a benchmark reads the executor's counters
                warm, swapped = warm + server.warm_runs, swapped + server.swapped_runs
    return runs, warm, swapped


def spread(ids: list[str], n: int) -> list[str]:
    if n >= len(ids):
        return ids
    step = len(ids) / n
    return [ids[int(i * step)] for i in range(n)]


def med_max(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} {max(values):8.1f}" if values else "       -        -"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    here = Path(__file__).resolve().parents[1]
    parser.add_argument("--data", type=Path, default=here.parent / "shared" / "data")
    # no machine path as a default: the flags, or the environment the tests read too
    parser.add_argument("--repos", type=Path, default=os.environ.get("COHARDEN_REPOS"),
                        help="directory holding sympy__sympy (default: $COHARDEN_REPOS)")
    parser.add_argument("--python", default=os.environ.get("COHARDEN_SYMPY_PYTHON"),
                        help="Python 3.11 with pytest and mpmath==1.3.0 (default: $COHARDEN_SYMPY_PYTHON)")
    parser.add_argument("-n", type=int, default=8, help="instances (spread over the sorted study ids)")
    parser.add_argument("--ids", nargs="*", help="these instances instead")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test process (default 120)")
    parser.add_argument("--per-operator", type=int, default=3)
    parser.add_argument("--system", default="Otter", choices=list(SYSTEM_FILES),
                        help="the system whose prediction is graded after the golden test")
    parser.add_argument("--cold", action="store_true", help="no warm sympy imports in the fork servers")
    parser.add_argument("--naive-runs", type=int, default=2, help="(mutant, test) naive runs measured per instance")
    parser.add_argument("--no-implied", action="store_true", help="make every run, the implied ones too (check mode)")
    args = parser.parse_args()
    if args.repos is None or args.python is None:
        print("skipped: give --repos and --python (or set COHARDEN_REPOS and COHARDEN_SYMPY_PYTHON)")
        return 0
    args.repos = Path(args.repos)
    for need in (args.data / "swebench_verified_sympy.jsonl", args.repos / "sympy__sympy", Path(args.python)):
        if not need.exists():
            print(f"skipped: {need} not found (needs the shared data, the sympy repo and the test interpreter)")
            return 0
    version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    settings = Settings(python=args.python, repos_dir=args.repos, timeout=args.timeout, preload=["mpmath"],
                        warm_imports=[] if args.cold else ["sympy"])
    data = load_data(args.data, python_version=version, test_patterns=settings.test_patterns)
    ids = args.ids or spread(data.study_ids, args.n)
    tmp = Path(tempfile.mkdtemp(prefix="coharden-mpe-real-"))
    load_start = os.getloadavg()
    print(f"{len(ids)} instances, Python {version}, {os.cpu_count()} cores, load average at start "
          f"{load_start[0]:.1f}; timeout {args.timeout:.0f} s, {args.per_operator} mutants per operator", flush=True)
    rows: list[dict[str, Any]] = []
    studies = {}
    interrupted = False

    def stop(*_: Any) -> None:  # SIGTERM / SIGINT: finish the instance under way, then summarize
        nonlocal interrupted
        interrupted = True
        print("stopping after this instance", flush=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for workers in (1, 2):
            store = Store(tmp / f"store-{workers}w.sqlite")
            config = StudyConfig(mpe=MPEConfig(per_operator=args.per_operator, implied=not args.no_implied),
                                 workers=workers, ids=ids)
            # 1 worker: one test process at a time (no second lane), the serial baseline the 2 workers are
            # compared with; 2 workers: the default (each worker may also run two test patches side by side)
            lanes = {"test_lanes": 1} if workers == 1 else {}
            study_settings = settings.with_overrides(workers=workers, **lanes)
            studies[workers] = RealBugsStudy(data, study_settings, store, config)
        header = (f"{'instance':<20} {'mut':>3} {'bare':>5} {'wall1':>6} {'wall2':>6} {'env':>5} {'f2p':>5} "
                  f"{'rec':>5} {'pool':>5} {'mut':>6} {'tmo':>5} {'grade':>6} {'naive':>7} {'cold':>5} {'cs':>5} "
                  f"{'imp':>7} {'made':>4}")
        print(header, flush=True)
        for iid in ids:
            if interrupted:
                break
            inst = data.instances[iid]
            row: dict[str, Any] = {"id": iid}
            try:
                one = mpe(studies[1], inst, None, with_bare=False)
                before = fork_counts(studies[2], inst)
                two = mpe(studies[2], inst, None, with_bare=True)
                row["forks"] = [b - a for a, b in zip(before, fork_counts(studies[2], inst), strict=True)]
                studies[1].release()
                row.update(wall1=one["wall"], **{k: two[k] for k in (*PHASES, "wall", "bare", "n_mutants", "cold_start",
                                                                     "implied", "made", "verdicts_total")})
                row["phases1"] = " ".join(f"{p[:3]} {one[p]:.1f}" for p in PHASES[1:])
                row["agree"] = one["verdicts"] == two["verdicts"]
                pred = data.predictions.get(args.system, {}).get(iid, "")
                if pred.strip():
                    mark = time.monotonic()
                    team = studies[2].team(inst)
                    try:
                        cand = team.executors[0].test_patch(pred, name=args.system)
                        graded = mpe(studies[2], inst, cand, with_bare=False)
                        row["grade_implied"], row["grade_made"] = graded["implied"], graded["made"]
                    except Exception as exc:  # noqa: BLE001 - a bad prediction is reported, not fatal
                        row["grade_error"] = str(exc)[:80]
                    row["grade"] = time.monotonic() - mark
                studies[2].release()
                # the naive loop: fresh clone + git apply + python -m pytest per (mutant, test)
                repo = args.repos / "sympy__sympy"
                mutants = two["result"].mutants
                runs = [naive_run(repo, inst.base_commit, two["fix"], two["golden"], args.python, args.timeout)]
                row["cold"] = runs[0]  # the bare golden test as a fresh python -m pytest in a fresh clone
                pairs = [(m.mutant.patch, t) for m in mutants for t in (two["candidate"], two["golden"])]
                for patch, test in pairs[: max(0, args.naive_runs - 1)]:
                    runs.append(naive_run(repo, inst.base_commit, patch, test, args.python, args.timeout))
                row["naive"] = statistics.mean(runs) * (4 + 2 * len(mutants))
            except Exception as exc:  # noqa: BLE001 - one broken instance does not stop the benchmark
                row["error"] = f"{type(exc).__name__}: {exc}"[:200]
                print(f"{iid:<20} error: {row['error']}", flush=True)
                rows.append(row)
                continue
            rows.append(row)
            print(f"{iid.replace('sympy__', ''):<20} {row['n_mutants']:>3} {row['bare']:5.1f} {row['wall1']:6.1f} "
                  f"{row['wall']:6.1f} {row['environment']:5.1f} {row['fail_to_pass']:5.1f} {row['recording']:5.1f} "
                  f"{row['pool']:5.1f} {row['mutants']:6.1f} {row['timeouts']:5.1f} {row.get('grade', 0):6.1f} "
                  f"{row['naive']:7.1f} {row['cold']:5.1f} {row['cold_start']:5.1f} "
                  f"{row['implied']:>3}/{row['verdicts_total']:<3} {row['made']:>4}"
                  f"{'' if row['agree'] else '  VERDICTS DIFFER'}", flush=True)
            runs, warm, swapped = row["forks"]
            print(f"{'':<20} 1 worker: {row['phases1']}; 2 workers: {runs} test runs, {warm} forked warm "
                  f"({swapped} with changed function bodies swapped in)", flush=True)
    finally:
        for study in studies.values():
            study.close()
        shutil.rmtree(tmp, ignore_errors=True)
    ok = [r for r in rows if "error" not in r]
    if not ok:
        print("no instance completed")
        return 1
    print(f"\n{'(seconds)':<26} {'median':>8} {'max':>8}")
    for key, label in [("bare", "bare golden test (fork)"), ("cold", "bare python -m pytest"),
                       ("cold_start", "cold start (kept apart)"),
                       ("wall1", "MPE wall, 1 worker"), ("wall", "MPE wall, 2 workers"),
                       *[(p, f"  {p}") for p in PHASES], ("grade", "grade one prediction"),
                       ("naive", "naive loop (extrapolated)")]:
        print(f"{label:<26} {med_max([r[key] for r in ok if key in r])}")
    mutants = [r["n_mutants"] for r in ok]
    print(f"{'mutants':<26} {statistics.median(mutants):8.1f} {max(mutants):8d}")
    implied, total = sum(r["implied"] for r in ok), sum(r["verdicts_total"] for r in ok)
    graded = [r for r in ok if "grade_made" in r]
    print(f"implied verdicts (no run made)      : {implied} of {total} (golden vs golden, 2 workers); grading "
          f"{args.system}: {sum(r['grade_implied'] for r in graded)} implied, "
          f"{sum(r['grade_made'] for r in graded)} runs made over {len(graded)} instances"
          + (" [--no-implied: check mode]" if args.no_implied else ""))
    ratio_bare = statistics.median(r["wall"] / r["bare"] for r in ok)
    ratio_cold = statistics.median(r["wall"] / r["cold"] for r in ok)
    speedup = statistics.median(r["wall1"] / r["wall"] for r in ok)
    naive = statistics.median(r["naive"] / r["wall"] for r in ok)
    worst = max(r["wall"] for r in ok)
    print("\n(MPE wall leaves each instance's cold start out; it is printed apart above)")
    print(f"MPE wall / bare golden test (median)   : {ratio_bare:5.2f}x  (goal <= 4x)")
    print(f"MPE wall / bare cold pytest (median)   : {ratio_cold:5.2f}x")
    print(f"worst instance MPE wall               : {worst:5.1f} s  (goal <= 120 s)")
    print(f"2 workers vs 1 worker (median speedup) : {speedup:5.2f}x  (goal >= 1.6x)")
    print(f"naive loop / MPE 2 workers (median)    : {naive:5.2f}x  (goal >= 5x)")
    print(f"verdicts identical 1 vs 2 workers      : {all(r['agree'] for r in ok)}")
    load_end = os.getloadavg()
    print(f"load average at end {load_end[0]:.1f} (15 min {load_end[2]:.1f}); {len(ok)}/{len(rows)} instances")
    return 0 if all(r["agree"] for r in ok) else 1


if __name__ == "__main__":
    sys.exit(main())
