"""sympy's bin/test on a mutant: the wanted tests alone (``-k``) against their whole files, side by side.

    python benchmarks/sympy_select.py --records RECORDS --repos REPOS --ids ID ... [--rounds 2] [--envs DIR]

A mutant's cell needs only the pass / fail of the tests under grading, so coharden runs sympy's ``bin/test`` with
``-k`` and the wanted names there (issue 35); the fail-to-pass checks still run the whole files, as the SWE-bench
harness does. Per instance: the fix and the golden test laid down in a fresh clone at the base commit, then, in
its spec environment (``--envs``, default coharden's cache: ``coharden study envcheck`` builds them), the golden
test's FAIL_TO_PASS tests run by bin/test ``--rounds`` times each way, the order alternating. Printed: the median
seconds of the whole-file and the selected runs, their ratio, and whether the wanted tests' statuses agree. Skips
cleanly (exit 0) when the records, the clone or an instance's environment is missing.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from coharden.config import Settings
from coharden.execution.log_runs import run_with
from coharden.execution.process_options import ProcessOptions
from coharden.execution.runners import SympyRunner
from coharden.patches import touched_files


def prepare(record: dict, repos: Path, into: Path) -> Path | None:
    """A clone at the base commit with the fix and the golden test applied, or None."""
    source = repos / record["repo"].replace("/", "__")
    if not (source / ".git").exists() and not (source / "HEAD").exists():
        return None
    root = into / record["instance_id"]
    subprocess.run(["git", "clone", "-q", "--shared", str(source), str(root)], check=True)
    subprocess.run(["git", "checkout", "-q", record["base_commit"]], cwd=root, check=True)
    for patch in (record["patch"], record["test_patch"]):
        subprocess.run(["git", "apply", "-"], input=patch, text=True, cwd=root, check=True)
    return root


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, required=True, help="SWE-bench records (JSON Lines)")
    parser.add_argument("--repos", type=Path, required=True, help="owner__name clones")
    parser.add_argument("--ids", nargs="+", required=True)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--envs", type=Path, default=Settings().cache_dir / "envs",
                        help="the spec environments (default: coharden's cache)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args()
    if not args.records.is_file():
        print("skipped: no records")
        return 0
    records = {r["instance_id"]: r for r in map(json.loads, args.records.read_text().splitlines()) if r}
    settings = Settings(runner="sympy", timeout=args.timeout, fork_server=False)
    ratios = []
    print(f"{'instance':24} {'whole s':>8} {'selected s':>10} {'ratio':>6}  statuses")
    with tempfile.TemporaryDirectory() as tmp:
        for iid in args.ids:
            record = records.get(iid)
            pythons = sorted(args.envs.glob(f"spec-sympy-{record['version']}-*/venv/bin/python")) if record else []
            root = prepare(record, args.repos, Path(tmp)) if record and pythons else None
            if root is None:
                print(f"{iid:24} skipped: no record, clone or spec environment")
                continue
            runner = SympyRunner()
            files = [f for f in touched_files(record["test_patch"]) if f.endswith(".py")]
            ids = runner.runner_ids(json.loads(record["FAIL_TO_PASS"]) if isinstance(record["FAIL_TO_PASS"], str)
                                    else list(record["FAIL_TO_PASS"]), files)
            seconds: dict[bool, list[float]] = {False: [], True: []}
            statuses: dict[bool, dict] = {}
            for k in range(args.rounds):
                for select in ((False, True) if k % 2 == 0 else (True, False)):
                    verdict = run_with(runner, root, ids, settings,
                                       ProcessOptions(python=str(pythons[0]), select=select))
                    seconds[select].append(verdict.duration)
                    statuses[select] = {i: [s.value for s in v] for i, v in verdict.tests.items()}
            whole, selected = statistics.median(seconds[False]), statistics.median(seconds[True])
            ratios.append(whole / selected if selected else float("nan"))
            same = "same" if statuses[False] == statuses[True] else f"DIFFER {statuses[False]} / {statuses[True]}"
            print(f"{iid:24} {whole:8.1f} {selected:10.1f} {ratios[-1]:6.1f}  {same}")
    if ratios:
        print(f"\nwhole file / selected, median over {len(ratios)} instances: {statistics.median(ratios):.1f}x "
              f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
