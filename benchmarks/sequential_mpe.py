"""Sequential MPE against the fixed budget, side by side on the bundled examples (issue 33).

    python benchmarks/sequential_mpe.py [--dir examples] [--only NAME ...] [--per-operator 3] [--max-mutants 45]
                                        [--confidence 0.95] [--seed 0] [--json]

For every F->P candidate of every bundled example (and the golden test against itself), MPE runs twice against
the golden test, with no result store (nothing is served from a cache, so both pay for every mutant):

* **fixed budget**: N mutants per operator, all run (the paper's protocol); its classes by the paper's point
  rule (laxity < tau) and by the interval on the same draw;
* **sequential** (the default of coharden): seeded stratified rounds, stopped once the interval decides, at
  ``--max-mutants`` or when the pool is spent; class by the interval.

Prints one row per graded test (mutants run, classes, laxity and interval) and the ratios: mean mutants run per
graded test, sequential / fixed (goal of issue 33: <= 0.60), and the wall time ratio; plus how many classes
agree. The order of the two runs alternates from test to test so machine load drifts hit both alike.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.instances import MANIFEST_NAMES, load_local, resolve_repo
from coharden.mpe.evaluate import MPERequest, MPEResult, evaluate
from coharden.schema.mpe_config import DEFAULT_MAX_MUTANTS, MPEConfig


def _examples(directory: Path, only: list[str]) -> list[Path]:
    dirs = sorted(d for d in directory.iterdir() if d.is_dir() and any((d / n).is_file() for n in MANIFEST_NAMES))
    return [d for d in dirs if not only or d.name in only]


def _timed(executor: InstanceExecutor, fix: str, candidate: Any, reference: Any,
           config: MPEConfig) -> tuple[MPEResult, float]:
    started = time.monotonic()
    result = evaluate(executor, MPERequest(fix, candidate, reference, config))
    return result, time.monotonic() - started


def _interval_class(result: MPEResult) -> str:
    """The class the interval gives on this result's draw (whatever rule the result itself used)."""
    side = result.estimate().side(result.tau)
    return {"lax": "Lax", "rigorous": "Rigorous", "borderline": "Borderline"}.get(side or "", "Inconclusive")


def measure(directory: Path, only: list[str], fixed: MPEConfig, sequential: MPEConfig) -> list[dict[str, Any]]:
    """One row per F->P candidate (golden included) of every example."""
    rows: list[dict[str, Any]] = []
    settings = Settings(workers=1)
    turn = 0
    for example in _examples(directory, only):
        local = load_local(example, settings.cache_dir)
        inst = local.instance
        repo = resolve_repo(inst, settings.repos_dir)
        with InstanceExecutor(inst, repo, settings, None) as executor:
            reference = executor.golden_test()
            for name, patch, label in [("golden", inst.test_patch, "Rigorous"),
                                       *((c.name, c.patch, c.label) for c in local.candidates)]:
                candidate = reference if name == "golden" else executor.test_patch(patch, name=name)
                runs: dict[str, tuple[MPEResult, float]] = {}
                for which in (("fixed", "sequential") if turn % 2 == 0 else ("sequential", "fixed")):
                    runs[which] = _timed(executor, inst.patch, candidate, reference,
                                         fixed if which == "fixed" else sequential)
                turn += 1
                (fix_result, fix_s), (seq_result, seq_s) = runs["fixed"], runs["sequential"]
                if not fix_result.fail_to_pass:
                    continue
                rows.append({
                    "example": example.name, "candidate": name, "label": label,
                    "pool": sum(r["pool"] for r in seq_result.frame.values()),
                    "fixed_mutants": len(fix_result.mutants), "sequential_mutants": len(seq_result.mutants),
                    "fixed_seconds": fix_s, "sequential_seconds": seq_s,
                    "paper_class": fix_result.test_class.value, "fixed_interval_class": _interval_class(fix_result),
                    "sequential_class": seq_result.test_class.value, "stop": seq_result.stop,
                    "fixed_laxity": fix_result.estimate().text(), "sequential_laxity": seq_result.estimate().text(),
                })
    return rows


def _ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    fixed = sum(r["fixed_mutants"] for r in rows)
    seq = sum(r["sequential_mutants"] for r in rows)
    return {
        "graded_tests": n,
        "mean_mutants_fixed": fixed / n if n else None, "mean_mutants_sequential": seq / n if n else None,
        "mutants_ratio": _ratio(seq, fixed),
        "seconds_ratio": _ratio(sum(r["sequential_seconds"] for r in rows), sum(r["fixed_seconds"] for r in rows)),
        "classes_agree_with_paper": sum(r["sequential_class"] == r["paper_class"] for r in rows),
        "classes_agree_with_label": sum(r["sequential_class"] == r["label"] for r in rows),
        "paper_agrees_with_label": sum(r["paper_class"] == r["label"] for r in rows),
        "borderline": sum(r["sequential_class"] == "Borderline" for r in rows),
        "stops": {s: sum(r["stop"] == s for r in rows) for s in sorted({r["stop"] for r in rows})},
    }


def _fmt(x: float | None, digits: int = 2) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def print_table(rows: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    head = ["example", "candidate", "label", "pool", "fixed n", "seq n", "paper class", "fixed interval",
            "sequential", "stop", "sequential laxity"]
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(x) for x in (r["example"], r["candidate"], r["label"], r["pool"], r["fixed_mutants"],
                                           r["sequential_mutants"], r["paper_class"], r["fixed_interval_class"],
                                           r["sequential_class"], r["stop"], r["sequential_laxity"])))
    n = totals["graded_tests"]
    print(f"\ngraded F->P tests: {n}")
    print(f"mean mutants run per graded test: fixed {_fmt(totals['mean_mutants_fixed'], 1)}, sequential "
          f"{_fmt(totals['mean_mutants_sequential'], 1)}; ratio sequential/fixed {_fmt(totals['mutants_ratio'])} "
          "(goal <= 0.60)")
    print(f"wall time ratio sequential/fixed: {_fmt(totals['seconds_ratio'])}")
    print(f"classes: sequential = paper's point rule on {totals['classes_agree_with_paper']}/{n}; sequential = "
          f"hand label on {totals['classes_agree_with_label']}/{n}; paper = hand label on "
          f"{totals['paper_agrees_with_label']}/{n}; Borderline {totals['borderline']}/{n}; stops {totals['stops']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("examples"))
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--per-operator", type=int, default=3)
    parser.add_argument("--max-mutants", type=int, default=DEFAULT_MAX_MUTANTS)
    parser.add_argument("--confidence", type=float, default=0.95)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    fixed = MPEConfig(paper_classes=True, per_operator=args.per_operator, seed=args.seed,
                      confidence=args.confidence)
    sequential = MPEConfig(max_mutants=args.max_mutants, seed=args.seed, confidence=args.confidence)
    rows = measure(args.dir, args.only, fixed, sequential)
    totals = summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": totals}, indent=2, sort_keys=True))
    else:
        print_table(rows, totals)


if __name__ == "__main__":
    main()
