"""MPE on real instances (issue 35's goals): the first grading, further gradings, per-run overhead, the naive loop
and sequential MPE against the fixed budget, side by side in one run, on sympy or any repository of an envcheck.

    python benchmarks/mpe_real.py [--data DIR] [--repos DIR] [--python PY] [-n 5 | --ids ID ...] [--naive 3]
    python benchmarks/mpe_real.py --envcheck OUT --repo pytest-dev/pytest --repo sphinx-doc/sphinx [-n 3] ...

Instances: sympy's study instances verified on the interpreter ``--python`` (``$COHARDEN_SYMPY_PYTHON``) by the
data directory's sympy check, or with ``--envcheck`` (the output of ``coharden study envcheck``) the instances it
verified, each run in its spec environment exactly as ``coharden study real-bugs --envcheck`` picks it
(``RealBugsStudy.settings_for``); ``-n`` per repository, spread evenly over the sorted ids, or ``--ids`` (a number
stands for the one instance whose id ends in ``-NUMBER``). Everything runs as the study runs it (two long-lived
checkouts moved from instance to instance, checked-hash bytecode, the study's fork-server warm-up, 2 workers,
seed 0, each MPE from an empty store), in two studies side by side, their order alternating per instance:

* **sequential** (coharden's default: seeded stratified rounds stopped when the interval decides, implied runs
  not made, collect once per fork server): the bare golden test on the fixed code (one fork-server run, as the
  study measures it); the **first grading**, MPE of an equivalent copy of the golden test against the golden
  test (the reference's F->P checks, recordings and mutant runs included), phase by phase; then **each
  system's test** (``--systems``) graded on the same instance, the reference's verdicts shared as in a study;
* **fixed budget** (``--per-operator`` mutants per operator, all run, the paper's point rule): the same
  gradings in a store of its own: its classes and wall time against the sequential ones.

Then, on the sequential study's checkout, the **per-run overhead**: the golden test on the fix and on two of
the first grading's mutants, timed exactly as ``benchmarks/run_overhead.py`` times a run (its ``timed_run``:
the fork's wall time / the test's own call time that pytest reports), one warm-up round, then
``--overhead-rounds``. And the **naive loop** (a fresh clone, ``git apply`` of mutant and test and a fresh
``python -m pytest`` per run): on the first ``--naive K`` instances of each repository measured in full (the
4 F->P runs and the candidate's and the reference's run on every mutant the sequential first grading drew), on
the others extrapolated from ``--naive-runs`` runs and kept out of the goal's ratio.

The cold start of each MPE (``cold_start_s``: opening the checkouts, starting and priming the fork servers) is
printed apart (``cs``) and left out of every MPE wall; ``cold`` is the bare golden test as a fresh
``python -m pytest`` in a fresh clone, marked ``!`` when it did not pass (the naive loop then is not valid);
``imp`` is the verdicts implied without a run / all verdicts of the first grading, ``made`` its test processes.
``--no-implied`` makes every run (check mode).
Prints one block per instance, then the goals of issue 35 (and the load average: the machine may be shared;
the two studies run back to back on each instance so that both see the same load). Skips cleanly (exit 0)
when the data, a repository or the interpreter is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

from coharden.config import Settings
from coharden.execution.pytest_runner import test_environment
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.store import Store
from coharden.instances import resolve_repo
from coharden.mpe.evaluate import MPERequest, MPEResult, check_fix, evaluate
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.testpatch import TestPatch
from coharden.study.data import SYSTEM_FILES, StudyData, StudySource, load_data
from coharden.study.real_bugs import RealBugsStudy, StudyConfig
from coharden.study.steps import golden_copy

PHASES = ("environment", "fail_to_pass", "recording", "pool", "mutants", "timeouts")
DECIDED = ("Lax", "Rigorous")  # the classes both protocols can give an F->P test (Borderline is sequential's own)
MODES = ("seq", "fixed")


def run_overhead() -> ModuleType:
    """``benchmarks/run_overhead.py``, whose ``timed_run`` and ``call_time`` measure a forked run here too."""
    path = Path(__file__).resolve().with_name("run_overhead.py")
    spec = importlib.util.spec_from_file_location("benchmark_run_overhead", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def naive_run(repo: Path, commit: str, source: str, test: TestPatch, settings: Settings, timeout: float
              ) -> tuple[float, int | None]:
    """One hand-written-loop run: fresh clone at ``commit``, ``git apply`` source and test, fresh pytest, in the
    instance's environment as the executor sets it up (the spec environment's built files laid over the clone,
    its ``test_env`` with the clone as ``{workspace}``). (seconds, pytest's exit code; None: timed out)."""
    started = time.monotonic()
    code: int | None = None
    with tempfile.TemporaryDirectory(prefix="naive-") as tmp:
        work = Path(tmp) / "repo"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(repo), str(work)], check=True)
        subprocess.run(["git", "checkout", "-q", "--detach", commit], cwd=work, check=True)
        if settings.env_overlay is not None and Path(settings.env_overlay).is_dir():
            shutil.copytree(settings.env_overlay, work, dirs_exist_ok=True, symlinks=True)
        for patch in (source, test.patch):
            if patch.strip():
                subprocess.run(["git", "apply", "-"], cwd=work, input=patch, text=True, capture_output=True,
                               check=False)
        env = {**test_environment(()), **{k: v.replace("{workspace}", str(work)) for k, v in settings.test_env.items()}}
        try:
            code = subprocess.run([settings.python, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                                   *settings.pytest_args, *test.ids], cwd=work, capture_output=True, env=env,
                                  timeout=timeout, check=False).returncode
        except subprocess.TimeoutExpired:
            pass
    return time.monotonic() - started, code


