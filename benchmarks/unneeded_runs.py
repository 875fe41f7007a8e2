"""Runs not made because the other test already makes the mutant inadmissible (issue 35), side by side.

    python benchmarks/unneeded_runs.py --records RECORDS --repos REPOS --ids ID ... [--data DIR] [--out DIR]

Per instance, two modes in one run, their order alternating per instance, each in a store of its own:
* **skip** (coharden's default): a test is not run on a mutant the other test's verdict already makes
  inadmissible (the reference runs first; its stored TIMEOUT answers a later candidate too);
* **check** (``--no-implied``): every run is made.
In each mode: the **first grading** (``coharden mpe RECORDS --id ID --test golden --json``, the reference's runs
included), then each system's test with a prediction in ``--data``'s ``brt_predictions`` graded in the same
store (**further gradings**: the reference's verdicts shared). Printed per instance and mode: wall seconds of the
first and further gradings, test processes made, verdicts not made, mutants with a TIMEOUT; then whether the
classes and matrices agree between the modes, and the ratios check / skip of the walls and runs. On sympy
(``$COHARDEN_SYMPY_PYTHON``) no reach pass implies anything, so the modes differ by the unneeded runs alone;
elsewhere ``check`` also makes the runs the reach pass implies (``imp`` says how many). Needs the spec
environments (or ``--python``); skips cleanly when the records or a repository are missing.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SYSTEM_FILES = {"Otter": "otter_gpt4o_tddbench_verified.jsonl", "Otter++": "otter_plus_gpt4o_tddbench_verified.jsonl",
                "AssertFlip": "assertflip_gpt4o_swtbench_verified.jsonl"}
MODES = ("skip", "check")


def predictions(data: Path | None, iid: str) -> dict[str, str]:
    """Each system's test patch for ``iid`` (systems without one are left out)."""
    found: dict[str, str] = {}
    for system, name in SYSTEM_FILES.items():
        path = data / "brt_predictions" / name if data else None
        if path is None or not path.is_file():
            continue
        for line in path.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            if row.get("instance_id") == iid and str(row.get("model_patch") or "").strip():
                found[system] = row["model_patch"]
    return found


def grade(args: argparse.Namespace, iid: str, test: str, store: Path, mode: str) -> dict[str, Any]:
    """One ``coharden mpe`` grading: its JSON with ``_seconds``, or ``{"error": ...}``."""
    cmd = [sys.executable, "-m", "coharden", "mpe", str(args.records), "--id", iid, "--repos", str(args.repos),
           "--test", test, "--json", "--store", str(store), "--show", "0", "--timeout", str(args.timeout),
           *(["--python", args.python] if args.python else []), *(["--no-implied"] if mode == "check" else [])]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.monotonic() - started
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        return {"error": (proc.stderr.strip().splitlines() or ["no output"])[-1][:300], "_seconds": seconds}
    if not isinstance(data, dict) or "test_class" not in data:
        return {"error": str(data)[:300], "_seconds": seconds}
    data["_seconds"] = seconds
    return data


def tally(result: dict[str, Any]) -> dict[str, Any]:
    runs = result.get("runs") or {}
    mutants = result.get("mutants") or []
    unneeded = sum(int(r.get("not_needed", 0)) for r in runs.values())
    return {"made": sum(int(r.get("made", 0)) for r in runs.values()),
            "implied": sum(int(r.get("implied", 0)) for r in runs.values()), "unneeded": unneeded,
            "timeouts": sum(1 for m in mutants if "TIMEOUT" in ((m.get("candidate") or {}).get("outcome"),
                                                               (m.get("reference") or {}).get("outcome"))),
            "class": result.get("test_class"), "matrix": result.get("matrix_counts"),
            "seconds": float(result.get("_seconds", 0.0)) - float((result.get("timings") or {}).get("cold_start_s", 0))}


