"""Pool-building time before and after the four new operators, side by side in one run, per instance.

    python benchmarks/pool_build.py RECORDS.jsonl --repos DIR --python PY [--id ID ...] [--per-operator 3]

For each instance the golden fix's mechanical pool is built twice on the same executor, with the golden test
feeding the input recorder and no result store (nothing served from a cache), in alternating order:

* before: the four original operators (incomplete_fix, behavior_substitution, symptom_suppression,
  input_specific_shortcut): two recorder runs (fixed and buggy code) plus generation;
* after: every registered operator (adds token_revert, widened_scope, narrowed_scope, caller_patch; the
  recorder also notes calling frames).

Prints per instance the seconds and admitted mutants of each, then median and max of each and the median of
the per-instance ratio after/before. Pool building = recorder runs + generation + admission, not mutant runs.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.instances import load_records, resolve_repo
from coharden.mpe.evaluate import check_fix
from coharden.mutation.pool import PoolRequest, build_pool
from coharden.schema.mutant import MECHANICAL_DEFAULT, TARGETED_OPERATORS

BEFORE = list(TARGETED_OPERATORS)
AFTER = list(MECHANICAL_DEFAULT)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("records", type=Path)
    parser.add_argument("--repos", type=Path, required=True)
    parser.add_argument("--python", default=None)
    parser.add_argument("--id", dest="ids", action="append", default=[])
    parser.add_argument("--per-operator", type=int, default=3)
    parser.add_argument("--preload", default="mpmath")
    parser.add_argument("--timeout", type=float, default=300)
    args = parser.parse_args()
    records = [r for r in load_records(args.records) if not args.ids or r.instance_id in args.ids]
    if not records:
        parser.error(f"{args.records}: no instance matches --id")
    settings = Settings(timeout=args.timeout, python=args.python or Settings().python, workers=1,
                        preload=[p for p in args.preload.split(",") if p], repos_dir=args.repos)
    rows = []
    for index, inst in enumerate(records):
        with InstanceExecutor(inst, resolve_repo(inst, args.repos), settings, None) as ex:
            fix = check_fix(inst.patch, settings.test_patterns)
            golden = ex.golden_test()
            seconds: dict[str, float] = {}
            sizes: dict[str, int] = {}
            order = [("before", BEFORE), ("after", AFTER)]
            for name, ops in order if index % 2 == 0 else order[::-1]:
                mark = time.monotonic()
                pool = build_pool(ex, PoolRequest(fix, [golden], operators=ops, per_operator=args.per_operator, seed=0))
                seconds[name] = time.monotonic() - mark
                sizes[name] = len(pool.mutants)
        rows.append((inst.instance_id, seconds, sizes))
        print(f"{inst.instance_id}: before {seconds['before']:.1f} s ({sizes['before']} mutants), "
              f"after {seconds['after']:.1f} s ({sizes['after']} mutants), "
              f"ratio {seconds['after'] / seconds['before']:.2f}", flush=True)
    for name in ("before", "after"):
        times = [s[name] for _, s, _ in rows]
        print(f"{name}: median {statistics.median(times):.1f} s, max {max(times):.1f} s over {len(times)} instances")
    ratios = [s["after"] / s["before"] for _, s, _ in rows if s["before"]]
    print(f"after / before: median ratio {statistics.median(ratios):.2f}, max {max(ratios):.2f}")


if __name__ == "__main__":
    main()
