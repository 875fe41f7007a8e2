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
where some system's F->P test was graded (a pool was built), whether some system's MPE there drew an admissible
mutant of each operator (its pool holds what the candidate's *and* the golden test's recordings reveal, so this
is at least the golden-only reach), and where none did, why: the operator's own ``skipped`` reasons, the pool's
diagnosis of the recorded inputs (``no_revealing_input``), candidates the sequential draw left in the pool, or
for rows written before the dataset kept the first two, the pool's warning, or their reasons completed from the
table's store with ``--store`` (read-only). An instance is in the issue's
denominator ("a test calls a function the fix changes") unless no operator yields there and every pool's
diagnosis is ``not_called``, ``no_function_touched`` or ``adds_function``. A table per operator and repository,
then one line per instance.
"""

from __future__ import annotations

import argparse
import json
import signal
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


NOT_A_TARGET = ("not_called", "no_function_touched", "adds_function")
"""Diagnoses that put an instance outside issue 39's denominator: no test calls a function the fix changes."""


def _from_store(store: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(instance, system) -> the pool summary of its latest MPE step in the table's store: rows written before
    the dataset kept ``skipped`` and ``no_revealing_input`` are completed from it (read-only)."""
    import sqlite3

    pools: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        for data, created in db.execute("SELECT data, created FROM records WHERE kind = 'study.mpe'"):
            step = json.loads(data)
            pair = (str(step.get("instance_id")), str(step.get("system")))
            if step.get("pool") and created >= pools.get(pair, (0.0, {}))[0]:
                pools[pair] = (created, step["pool"])
    return {pair: pool for pair, (_, pool) in pools.items()}


def _why_none(rows: list[dict[str, Any]], op: str) -> str:
    """Why no graded MPE of an instance drew an admissible mutant of ``op``: the operator's own skip reasons, the
    pool's diagnosis of the recorded inputs (``no_revealing_input``; for caller_patch only when it has no reason
    of its own), or candidates that were drawn but inadmissible or left in the pool by the sequential draw."""
    why: set[str] = set()
    for row in rows:
        own = set((row.get("skipped") or {}).get(op, {})) - {"no_revealing_input"}
        why |= own
        diagnosis = (row.get("no_revealing_input") or {}).get("reason")
        if diagnosis and not (op == "caller_patch" and own):
            why.add(diagnosis)
        pool, drawn, _ = (row.get("frame") or {}).get(op, [0, 0, 0])
        if pool and not drawn:
            why.add(f"{pool} in the pool, none drawn before the class was decided")
        elif drawn:
            why.add(f"{drawn} drawn, none admissible")
    if not why:  # a row written before rows kept their reasons: its warning, if any
        why = {w.split(":")[0] for row in rows for w in row.get("warnings") or []
               if w.startswith(("no bug-revealing input", "fix only adds"))}
    return ", ".join(sorted(why)) or "no reason in the row (written before rows kept one; give --store)"


def table_reach(dataset: Path, store: Path | None = None) -> int:
    """The reach of the input-based operators read off the laxity table's rows (see the module docs)."""
    last: dict[tuple[str, str], dict[str, Any]] = {}
    for line in dataset.read_text().splitlines():
        row = json.loads(line)
        last[(row["instance_id"], row["system"])] = row  # the last row of a pair wins, as in the table's report
    pools = _from_store(store) if store is not None and store.is_file() else {}
    graded: dict[str, list[dict[str, Any]]] = {}
    for pair, row in sorted(last.items()):
        if row.get("status") == "graded" and row.get("pool"):  # a pool was built: the candidate is F->P
            if "skipped" not in row and pair in pools:
                row = {**row, "skipped": pools[pair].get("skipped") or {},
                       "no_revealing_input": pools[pair].get("no_revealing_input")}
            graded.setdefault(pair[0], []).append(row)
    per_repo: dict[str, Counter[str]] = {}
    lines = []
    for iid, rows in graded.items():
        counts = per_repo.setdefault(rows[0]["repo"], Counter())
        yes = {op: any((row.get("frame") or {}).get(op, [0, 0, 0])[2] > 0 for row in rows) for op in OPERATORS}
        reasons = {(row.get("no_revealing_input") or {}).get("reason") for row in rows}
        # outside the goal's denominator: no operator yields and every pool says no test calls a changed function
        target = any(yes.values()) or not reasons <= set(NOT_A_TARGET)
        counts["instances"] += 1
        counts["targets"] += target
        for op in OPERATORS:
            counts[op] += yes[op]
            counts[f"{op} target"] += yes[op] and target
        cells = ["yes" if yes[op] else "no: " + _why_none(rows, op) for op in OPERATORS]
        lines.append(f"| {iid} | {'yes' if target else 'no'} | " + " | ".join(cells) + " |")
    total: Counter[str] = sum(per_repo.values(), Counter())

    def share(n: int, of: int) -> str:
        return f"{n} ({100 * n / of:.0f} %)" if of else "-"

    print("| repository | instances | " + " | ".join(OPERATORS) + " | of them, a test calls a changed function | "
          + " | ".join(OPERATORS) + " |")
    print("|---|---|" + "---|" * (2 * len(OPERATORS) + 1))
    for repo, counts in sorted(per_repo.items()) + [("**all**", total)]:
        print(f"| {repo} | {counts['instances']} | "
              + " | ".join(share(counts[op], counts["instances"]) for op in OPERATORS)
              + f" | {counts['targets']} | "
              + " | ".join(share(counts[f"{op} target"], counts["targets"]) for op in OPERATORS) + " |")
    print()
    print("| instance | a test calls a changed function | " + " | ".join(OPERATORS) + " |")
    print("|---|---|" + "---|" * len(OPERATORS))
    print("\n".join(lines))
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, default=None, help="read the reach off a laxity table dataset "
                        "(table.jsonl) instead of running MPE")
    parser.add_argument("--store", type=Path, default=None, help="with --table: the table's store, to complete "
                        "rows written before the dataset kept the operators' skip reasons (read-only)")
    parser.add_argument("--records", type=Path)
    parser.add_argument("--repos", type=Path)
    parser.add_argument("--ids", nargs="+")
    parser.add_argument("--python", default=None)
    parser.add_argument("--out", type=Path, default=Path("input-reach"))
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--workers", type=int, default=1, help="MPE workers per instance (default 1)")
    args = parser.parse_args()
    # stopped with SIGTERM: subprocess.run kills the running `coharden mpe` as it unwinds (its sandboxes die with
    # it); before, a stopped benchmark left that child running
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.table is not None:
        if not args.table.is_file():
            print(f"skipped: {args.table} is missing")
            return 0
        return table_reach(args.table, args.store)
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
