"""The cost of the sandbox: this checkout's coharden against an earlier revision's, side by side in one run.

    python benchmarks/sandbox_cost.py --baseline REV [INSTANCE] [--id ID] [--repos DIR] [--python PY]
                                      [--test lax] [-n 5]

``REV`` is a git revision of this repository (e.g. the commit before the allow-listed sandbox); its ``src/`` is
exported to a temporary directory and imported from there, so both versions run the same jobs on the same
machine, interleaved round by round (drifting load hits both alike). INSTANCE is an instance directory or a
SWE-bench records file (default: the bundled ``examples/printer_brackets``). Two measures, each a median:

* seconds per verdict: ``InstanceExecutor.verdict`` of the golden test on the golden fix, no store (the full
  job: reset, apply, sandboxed run, parse), ``-n`` verdicts per round in one executor;
* MPE throughput: ``coharden mpe INSTANCE --test TEST --json`` with a fresh store, mutants run per second.

Prints both versions' figures and the ratios current / baseline.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_VERDICTS = '''
import json, sys, time
from pathlib import Path
from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.instances import load_instances, resolve_repo
args = json.loads(sys.argv[1])
settings = Settings(cache_dir=Path(args["cache"]), workers=1, **({"python": args["python"]} if args["python"] else {}))
found = load_instances(Path(args["instance"]), settings.cache_dir, [args["id"]] if args["id"] else None)
instance = found[0].instance
repo = resolve_repo(instance, Path(args["repos"]) if args["repos"] else None)
with InstanceExecutor(instance, repo, settings, None) as executor:
    test = executor.golden_test()
    executor.verdict(instance.patch, test)  # warm-up: workspace, fork server
    times = []
    for _ in range(args["n"]):
        start = time.perf_counter()
        verdict = executor.verdict(instance.patch, test.model_copy(update={"name": f"golden {len(times)}"}))
        times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "outcome": verdict.outcome.value, "isolation": verdict.isolation}))
'''


def export_src(revision: str, into: Path) -> Path:
    """``src/`` of ``revision`` of this repository, written under ``into``."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", revision, "src"], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into / "src"


def run_verdicts(src: Path, options: dict, script: str = _VERDICTS) -> dict:
    """The JSON the timing ``script`` prints (its last line), run with ``src`` as coharden (``fresh_state.py``
    passes its own script)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    proc = subprocess.run([sys.executable, "-c", script, json.dumps(options)], capture_output=True, text=True,
                          env=env, timeout=1800, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"verdict job failed with {src}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def run_mpe(src: Path, args: argparse.Namespace, scratch: Path) -> tuple[float, int, str]:
    env = {**os.environ, "PYTHONPATH": str(src), "COHARDEN_CACHE": str(scratch / "cache")}
    # a fixed budget (3 per operator, every version's sample of the same pool): a sequential draw stops at
    # another count, and mutants per second would then compare pools, not sandboxes
    cmd = [sys.executable, "-m", "coharden", "mpe", str(args.instance), "--test", args.test, "--json",
           "--per-operator", "3", "--store", str(scratch / f"store-{time.monotonic_ns()}.sqlite")]
    cmd += ["--id", args.id] if args.id else []
    cmd += ["--repos", str(args.repos)] if args.repos else []
    cmd += ["--python", args.python] if args.python else []
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=scratch, timeout=3600, check=False)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"mpe failed with {src}:\n{proc.stdout[-1000:]}\n{proc.stderr[-2000:]}")
    result = json.loads(proc.stdout)
    return wall, len(result.get("mutants", [])), str(result.get("test_class"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instance", nargs="?", type=Path, default=ROOT / "examples" / "printer_brackets")
    parser.add_argument("--baseline", required=True, help="git revision to compare with (e.g. 7ffba35)")
    parser.add_argument("--id", default=None)
    parser.add_argument("--repos", type=Path, default=None)
    parser.add_argument("--python", default=None, help="test interpreter (default: this one)")
    parser.add_argument("--test", default="lax", help="the candidate MPE grades (default: lax)")
    parser.add_argument("-n", type=int, default=5, help="verdicts per round")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coharden-bench-") as tmp:
        scratch = Path(tmp)
        # the baseline's files outside the temp directory: a sandbox before the allow-listed one hid its own
        # plugin when coharden lay under /tmp (issue 34), which would make it grade nothing
        cache = Path(os.environ.get("COHARDEN_CACHE", Path.home() / ".cache" / "coharden"))
        cache.mkdir(parents=True, exist_ok=True)
        base = Path(tempfile.mkdtemp(prefix="bench-baseline-", dir=cache))
        versions = {"baseline": export_src(args.baseline, base), "current": ROOT / "src"}
        options = {"instance": str(args.instance.resolve()), "id": args.id, "python": args.python, "n": args.n,
                   "repos": str(args.repos) if args.repos else None, "cache": str(scratch / "cache")}
        verdict_times: dict[str, list[float]] = {name: [] for name in versions}
        mpe_rates: dict[str, list[float]] = {name: [] for name in versions}
        seen: dict[str, str] = {}
        for _ in range(args.rounds):
            for name, src in versions.items():
                out = run_verdicts(src, options)
                verdict_times[name] += out["times"]
                wall, mutants, klass = run_mpe(src, args, scratch)
                mpe_rates[name].append(mutants / wall if wall else 0.0)
                seen[name] = f"{out['outcome']} ({out['isolation']}), MPE class {klass}, {mutants} mutants"
        print(f"instance: {args.instance}{' ' + args.id if args.id else ''}; baseline {args.baseline}")
        for name in versions:
            print(f"  {name:9s} {statistics.median(verdict_times[name]):.3f} s/verdict, "
                  f"{statistics.median(mpe_rates[name]):.2f} mutants/s   [{seen[name]}]")
        ratio = statistics.median(verdict_times["current"]) / statistics.median(verdict_times["baseline"])
        throughput = statistics.median(mpe_rates["current"]) / max(statistics.median(mpe_rates["baseline"]), 1e-9)
        print(f"  ratio current/baseline: {ratio:.2f}x seconds per verdict, {throughput:.2f}x MPE throughput")
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