def instance(args: argparse.Namespace, iid: str, order: tuple[str, ...], out: Path) -> dict[str, Any]:
    tests = {"golden": "golden"}
    for system, patch in predictions(args.data, iid).items():
        path = out / f"{iid}.{system}.diff"
        path.write_text(patch)
        tests[system] = str(path)
    rows: dict[str, dict[str, dict[str, Any]]] = {}
    for mode in order:
        store = out / f"{iid}.{mode}.sqlite"
        store.unlink(missing_ok=True)
        rows[mode] = {}
        for name, test in tests.items():
            result = grade(args, iid, test, store, mode)
            rows[mode][name] = {"error": result["error"]} if "error" in result else tally(result)
            (out / f"{iid}.{mode}.{name}.json").write_text(json.dumps(result))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=Path, required=True, help="SWE-bench records (JSON Lines)")
    parser.add_argument("--repos", type=Path, default=os.environ.get("COHARDEN_REPOS"), help="owner__name clones")
    parser.add_argument("--data", type=Path, default=os.environ.get("COHARDEN_DATA"),
                        help="the shared data directory (brt_predictions/): the further gradings")
    parser.add_argument("--ids", nargs="+", required=True)
    parser.add_argument("--python", help="interpreter of the tests (default: each instance's spec environment)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per test process (default 120)")
    parser.add_argument("--out", type=Path, help="where the JSON results stay (default: a temporary directory)")
    args = parser.parse_args()
    if not args.records.is_file() or args.repos is None or not args.repos.is_dir():
        print("skipped: --records or --repos missing")
        return 0
    out = args.out or Path(tempfile.mkdtemp(prefix="unneeded-"))
    out.mkdir(parents=True, exist_ok=True)
    totals = {mode: {"first": 0.0, "further": 0.0, "made": 0} for mode in MODES}
    agree = compared = 0
    print(f"{'instance':28} {'mode':6} {'first':>7} {'further':>8} {'made':>5} {'unneeded':>8} {'imp':>4} "
          f"{'tmo':>4}  classes")
    for k, iid in enumerate(args.ids):
        order = MODES if k % 2 == 0 else MODES[::-1]
        rows = instance(args, iid, order, out)
        for mode in MODES:
            graded = rows[mode]
            good = {n: r for n, r in graded.items() if "error" not in r}
            first = good.get("golden", {}).get("seconds", 0.0)
            further = sum(r["seconds"] for n, r in good.items() if n != "golden")
            made = sum(r["made"] for r in good.values())
            totals[mode]["first"] += first
            totals[mode]["further"] += further
            totals[mode]["made"] += made
            classes = ", ".join(f"{n} {r.get('class') or 'error: ' + r.get('error', '')[:60]}"
                                for n, r in graded.items())
            print(f"{iid:28} {mode:6} {first:7.1f} {further:8.1f} {made:5d} "
                  f"{sum(r['unneeded'] for r in good.values()):8d} {sum(r['implied'] for r in good.values()):4d} "
                  f"{sum(r['timeouts'] for r in good.values()):4d}  {classes}")
        for name in rows["skip"]:
            one, other = rows["skip"][name], rows["check"].get(name, {})
            if "error" in one or "error" in other:
                continue
            compared += 1
            agree += (one["class"], one["matrix"]) == (other["class"], other["matrix"])
    print(f"\nclasses and matrices equal, skip vs check: {agree}/{compared} gradings")
    for part in ("first", "further"):
        skip, check = totals["skip"][part], totals["check"][part]
        print(f"{part} gradings, wall check / skip      : {check:8.1f} / {skip:8.1f} s = "
              f"{check / skip if skip else float('nan'):5.2f}x")
    print(f"test processes made, check / skip     : {totals['check']['made']} / {totals['skip']['made']} = "
          f"{totals['check']['made'] / max(totals['skip']['made'], 1):5.2f}x")
    print(f"load average at the end               : {os.getloadavg()[0]:.1f}; results in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