def naive_pairs(fix: str, candidate: TestPatch, golden: TestPatch, result: MPEResult) -> list[tuple[str, TestPatch]]:
    """The naive loop's runs for one grading: the golden test on the fix first (the bare cold pytest), the other
    F->P runs (both tests on buggy and fixed code), then both tests on every mutant the grading drew."""
    return [(fix, golden), (fix, candidate), ("", golden), ("", candidate),
            *((m.mutant.patch, t) for m in result.mutants for t in (candidate, golden))]


def mpe(study: RealBugsStudy, inst: Instance, candidate: TestPatch | None, with_bare: bool) -> dict[str, Any]:
    """One grading of ``candidate`` (None: a copy of the golden test) on ``study``'s checkouts; seconds per phase."""
    out: dict[str, Any] = {}
    mark = time.monotonic()
    team = study.team(inst)  # the other checkouts open and warm up in the background (ExecutorPool.warm)
    ex = team.executors[0]
    ex.workspace_root()
    out["environment"] = time.monotonic() - mark
    # the cold start, timed apart: this executor's server start and priming, which the first run (the bare one
    # below, or the study's F->P steps) would otherwise pay and evaluate() would then see as warm (0.0 s)
    mark = time.monotonic()
    ex.warm_up()
    warm_up = time.monotonic() - mark
    golden = ex.golden_test()
    fix = check_fix(inst.patch, study.settings.test_patterns)
    if with_bare:
        bare = ex.run_raw(fix, golden)
        out["bare"] = bare.duration
        out["bare_outcome"] = verdict_for(list(golden.ids), bare).outcome.value
    cand = candidate if candidate is not None else golden_copy(ex, golden)
    mark = time.monotonic()
    config = study.config.mpe.model_copy(update={"workers": study.config.workers})  # as the study's _mpe
    result: MPEResult = evaluate(ex, MPERequest(inst.patch, cand, golden, config), pool=team)
    out["mpe"] = time.monotonic() - mark
    timings = result.timings
    # evaluate()'s own cold start is what is left of the other workers' warm-up when it starts
    out["cold_start"] = warm_up + timings.get("cold_start_s", 0.0)
    # as the study's mpe_wall (the checkout is open before MPE starts), the cold start left out: the first verdict
    # on an instance pays for server start and imports once, whatever is graded after it
    out["wall"] = out["mpe"] - timings.get("cold_start_s", 0.0)
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
    out["class"] = result.test_class.value
    out["f2p"] = result.fail_to_pass
    out["stop"] = result.stop
    out["result"] = result
    out["golden"], out["candidate"], out["fix"] = golden, cand, fix
    return out


