"""A recording served by a zygote against one that collects, side by side in one run (issue 35, "cheaper runs").

    python benchmarks/recording_overhead.py [INSTANCE] [--id ID] [--repos DIR] [-n 3]

INSTANCE is an instance directory (instance.yaml) or a SWE-bench records file (also taken from
``$COHARDEN_RUN_OVERHEAD_INSTANCE``); a record runs in its spec environment, built once; without one the bundled
example ``examples/printer_brackets`` is used. The recording is MPE's: the recorder's instrumented run of the golden
test, tracing the functions the fix changes, on the buggy and on the fixed code. Two executors, ``collect_once`` on
and off, each first run the golden test once as a plain run (on, that run makes the zygote: what MPE's F->P check
does before its recordings), then record in interleaved rounds so drifting machine load hits both alike. On, a
recording is a fork of that zygote with the recorder loaded into it; off, it imports the project and collects.

Prints the median wall time of a recording per mode and code, their ratio, how the server ran the recordings, and
whether both modes recorded the same calls (they must).
"""

from __future__ import annotations

import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.mutation.context import record_targets
from coharden.mutation.pool import fix_context
from coharden.mutation.recording import _record_one
from coharden.patches import split_patch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run_overhead.py beside this file, however it is loaded
from run_overhead import instance_parser, open_instance  # noqa: E402 - the same instance arguments

MODES = (("zygote", True), ("collect", False))


def calls(records: list[dict[str, Any]] | str) -> list[tuple]:
    """What a recording saw, comparable across modes: (function, input, kind, outcome) of its calls."""
    if isinstance(records, str):
        return [("failed", records)]
    return sorted((r.get("qualname"), r.get("key"), r["kind"], r.get("value_enc")) for r in records
                  if r["kind"] in ("return", "raise", "caller"))


def main(argv: list[str] | None = None) -> int:
    args = instance_parser(__doc__, rounds=3).parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="coharden-bench-"))
    try:
        instance, repo, settings = open_instance(args, scratch)
        if settings.runner != "pytest":
            print(f"skipped: {instance.instance_id} runs with the {settings.runner} runner (no fork server)")
            return 0
        fix, _ = split_patch(instance.patch, settings.test_patterns)
        executors = {name: InstanceExecutor(instance, repo, settings.with_overrides(collect_once=on), store=None)
                     for name, on in MODES}
        try:
            first = executors["zygote"]
            test = first.golden_test()
            targets = record_targets(fix_context(first, fix))
            if not targets:
                print(f"skipped: the fix of {instance.instance_id} changes no function to record")
                return 0
            for ex in executors.values():
                ex.verdicts(fix, [test])  # the F->P check's plain run (makes the zygote when collecting once)
            walls: dict[tuple[str, str], list[float]] = {}
            seen: dict[tuple[str, str], list[tuple]] = {}
            for round_ in range(args.n):
                for code, patch in (("fixed", fix), ("buggy", "")):
                    for name, ex in (executors.items() if round_ % 2 == 0 else reversed(executors.items())):
                        start = time.perf_counter()
                        records = _record_one(ex, source_patch=patch, test=test, targets=targets, probes=None)
                        walls.setdefault((name, code), []).append(time.perf_counter() - start)
                        seen[(name, code)] = calls(records)
            logs = {name: (ex.site.current.collect_log if ex.site.current else []) for name, ex in executors.items()}
        finally:
            for ex in executors.values():
                ex.close()
        print(f"instance {instance.instance_id}: {len(targets)} functions recorded, {len(test.ids)} test ids, "
              f"n={args.n}, load average {os.getloadavg()[0]:.1f}")
        print(f"{'code':8} {'zygote':>10} {'collect':>10} {'collect / zygote':>17}")
        for code in ("fixed", "buggy"):
            once, each = (statistics.median(walls[(name, code)]) for name, _ in MODES)
            print(f"{code:8} {once * 1000:7.0f} ms {each * 1000:7.0f} ms {each / once:16.2f}x")
        for name, log in logs.items():
            print(f"server ({name}): {'; '.join(log[-2 * args.n:])}")
        same = all(seen[("zygote", code)] == seen[("collect", code)] for code in ("fixed", "buggy"))
        print("the same calls recorded both ways:", "yes" if same else "NO")
        return 0 if same else 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
