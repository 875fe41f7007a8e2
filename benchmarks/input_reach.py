"""Reach of the input-based operators: on how many real instances each one yields an admissible mutant.

    python benchmarks/input_reach.py --records ../shared/data/swebench_verified_sympy.jsonl --repos REPOS \
        --ids sympy__sympy-15349 ... [--python PY] [--out DIR] [--workers N]

For each instance, one plain ``coharden mpe RECORDS --id ID --test golden --json`` (default settings: the
SWE-bench spec environment unless ``--python`` names an interpreter; the default budget of 3 mutants per
operator; a fresh store per instance, one instance at a time, with ``--workers`` workers, 1 by default, so
that a measurement on a shared machine takes one core and not the CPU count).
Per operator (``input_specific_shortcut``, ``narrowed_scope``, ``caller_patch``): whether it yielded at least
one *admissible* mutant (it applied and both tests reached PASS/FAIL on it), and where not, why: the pool's
``skipped`` reasons, its diagnosis (``no_revealing_input``) and warnings, or the reasons the mutants it made
were not admissible. Prints a markdown table and the share per operator; the raw results stay in ``--out``.

    python benchmarks/input_reach.py --table results/table.jsonl

reads the reach off the laxity table's dataset instead (``coharden study table``), with no run: per instance
where some system's F->P test was graded (a pool was built), whether some system's MPE there drew an admissible mutant of each operator (its pool holds what the
candidate's *and* the golden test's recordings reveal, so this is at least the golden-only reach), and where
none did, the pool's warning (the stated reason). A table per operator and repository, then one line per
instance.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

OPERATORS = ("input_specific_shortcut", "narrowed_scope", "caller_patch")


def run(records: Path, iid: str, repos: Path, out: Path, python: str | None, timeout: float,
        workers: int = 1) -> dict[str, Any]:
    """The MPE JSON of the golden test against itself on ``iid`` (or {"error": ...})."""
    target = out / f"{iid}.json"
    if target.exists():
        return json.loads(target.read_text())
    cmd = [sys.executable, "-m", "coharden", "mpe", str(records), "--id", iid, "--repos", str(repos),
           "--test", "golden", "--json", "--store", str(out / f"{iid}.sqlite"), "--show", "0",
           "--workers", str(workers),
           *(["--python", python] if python else [])]
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout:.0f} s"}
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        data = {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1][:300]}
    data["_seconds"] = round(time.monotonic() - started, 1)
    target.write_text(json.dumps(data))
    return data


def reach(data: dict[str, Any], operator: str) -> tuple[int, int, str]:
    """(admissible mutants, generated, why none when none) of ``operator`` in one MPE result."""
    if "error" in data:
        return 0, 0, f"error: {data['error']}"
    rows = [m for m in data.get("mutants", []) if m["mutant"]["operator"] == operator]
    admissible = sum(1 for m in rows if m.get("cell") is not None)
    if admissible:
        return admissible, len(rows), ""
    pool = data.get("pool", {})
    why: list[str] = []
    if rows:
        reasons = Counter(m.get("inadmissible_reason") or "?" for m in rows)
        why.append("made but inadmissible: " + ", ".join(f"{k} {n}" for k, n in reasons.items()))
    skipped = pool.get("skipped", {}).get(operator, {})
    if skipped:
        why.append("skipped: " + ", ".join(f"{k} {n}" for k, n in sorted(skipped.items())))
    dropped = pool.get("dropped", {}).get(operator, {})
    if dropped:
        why.append("dropped: " + ", ".join(f"{k} {n}" for k, n in sorted(dropped.items())))
    diagnosis = pool.get("no_revealing_input")
    if diagnosis:
        why.append(f"{diagnosis['reason']}: {diagnosis['detail']}")
    if not data.get("fail_to_pass", True):
        why.append("the golden test is not fail-to-pass here")
    return 0, len(rows), "; ".join(why) or "no candidate and no reason given"


def table_reach(dataset: Path) -> int:
    """The reach of the input-based operators read off the laxity table's rows (see the module docs)."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for line in dataset.read_text().splitlines():
        row = json.loads(line)
        last[(row["instance_id"], row["system"])] = row  # the last row of a pair wins, as in the table's report
    graded: dict[str, list[dict[str, Any]]] = {}
    for (iid, _), row in sorted(last.items()):
        if row.get("status") == "graded" and row.get("pool"):  # a pool was built: the candidate is F->P
            graded.setdefault(iid, []).append(row)
    per_repo: dict[str, Counter[str]] = {}
    lines = []
    for iid, rows in graded.items():
        repo = rows[0]["repo"]
        counts = per_repo.setdefault(repo, Counter())
        counts["instances"] += 1
        cells = []
        for op in OPERATORS:
            yes = any((row.get("frame") or {}).get(op, [0, 0, 0])[2] > 0 for row in rows)
            counts[op] += yes
            why = sorted({w.split(":")[0] for row in rows for w in row.get("warnings") or []
                          if w.startswith(("no bug-revealing input", "the pool lacks", "fix only adds"))})
            cells.append("yes" if yes else "no: " + ("; ".join(why) or "no mutant drawn, no warning"))
        lines.append(f"| {iid} | " + " | ".join(cells) + " |")
    total: Counter[str] = sum(per_repo.values(), Counter())
    print("| repository | instances | " + " | ".join(OPERATORS) + " |")
    print("|---|---|" + "---|" * len(OPERATORS))
    for repo, counts in sorted(per_repo.items()) + [("**all**", total)]:
        print(f"| {repo} | {counts['instances']} | " + " | ".join(
            f"{counts[op]} ({100 * counts[op] / counts['instances']:.0f} %)" for op in OPERATORS) + " |")
    print()
    print("| instance | " + " | ".join(OPERATORS) + " |")
    print("|---|" + "---|" * len(OPERATORS))
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, default=None, help="read the reach off a laxity table dataset "
                        "(table.jsonl) instead of running MPE")
    parser.add_argument("--records", type=Path)
    parser.add_argument("--repos", type=Path)
    parser.add_argument("--ids", nargs="+")
    parser.add_argument("--python", default=None)
    parser.add_argument("--out", type=Path, default=Path("input-reach"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--workers", type=int, default=1, help="MPE workers per instance (default 1)")
    args = parser.parse_args()
    if args.table is not None:
        if not args.table.is_file():
            print(f"skipped: {args.table} is missing")
            return 0
        return table_reach(args.table)
    if not (args.records and args.repos and args.ids):
        parser.error("--records, --repos and --ids are required without --table")
    if not args.records.is_file() or not args.repos.is_dir():
        print(f"skipped: {args.records} or {args.repos} is missing")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    results = {}
    for iid in args.ids:
        results[iid] = run(args.records, iid, args.repos, args.out, args.python, args.timeout,
                            args.workers)
        print(f"{iid}: {results[iid].get('_seconds', '?')} s", file=sys.stderr, flush=True)
    print("| instance | " + " | ".join(OPERATORS) + " | class | warnings |")
    print("|---|" + "---|" * (len(OPERATORS) + 2))
    hits: Counter[str] = Counter()
    for iid, data in results.items():
        cells = []
        for op in OPERATORS:
            admissible, made, why = reach(data, op)
            hits[op] += admissible > 0
            cells.append(f"{admissible}/{made}" if admissible else f"0/{made}: {why}")
        warnings = "; ".join(data.get("warnings", [])) or "-"
        print(f"| {iid} | " + " | ".join(cells) + f" | {data.get('test_class', 'error')} | {warnings} |")
    print()
    for op in OPERATORS:
        print(f"{op}: {hits[op]}/{len(results)} instances with >= 1 admissible mutant")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