def overhead(study: RealBugsStudy, inst: Instance, first: dict[str, Any], rounds: int) -> list[tuple[float, float]]:
    """(fork wall, call time) of the golden test on the fix and on two of the first grading's mutants, each run
    made through ``run_overhead.timed_run`` on the study's first checkout (collect once as configured); a
    warm-up round first."""
    timed_run = run_overhead().timed_run
    ex = study.team(inst).executors[0]
    patches = [(first["fix"], False), *((m.mutant.patch, True) for m in first["result"].mutants[:2])]
    runs: list[tuple[float, float]] = []
    for round_ in range(rounds + 1):
        for patch, mutant in patches:
            _, fork_wall, call, _ = timed_run(ex, patch, first["golden"], mutant)
            if round_:
                runs.append((fork_wall, call))
    return runs


def spread(ids: list[str], n: int) -> list[str]:
    if n >= len(ids):
        return ids
    step = len(ids) / n
    return [ids[int(i * step)] for i in range(n)]


def pick(data: StudyData, wanted: list[str] | None, n: int) -> list[str]:
    """``wanted`` (a bare number: the instance whose id ends in -NUMBER), else ``n`` per repository."""
    if wanted:
        chosen = []
        for want in wanted:
            found = [want] if want in data.instances else [i for i in data.study_ids if i.endswith(f"-{want}")]
            if len(found) != 1:
                sys.exit(f"--ids {want}: {len(found)} instances match")
            chosen.append(found[0])
        return chosen
    repos = sorted({data.instances[i].repo for i in data.study_ids})
    return [i for repo in repos for i in spread([j for j in data.study_ids if data.instances[j].repo == repo], n)]


def med(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = "5.2f", unit: str = "") -> str:
    return "-" if value is None else f"{value:{spec}}{unit}"


def med_max(values: list[float]) -> str:
    return f"{statistics.median(values):8.1f} {max(values):8.1f}" if values else "       -        -"


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # no machine path as a default: the flags, or the environment the tests read too
    parser.add_argument("--data", type=Path, default=os.environ.get("COHARDEN_DATA"),
                        help="the shared data directory (default: $COHARDEN_DATA)")
    parser.add_argument("--repos", type=Path, default=os.environ.get("COHARDEN_REPOS"),
                        help="directory holding owner__name clones (default: $COHARDEN_REPOS)")
    parser.add_argument("--python", default=os.environ.get("COHARDEN_SYMPY_PYTHON"),
                        help="sympy: Python 3.11 with pytest and mpmath==1.3.0 (default: $COHARDEN_SYMPY_PYTHON)")
    parser.add_argument("--envcheck", type=Path, help="output of `coharden study envcheck` (directory or "
                        "envcheck.jsonl): its verified instances, in their spec environments, instead of sympy's")
    parser.add_argument("--records", type=Path, help="with --envcheck: SWE-bench records (default: the data "
                        "directory's swebench_verified.jsonl)")
    parser.add_argument("--repo", action="append", default=[], help="with --envcheck: only this repository "
                        "(owner/name; repeatable)")
    parser.add_argument("-n", type=int, default=5, help="instances per repository (spread over the sorted ids)")
    parser.add_argument("--ids", nargs="*", help="these instances instead")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test process (default 120)")
    parser.add_argument("--per-operator", type=int, default=3, help="the fixed budget (default 3)")
    parser.add_argument("--systems", default=",".join(SYSTEM_FILES),
                        help="systems whose predictions are graded after the golden test (comma-separated)")
    parser.add_argument("--cold", action="store_true", help="no fork-server warm-up (no sympy imported once)")
    parser.add_argument("--naive", type=int, default=3, help="the naive loop measured in full on the first K "
                        "instances of each repository (default 3)")
    parser.add_argument("--naive-runs", type=int, default=2, help="naive runs measured on the other instances, "
                        "extrapolated (default 2; 0: none)")
    parser.add_argument("--overhead-rounds", type=int, default=2, help="timed rounds of the per-run overhead")
    parser.add_argument("--no-implied", action="store_true", help="make every run, the implied ones too (check mode)")
    return parser.parse_args()


