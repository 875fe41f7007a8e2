"""The cost of issue 50's pool against the pool before it, side by side on the same graded tests.

    python benchmarks/plausible_pool.py [--dir examples] [--only NAME ...] [--json]
    python benchmarks/plausible_pool.py --records RECORDS.jsonl --repos DIR --ids ID ... [--python PY]
                                        [--predictions PREDS.jsonl]

Two arms, each with a result store of its own per instance (so a later candidate of an instance reuses the
reference's runs of an earlier one, as a batch does, and nothing is shared between the arms):

* **old**: the eight operators before issue 50, every admissible mutant counted, no PASS_TO_PASS runs, cap 40;
* **new**: the defaults (eleven operators, plausibility, behaviours, cap 120).

Prints one row per graded F->P test: pool size, mutants run, admissible / plausible admissible mutants,
behaviours, implausible mutants, the class of each arm, wall seconds, and the runs made per role (candidate,
reference, PASS_TO_PASS); then the totals: mutants run and wall time new / old, and the reference runs served
from the store. The arms alternate in order from test to test so machine load drifts hit both alike. Bundled
examples by default (offline); SWE-bench records with ``--records`` (their golden test is the candidate, plus
the predictions of ``--predictions`` for those instances).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import MANIFEST_NAMES, load_local, resolve_repo
from coharden.mpe.evaluate import MPEError, MPERequest, MPEResult, evaluate
from coharden.schema.instance import Instance
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator

OLD_OPERATORS = [Operator(name) for name in ("incomplete_fix", "behavior_substitution", "symptom_suppression",
                                             "input_specific_shortcut", "token_revert", "widened_scope",
                                             "narrowed_scope", "caller_patch")]
ARMS = {"old": MPEConfig(operators=OLD_OPERATORS, plausibility=False, behaviours=False, max_mutants=40),
        "new": MPEConfig()}


def _graded(directory: Path | None, only: list[str], records: Path | None, ids: list[str],
            predictions: Path | None, settings: Settings) -> list[tuple[Instance, Path, list[tuple[str, str]]]]:
    """(instance, repository, [(candidate name, test patch)]) for every instance to measure."""
    out: list[tuple[Instance, Path, list[tuple[str, str]]]] = []
    if records is not None:
        wanted = set(ids)
        preds: dict[str, list[tuple[str, str]]] = {}
        for line in (predictions.read_text().splitlines() if predictions else []):
            if line.strip():
                row = json.loads(line)
                preds.setdefault(row["instance_id"], []).append((row["model_name_or_path"], row["model_patch"]))
        for line in records.read_text().splitlines():
            if not line.strip():
                continue
            inst = Instance.model_validate(json.loads(line))
            if wanted and inst.instance_id not in wanted:
                continue
            out.append((inst, resolve_repo(inst, settings.repos_dir),
                        [("golden", inst.test_patch), *preds.get(inst.instance_id, [])]))
        return out
    assert directory is not None
    for example in sorted(d for d in directory.iterdir() if d.is_dir() and any((d / n).is_file()
                                                                             for n in MANIFEST_NAMES)):
        if only and example.name not in only:
            continue
        local = load_local(example, settings.cache_dir)
        inst = local.instance
        out.append((inst, resolve_repo(inst, settings.repos_dir),
                    [("golden", inst.test_patch), *((c.name, c.patch) for c in local.candidates)]))
    return out


def _row(arm: str, result: MPEResult, seconds: float) -> dict[str, Any]:
    return {f"{arm}_mutants": len(result.mutants), f"{arm}_admissible": result.matrix.admissible,
            f"{arm}_behaviours": result.behaviour_matrix.admissible if result.counted == "behaviours" else None,
            f"{arm}_implausible": sum(1 for r in result.mutants if r.inadmissible_reason == "implausible"),
            f"{arm}_pool": sum(row["pool"] for row in result.frame.values()),
            f"{arm}_class": result.test_class.value, f"{arm}_laxity": result.estimate().text(),
            f"{arm}_seconds": seconds, f"{arm}_runs": result.runs}


def measure(graded: list[tuple[Instance, Path, list[tuple[str, str]]]], settings: Settings) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    turn = 0
    with tempfile.TemporaryDirectory(prefix="coharden-bench-") as scratch:
        for inst, repo, candidates in graded:
            stores = {arm: Store(Path(scratch) / f"{inst.instance_id}-{arm}.sqlite") for arm in ARMS}
            for name, patch in candidates:
                row: dict[str, Any] = {"instance": inst.instance_id, "candidate": name}
                order = list(ARMS) if turn % 2 == 0 else list(reversed(ARMS))
                turn += 1
                for arm in order:
                    with InstanceExecutor(inst, repo, settings, stores[arm]) as executor:
                        reference = executor.golden_test()
                        try:
                            candidate = reference if name == "golden" else executor.test_patch(patch, name=name)
                            started = time.monotonic()
                            result = evaluate(executor, MPERequest(inst.patch, candidate, reference, ARMS[arm]))
                        except (MPEError, ValueError) as exc:
                            row[f"{arm}_error"] = f"{type(exc).__name__}: {exc}"
                            continue
                        row.update(_row(arm, result, time.monotonic() - started))
                        row["fail_to_pass"] = result.fail_to_pass
                if row.get("fail_to_pass"):
                    rows.append(row)
    return rows


def _sum(rows: list[dict[str, Any]], key: str) -> float:
    return sum(r.get(key) or 0 for r in rows)


def _median(values: list[float]) -> float | None:
    values = sorted(values)
    if not values:
        return None
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    ratio = (lambda a, b: a / b if b else None)  # noqa: E731 - one line
    served = sum((r.get("new_runs") or {}).get("reference", {}).get("cached", 0) for r in rows)
    made = sum((r.get("new_runs") or {}).get("reference", {}).get("made", 0) for r in rows)
    return {"graded_tests": len(rows),
            "mutants_ratio": ratio(_sum(rows, "new_mutants"), _sum(rows, "old_mutants")),
            "seconds_ratio": ratio(_sum(rows, "new_seconds"), _sum(rows, "old_seconds")),
            "median_new_plausible_admissible": _median([r["new_admissible"] for r in rows if "new_admissible" in r]),
            "median_new_behaviours": _median([r["new_behaviours"] for r in rows
                                              if r.get("new_behaviours") is not None]),
            "median_old_admissible": _median([r["old_admissible"] for r in rows if "old_admissible" in r]),
            "new_reference_runs_made": made, "new_reference_runs_from_store": served,
            "borderline_old": sum(r.get("old_class") == "Borderline" for r in rows),
            "borderline_new": sum(r.get("new_class") == "Borderline" for r in rows)}


def print_table(rows: list[dict[str, Any]], totals: dict[str, Any]) -> None:
    head = ["instance", "candidate", "old pool/run/adm", "new pool/run/adm/beh/impl", "old class", "new class",
            "old s", "new s"]
    print(" | ".join(head))
    for r in rows:
        print(" | ".join(str(x) for x in (
            r["instance"], r["candidate"], f"{r.get('old_pool')}/{r.get('old_mutants')}/{r.get('old_admissible')}",
            f"{r.get('new_pool')}/{r.get('new_mutants')}/{r.get('new_admissible')}/{r.get('new_behaviours')}/"
            f"{r.get('new_implausible')}", r.get("old_class"), r.get("new_class"),
            f"{r.get('old_seconds', 0):.1f}", f"{r.get('new_seconds', 0):.1f}")))
    fmt = (lambda x: "-" if x is None else f"{x:.2f}")  # noqa: E731 - one line
    print(f"\ngraded F->P tests: {totals['graded_tests']}")
    print(f"mutants run new/old: {fmt(totals['mutants_ratio'])}; wall time new/old: {fmt(totals['seconds_ratio'])}")
    print(f"median per test: old admissible {totals['median_old_admissible']}, new plausible admissible "
          f"{totals['median_new_plausible_admissible']} (goal >= 40), new behaviours "
          f"{totals['median_new_behaviours']} (goal >= 17)")
    print(f"Borderline: old {totals['borderline_old']}, new {totals['borderline_new']}; the new arm's reference runs: "
          f"{totals['new_reference_runs_made']} made, {totals['new_reference_runs_from_store']} from the store")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path("examples"))
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--records", type=Path)
    parser.add_argument("--ids", nargs="*", default=[])
    parser.add_argument("--predictions", type=Path)
    parser.add_argument("--repos", type=Path, help="where SWE-bench repositories are cloned (owner__name)")
    parser.add_argument("--python", help="the interpreter running the records' tests")
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    extra: dict[str, Any] = {"repos_dir": args.repos} if args.repos else {}
    if args.python:
        extra["python"] = args.python
    settings = Settings(workers=1, timeout=args.timeout, **extra)
    graded = _graded(None if args.records else args.dir, args.only, args.records, args.ids, args.predictions,
                     settings)
    rows = measure(graded, settings)
    totals = summary(rows)
    if args.json:
        print(json.dumps({"rows": rows, "summary": totals}, indent=2, sort_keys=True, default=str))
    else:
        print_table(rows, totals)


if __name__ == "__main__":
    main()
