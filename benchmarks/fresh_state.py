"""The cost of an empty sandbox state for every run (issue 51), side by side in one run.

    python benchmarks/fresh_state.py [INSTANCE] [--id ID] [--repos DIR] [--python PY] [--baseline REV]
                                     [-n 10] [--rounds 3] [--wipes 200]

Seconds per verdict (``InstanceExecutor.verdict`` of the golden test on the golden fix, no store: reset, apply,
sandboxed run, parse; the median over ``--rounds`` rounds of ``-n`` verdicts, the ways interleaved round by round
so that drifting load hits them alike) of:

* ``fork server, fresh state``: this checkout - one sandbox for many runs, every writable mount of it emptied
  and its IPC objects removed after each run (``forkserver_procs.wipe``);
* ``fork server, before``: ``--baseline REV`` (a revision of this repository before the change, exported and
  imported from a temporary directory, as ``sandbox_cost.py`` does): its server emptied /tmp and TMPDIR only;
* ``a sandbox per run``: the naive way to a fresh state, this checkout with ``fork_server=False`` (a new bwrap
  sandbox and interpreter for every run).

And the wipe alone, inside a real sandbox (``--wipes`` times, after planting what a pytest run leaves: its
``pytest-of-*`` tree in TMPDIR, a file in /tmp): milliseconds per wipe now and with the old ``/tmp``-only wipe.
INSTANCE is an instance directory or a SWE-bench records file (default: the bundled
``examples/printer_brackets``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from sandbox_cost import export_src, run_verdicts  # noqa: E402 - a sibling script: the one baseline export and run

_VERDICTS = '''
import json, sys, time
from pathlib import Path
from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.instances import load_instances, resolve_repo
args = json.loads(sys.argv[1])
settings = Settings(cache_dir=Path(args["cache"]), workers=1, fork_server=args["fork_server"],
                    **({"python": args["python"]} if args["python"] else {}))
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

# inside a sandbox: plant what a pytest run leaves, then time one wipe; the new one and the old one alternately
_WIPES = '''
import importlib.util, json, os, pathlib, shutil, sys, time
args = json.loads(sys.argv[1])
spec = importlib.util.spec_from_file_location("procs", args["procs"])
procs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(procs)


def old_wipe(keep, home, tests_tmp):  # forkserver_procs.wipe_tmp before issue 51
    entries = list(pathlib.Path("/tmp").iterdir())
    if tests_tmp != "/tmp":
        entries += list(pathlib.Path(tests_tmp).iterdir())
    for entry in entries:
        if entry.parent == pathlib.Path("/tmp") and entry.name in keep:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            try:
                entry.unlink()
            except OSError:
                pass
    pathlib.Path(home).mkdir(parents=True, exist_ok=True)


def plant(i):
    run = os.path.join(os.environ["TMPDIR"], "pytest-of-root", f"pytest-{i}", "test_repro0")
    os.makedirs(run)
    for name in ("a.txt", "b.txt", "c.json"):
        with open(os.path.join(run, name), "w") as handle:
            handle.write("x" * 100)
    with open(f"/tmp/left-{i}", "w") as handle:
        handle.write("x")


fresh = procs.Fresh(args["own"])
keep = sorted({p.split("/")[2] for p in args["own"] if p.startswith("/tmp/")})
home = os.environ["HOME"]
times = {"new": [], "old": []}
for i in range(args["wipes"]):
    for name in ("new", "old"):
        plant(i)
        start = time.perf_counter()
        if name == "new":
            procs.wipe(fresh, home)
        else:
            old_wipe(set(keep), home, os.environ["TMPDIR"])
        times[name].append(time.perf_counter() - start)
print(json.dumps(times))
'''


def time_wipes(wipes: int) -> dict[str, list[float]]:
    """Seconds per wipe, new and old, inside a real sandbox of this checkout (a worktree-like directory under
    /tmp bound in it, as coharden's are)."""
    sys.path.insert(0, str(ROOT / "src"))
    from coharden.execution.sandbox import Confinement, run_limited

    procs = ROOT / "src" / "coharden" / "execution" / "fast" / "forkserver_procs.py"
    with tempfile.TemporaryDirectory(prefix="coharden-bench-wipe-") as work:
        options = {"procs": str(procs), "own": [work], "wipes": wipes}
        result = run_limited([sys.executable, "-c", _WIPES, json.dumps(options)], Path(work), timeout=1800,
                             confine=Confinement(writable=(Path(work),)))
    if result.isolation != "bwrap" or result.returncode != 0:
        raise SystemExit(f"the wipe job failed ({result.isolation}):\n{result.output[-2000:]}")
    return json.loads(result.output.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("instance", nargs="?", type=Path, default=ROOT / "examples" / "printer_brackets")
    parser.add_argument("--baseline", default=None, help="git revision before the per-run fresh state, for the "
                        "'fork server, before' row (e.g. the commit before issue 51's)")
    parser.add_argument("--id", default=None)
    parser.add_argument("--repos", type=Path, default=None)
    parser.add_argument("--python", default=None, help="test interpreter (default: this one)")
    parser.add_argument("-n", type=int, default=10, help="verdicts per round and way")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--wipes", type=int, default=200, help="wipes timed inside a sandbox (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="coharden-bench-") as tmp:
        scratch = Path(tmp)
        ways: dict[str, tuple[Path, bool]] = {"fork server, fresh state": (ROOT / "src", True)}
        base = None
        if args.baseline:
            # outside the temp directory: a sandbox before the allow-listed one hid its own plugin under /tmp
            cache = Path(os.environ.get("COHARDEN_CACHE", Path.home() / ".cache" / "coharden"))
            cache.mkdir(parents=True, exist_ok=True)
            base = Path(tempfile.mkdtemp(prefix="bench-baseline-", dir=cache))
            ways["fork server, before"] = (export_src(args.baseline, base), True)
        ways["a sandbox per run"] = (ROOT / "src", False)
        times: dict[str, list[float]] = {name: [] for name in ways}
        seen: dict[str, str] = {}
        try:
            for _ in range(args.rounds):
                for name, (src, fork) in ways.items():
                    options = {"instance": str(args.instance.resolve()), "id": args.id, "python": args.python,
                               "n": args.n, "repos": str(args.repos) if args.repos else None,
                               "cache": str(scratch / "cache"), "fork_server": fork}
                    out = run_verdicts(src, options, _VERDICTS)
                    times[name] += out["times"]
                    seen[name] = f"{out['outcome']} ({out['isolation']})"
        finally:
            if base is not None:
                shutil.rmtree(base, ignore_errors=True)
        fresh = statistics.median(times["fork server, fresh state"])
        print(f"instance: {args.instance}{' ' + args.id if args.id else ''}; {args.rounds} rounds x {args.n} "
              f"verdicts{'; baseline ' + args.baseline if args.baseline else ''}")
        print(f"  {'way':28s} {'s/verdict':>10s} {'vs fresh':>9s}  verdict")
        for name in ways:
            median = statistics.median(times[name])
            print(f"  {name:28s} {median:10.3f} {median / fresh:8.2f}x  {seen[name]}")
        if args.wipes:
            wipes = time_wipes(args.wipes)
            new, old = statistics.median(wipes["new"]), statistics.median(wipes["old"])
            print(f"  the wipe alone, inside a sandbox ({args.wipes} each): {new * 1e3:.2f} ms now (every writable "
                  f"mount, IPC objects), {old * 1e3:.2f} ms before (/tmp and TMPDIR): {new / old:.2f}x; "
                  f"{(new - old) / fresh * 100:+.1f}% of a verdict")


if __name__ == "__main__":
    main()