def load(args: argparse.Namespace) -> tuple[StudyData, Settings] | str:
    """The study data and base settings, or why the benchmark is skipped."""
    if args.data is None or args.repos is None:
        return "give --data and --repos (or set COHARDEN_DATA and COHARDEN_REPOS)"
    settings = Settings(repos_dir=args.repos, timeout=args.timeout)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if args.envcheck is not None:
        records = args.records or args.data / "swebench_verified.jsonl"
        for need in (args.envcheck, records):
            if not Path(need).exists():
                return f"{need} not found"
        if args.python:  # an interpreter given replaces every spec environment (as --python does in the study)
            settings = settings.with_overrides(python=args.python)
        source = StudySource(args.data, envcheck=args.envcheck, systems=systems, records=records,
                             only_repos=args.repo)
        data = load_data(source, settings.test_patterns)
    else:
        if args.python is None:
            return "give --python (or set COHARDEN_SYMPY_PYTHON), or --envcheck"
        for need in (args.data / "swebench_verified_sympy.jsonl", Path(args.python)):
            if not need.exists():
                return f"{need} not found (needs the shared data and the test interpreter)"
        version = subprocess.run([args.python, "-c", "import sys; print(sys.version.split()[0])"],
                                 capture_output=True, text=True, check=True).stdout.strip()
        settings = settings.with_overrides(python=args.python)
        data = load_data(StudySource(args.data, python_version=version, systems=systems), settings.test_patterns)
    for repo in sorted({data.instances[i].repo for i in data.study_ids}):
        if not (args.repos / repo.replace("/", "__")).exists():
            return f"{args.repos / repo.replace('/', '__')} not found"
    return data, settings


def instance(args: argparse.Namespace, k: int, inst: Instance, studies: dict[str, RealBugsStudy],
             data: StudyData, full: bool) -> dict[str, Any]:
    """Both studies on one instance (their order alternating with ``k``), the overhead and the naive loop (in
    full when ``full``)."""
    row: dict[str, Any] = {"id": inst.instance_id, "repo": inst.repo, "grades": {}}
    for mode in (MODES if k % 2 == 0 else MODES[::-1]):
        study = studies[mode]
        first = mpe(study, inst, None, with_bare=mode == "seq")
        row[mode] = first
        for system in studies[mode].config.systems:
            pred = data.predictions.get(system, {}).get(inst.instance_id, "")
            if not pred.strip():
                continue
            try:
                cand = study.team(inst).executors[0].test_patch(pred, name=system)
                row["grades"].setdefault(system, {})[mode] = mpe(study, inst, cand, with_bare=False)
            except Exception as exc:  # noqa: BLE001 - a bad prediction is reported, not fatal
                row["grades"].setdefault(system, {})[f"{mode}_error"] = str(exc)[:80]
        if mode == "seq" and args.overhead_rounds > 0:
            row["overhead"] = overhead(study, inst, first, args.overhead_rounds)
        study.release()
    seq = row["seq"]
    repo = resolve_repo(inst, args.repos)
    settings = studies["seq"].settings_for(inst)[0]
    pairs = naive_pairs(seq["fix"], seq["candidate"], seq["golden"], seq["result"])
    made = [naive_run(repo, inst.base_commit, source, test, settings, args.timeout)
            for source, test in (pairs if full else pairs[:max(1, args.naive_runs)])]
    runs = [seconds for seconds, _ in made]
    row["cold"] = runs[0]  # the bare golden test as a fresh python -m pytest in a fresh clone
    row["cold_code"] = made[0][1]  # 0: it passed, as on the fixed code it must (else the naive run is not valid)
    row["naive"] = sum(runs) if full else statistics.mean(runs) * len(pairs)
    row["naive_measured"] = full
    if not full and args.naive_runs <= 0:
        del row["naive"]
    return row


def print_row(row: dict[str, Any]) -> None:
    seq, fixed = row["seq"], row["fixed"]
    naive = row.get("naive")
    print(f"{row['id']:<26} {seq['bare']:5.1f} {row['cold']:5.1f}{' ' if row['cold_code'] == 0 else '!'}"
          f"{seq['cold_start']:5.1f} {seq['wall']:6.1f} {seq['wall'] / seq['bare']:6.1f} {seq['fail_to_pass']:5.1f} "
          f"{seq['recording']:5.1f} {seq['pool']:5.1f} "
          f"{seq['mutants']:6.1f} {seq['timeouts']:5.1f} {seq['n_mutants']:>3}/{fixed['n_mutants']:<3} "
          f"{fixed['wall']:6.1f} {seq['implied']:>3}/{seq['verdicts_total']:<3} {seq['made']:>4} "
          f"{fmt(naive, '7.1f')}{'' if row['naive_measured'] else '~'} "
          f"{fmt(naive / seq['wall'] if naive else None, '5.1f')}", flush=True)
    parts = [f"golden {seq['class']}/{fixed['class']} ({seq['stop']})"]
    for system, graded in row["grades"].items():
        s, f = graded.get("seq"), graded.get("fixed")
        if s is None or f is None:
            parts.append(f"{system} error: {graded.get('seq_error') or graded.get('fixed_error')}")
            continue
        parts.append(f"{system} {s['wall']:.1f}s={s['wall'] / seq['bare']:.1f}x [{s['n_mutants']} mut, "
                     f"{s['implied']} imp, {s['made']} made] {s['class']}/{f['class']} ({f['wall']:.1f}s fixed)")
    print(f"{'':<26} {'; '.join(parts)}", flush=True)
    if row.get("overhead"):
        ratios = [fork / call for fork, call in row["overhead"] if call > 0]
        print(f"{'':<26} per-run: fork {statistics.median(f for f, _ in row['overhead']) * 1000:.0f} ms, call "
              f"{statistics.median(c for _, c in row['overhead']) * 1000:.1f} ms, fork/call median "
              f"{fmt(med(ratios), '.2f')}x over {len(ratios)} runs", flush=True)


def summarize(rows: list[dict[str, Any]], args: argparse.Namespace) -> bool:
    """The issue's goals; False when a class differs where both protocols decide."""
    ok = [r for r in rows if "error" not in r]
    print(f"\n{'(seconds)':<34} {'median':>8} {'max':>8}")
    for key, label in [("bare", "bare golden test (fork)"), ("cold_start", "cold start (kept apart)"),
                       ("wall", "first grading, sequential"), *[(p, f"  {p}") for p in PHASES]]:
        print(f"{label:<34} {med_max([r['seq'][key] for r in ok])}")
    print(f"{'first grading, fixed budget':<34} {med_max([r['fixed']['wall'] for r in ok])}")
    print(f"{'bare python -m pytest (fresh clone)':<34} {med_max([r['cold'] for r in ok])}")
    further = [(r, g["seq"]) for r in ok for g in r["grades"].values() if "seq" in g]
    print(f"{'further grading (each system)':<34} {med_max([g['wall'] for _, g in further])}")
    for p in PHASES[1:]:
        print(f"{'  ' + p + ' (F->P ones)':<34} {med_max([g[p] for _, g in further if g['f2p']])}")
    measured = [r for r in ok if r.get("naive_measured")]
    print(f"{'naive loop (measured)':<34} {med_max([r['naive'] for r in measured])}")

    # classes where both decide: the first grading and every further one
    pairs = [(r["id"], "golden", r["seq"]["class"], r["fixed"]["class"]) for r in ok]
    pairs += [(r["id"], system, g["seq"]["class"], g["fixed"]["class"])
              for r in ok for system, g in r["grades"].items() if "seq" in g and "fixed" in g]
    both = [p for p in pairs if p[2] in DECIDED and p[3] in DECIDED]
    differ = [p for p in both if p[2] != p[3]]
    undecided = [p for p in pairs if p[2] != p[3] and p not in differ]
    first = [r["seq"]["wall"] / r["seq"]["bare"] for r in ok]
    grades = [g["wall"] / r["seq"]["bare"] for r, g in further]
    grades_f2p = [g["wall"] / r["seq"]["bare"] for r, g in further if g["f2p"]]
    runs = [(f, c) for r in ok for f, c in r.get("overhead", [])]
    per_run = [f / c for f, c in runs if c > 0]
    per_instance = [statistics.median(f / c for f, c in r["overhead"] if c > 0) for r in ok
                    if any(c > 0 for _, c in r.get("overhead", []))]
    naive = [r["naive"] / r["seq"]["wall"] for r in measured]
    guessed = [r["naive"] / r["seq"]["wall"] for r in ok if not r.get("naive_measured") and "naive" in r]
    worst = max(ok, key=lambda r: r["seq"]["wall"])
    gradings = [(r["seq"], r["fixed"]) for r in ok] + [(g["seq"], g["fixed"]) for r in ok
                                                        for g in r["grades"].values() if "seq" in g and "fixed" in g]
    mut_s, mut_f = sum(s["n_mutants"] for s, _ in gradings), sum(f["n_mutants"] for _, f in gradings)
    wall_s, wall_f = sum(s["wall"] for s, _ in gradings), sum(f["wall"] for _, f in gradings)
    f2p = [(s, f) for s, f in gradings if s["f2p"]]
    implied = sum(r["seq"]["implied"] for r in ok), sum(r["seq"]["verdicts_total"] for r in ok)
    print("\n(every MPE wall leaves the cold start out; it is printed apart above)"
          + (" [--no-implied: check mode]" if args.no_implied else ""))
    print(f"first grading / bare golden test (median)  : {fmt(med(first))}x  (goal <= 8x; max "
          f"{fmt(max(first))}x)")
    print(f"classes sequential = fixed where both decide: {len(both) - len(differ)}/{len(both)} "
          f"(of {len(pairs)} gradings){''.join(f'; DIFFER {p[0]} {p[1]} {p[2]}/{p[3]}' for p in differ)}")
    if undecided:
        print("  not both decided, classes apart          : "
              + "; ".join(f"{p[0]} {p[1]} {p[2]}/{p[3]}" for p in undecided))
    print(f"further grading / bare (median)             : {fmt(med(grades))}x  (goal <= 2x; {len(grades)} "
          f"gradings, max {fmt(max(grades) if grades else None)}x); F->P ones {fmt(med(grades_f2p))}x "
          f"(n = {len(grades_f2p)})")
    print(f"per-run overhead fork wall / call (median)  : {fmt(med(per_run))}x  (goal <= 1.3x; {len(per_run)} runs; "
          f"median of instances' medians {fmt(med(per_instance))}x; fork {fmt(med([f for f, _ in runs]), '.3f')} s, "
          f"call {fmt(med([c for _, c in runs]), '.4f')} s)")
    print(f"naive loop / MPE (median, measured)         : {fmt(med(naive))}x  (goal >= 10x; measured in full on "
          f"{len(naive)}: {', '.join(f'{x:.1f}' for x in naive)}; extrapolated on {len(guessed)}: median "
          f"{fmt(med(guessed))}x)")
    print(f"worst instance, first grading               : {worst['seq']['wall']:5.1f} s  (goal <= 60 s; "
          f"{worst['id']})")
    print(f"sequential / fixed budget, all gradings     : mutants {mut_s}/{mut_f} = "
          f"{fmt(mut_s / mut_f if mut_f else None)}, wall {wall_s:.0f}/{wall_f:.0f} s = "
          f"{fmt(wall_s / wall_f if wall_f else None)}; F->P gradings only: "
          f"mutants {sum(s['n_mutants'] for s, _ in f2p)}/{sum(f['n_mutants'] for _, f in f2p)}, wall "
          f"{sum(s['wall'] for s, _ in f2p):.0f}/{sum(f['wall'] for _, f in f2p):.0f} s")
    print(f"implied verdicts, first grading             : {implied[0]} of {implied[1]}")
    load_end = os.getloadavg()
    print(f"load average at end {load_end[0]:.1f} (15 min {load_end[2]:.1f}); {len(ok)}/{len(rows)} instances")
    return not differ


def main() -> int:
    args = arguments()
    loaded = load(args)
    if isinstance(loaded, str):
        print(f"skipped: {loaded}")
        return 0
    data, settings = loaded
    ids = pick(data, args.ids, args.n)
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    tmp = Path(tempfile.mkdtemp(prefix="coharden-mpe-real-"))
    load_start = os.getloadavg()
    where = f"spec environments of {args.envcheck.name}" if args.envcheck else f"Python {settings.python}"
    print(f"{len(ids)} instances ({where}), {os.cpu_count()} cores, load average at start {load_start[0]:.1f} "
          f"(15 min {load_start[2]:.1f}); timeout {args.timeout:.0f} s; fixed budget {args.per_operator} per "
          f"operator; naive loop in full on the first {args.naive} of each repository", flush=True)
    rows: list[dict[str, Any]] = []
    studies: dict[str, RealBugsStudy] = {}
    interrupted = False

    def stop(*_: Any) -> None:  # SIGTERM / SIGINT: finish the instance under way, then summarize
        nonlocal interrupted
        interrupted = True
        print("stopping after this instance", flush=True)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        for mode in MODES:
            base = MPEConfig(per_operator=args.per_operator, implied=not args.no_implied)
            # the fixed budget: every drawn mutant run, the paper's point rule (laxity < tau) for the class
            mpe_config = base if mode == "seq" else base.model_copy(update={"sequential": False,
                                                                            "paper_classes": True})
            config = StudyConfig(mpe=mpe_config, workers=2, ids=ids, systems=systems, warm_defaults=not args.cold)
            studies[mode] = RealBugsStudy(data, settings.with_overrides(workers=2), Store(tmp / f"{mode}.sqlite"),
                                          config)
        print(f"{'instance':<26} {'bare':>5} {'cold':>5} {'cs':>5} {'first':>6} {'xbare':>6} {'f2p':>5} {'rec':>5} "
              f"{'pool':>5} {'mut':>6} {'tmo':>5} {'mut s/f':>7} {'fixed':>6} {'imp':>7} {'made':>4} {'naive':>8} "
              f"{'xMPE':>5}", flush=True)
        for k, iid in enumerate(ids):
            if interrupted:
                break
            try:
                repo_ids = [i for i in ids if data.instances[i].repo == data.instances[iid].repo]
                row = instance(args, k, data.instances[iid], studies, data, repo_ids.index(iid) < args.naive)
            except Exception as exc:  # noqa: BLE001 - one broken instance does not stop the benchmark
                for study in studies.values():
                    study.release()
                rows.append({"id": iid, "error": f"{type(exc).__name__}: {exc}"[:200]})
                print(f"{iid:<26} error: {rows[-1]['error']}", flush=True)
                continue
            rows.append(row)
            print_row(row)
    finally:
        for study in studies.values():
            study.close()
        shutil.rmtree(tmp, ignore_errors=True)
    if not any("error" not in r for r in rows):
        print("no instance completed")
        return 1
    return 0 if summarize(rows, args) else 1


if __name__ == "__main__":
    sys.exit(main())
