"""The numbers of the validity study against real wrong fixes, from its dataset alone
(:mod:`coharden.study.validity`): per test the share of its instance's real wrong fixes it accepts, per class
the tests and the instances where a test accepts one, Fisher's exact test Lax vs Rigorous, Spearman's rank
correlation of laxity with the acceptance share and the AUC of laxity for "accepts a real wrong fix", each
interval a percentile bootstrap over instances (the tests of one instance share its fixes and are resampled
together); the correct alternative fixes each class rejects. Every figure for the dev split, the held-out split
and both. :mod:`coharden.study.validity_report` renders them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from coharden.analysis import stats
from coharden.study.data import GOLDEN
from coharden.study.table_summary import share
from coharden.study.validity import DECIDED, REJECTS

CLASSES = ("Rigorous", "Borderline", "Lax", "Inconclusive")
"""The classes of a F->P test (Inconclusive: no laxity, so no part of the correlations)."""
SPLITS = ("dev", "heldout", "all")
N_BOOT = 2000
SEED = 0


def _by_instance(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    heads = {r["instance_id"]: r for r in rows if r.get("row") == "instance"}
    fixes: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r.get("row") == "fix":
            fixes.setdefault(r["instance_id"], []).append(r)
    return heads, fixes


def _rate(k: int, n: int) -> float | None:
    return k / n if n else None


def per_test(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per graded F->P test of an instance that ran: the wrong fixes it was run on (those the golden
    test rejects; outcomes that decide nothing left out), how many it accepts, the same over the wrong fixes
    some graded test accepts, and the correct alternative fixes it rejects."""
    heads, fixes = _by_instance(rows)
    out: list[dict[str, Any]] = []
    for iid, head in heads.items():
        if head["status"] != "ran":
            continue
        systems = list(head.get("tests") or {})
        wrong = [f for f in fixes.get(iid, []) if f["kind"] == "wrong" and f["status"] == "counted"]
        correct = [f for f in fixes.get(iid, []) if f["kind"] == "correct" and f["status"] == "ran"]
        some = [f for f in wrong if any(f["outcomes"].get(s) == "PASS" for s in systems)]
        for system in systems:
            test = head["tests"][system]
            on_wrong = [f["outcomes"].get(system) for f in wrong]
            admissible = [v for v in on_wrong if v in DECIDED]
            accepted = sum(v == "PASS" for v in admissible)
            on_some = [v for f in some if (v := f["outcomes"].get(system)) in DECIDED]
            on_correct = [v for f in correct if (v := f["outcomes"].get(system)) in DECIDED]
            out.append({
                "instance_id": iid, "repo": head["repo"], "split": head["split"], "system": system,
                "class": test.get("class"), "laxity": test.get("laxity"), "interval": test.get("interval"),
                "wrong": len(admissible), "accepted": accepted, "share": _rate(accepted, len(admissible)),
                "inadmissible": len(on_wrong) - len(admissible),
                "some_wrong": len(on_some), "some_accepted": sum(v == "PASS" for v in on_some),
                "some_share": _rate(sum(v == "PASS" for v in on_some), len(on_some)),
                "accepts": accepted > 0 if admissible else None,
                "correct": len(on_correct), "correct_rejected": sum(v in REJECTS for v in on_correct),
                "collection_rejects": sum(v == "COLLECTION_ERROR" for v in admissible),
            })
    return sorted(out, key=lambda t: (t["split"], t["instance_id"], t["system"]))


def _interval(clusters: list[list[dict[str, Any]]], statistic: Any) -> list[float] | None:
    found = stats.cluster_bootstrap(clusters, statistic, n_boot=N_BOOT, seed=SEED)
    return list(found) if found else None


def _spearman(tests: list[dict[str, Any]], field: str) -> float | None:
    pairs = [(t["laxity"], t[field]) for t in tests if t[field] is not None]
    return stats.spearman([p[0] for p in pairs], [p[1] for p in pairs]) if len(pairs) >= 2 else None


def _auc(tests: list[dict[str, Any]]) -> float | None:
    return stats.auc([t["laxity"] for t in tests], [bool(t["accepts"]) for t in tests]) if tests else None


def figures(tests: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every figure over ``tests`` (rows of :func:`per_test`, one split's)."""
    usable = [t for t in tests if t["accepts"] is not None]
    per_class: dict[str, Any] = {}
    votes: dict[str, list[bool]] = {}
    for cls in CLASSES:
        mine = [t for t in usable if t["class"] == cls]
        instances = sorted({t["instance_id"] for t in mine})
        votes[cls] = [any(t["accepts"] for t in mine if t["instance_id"] == i) for i in instances]
        some = [t for t in mine if t["some_share"] is not None]
        with_correct = [t for t in tests if t["class"] == cls and t["correct"]]
        per_class[cls] = {
            "tests": share(sum(bool(t["accepts"]) for t in mine), len(mine)),
            "instances": share(sum(votes[cls]), len(votes[cls])),
            "fixes": {"hits": sum(t["accepted"] for t in mine), "total": sum(t["wrong"] for t in mine),
                      "rate": _rate(sum(t["accepted"] for t in mine), sum(t["wrong"] for t in mine))},
            "fixes_some": {"hits": sum(t["some_accepted"] for t in some), "total": sum(t["some_wrong"] for t in some),
                           "rate": _rate(sum(t["some_accepted"] for t in some), sum(t["some_wrong"] for t in some))},
            "mean_share": stats.mean([t["share"] for t in mine]),
            "mean_share_some": stats.mean([t["some_share"] for t in some]),
            "correct_tests": share(sum(t["correct_rejected"] > 0 for t in with_correct), len(with_correct)),
            "correct_pairs": {"hits": sum(t["correct_rejected"] for t in with_correct),
                              "total": sum(t["correct"] for t in with_correct)},
        }

    def fisher(lax: dict[str, Any], rig: dict[str, Any]) -> float | None:
        if not lax["total"] or not rig["total"]:
            return None
        return stats.fisher_exact(lax["hits"], lax["total"] - lax["hits"], rig["hits"], rig["total"] - rig["hits"])

    ranked = [t for t in usable if t["laxity"] is not None and t["class"] in stats.DECIDED_OR_BORDERLINE]
    by_instance: dict[str, list[dict[str, Any]]] = {}
    for t in ranked:
        by_instance.setdefault(t["instance_id"], []).append(t)
    clusters = list(by_instance.values())
    positives = sum(bool(t["accepts"]) for t in ranked)
    return {
        "tests": len(usable), "instances": len({t["instance_id"] for t in usable}),
        "wrong_fixes": _wrong_fix_count(usable),
        "per_class": per_class,
        "fisher_tests": fisher(per_class["Lax"]["tests"], per_class["Rigorous"]["tests"]),
        "fisher_instances": fisher(per_class["Lax"]["instances"], per_class["Rigorous"]["instances"]),
        "ranked": {"tests": len(ranked), "instances": len(clusters), "accepting": positives},
        "spearman": {"rho": _spearman(ranked, "share"),
                     "interval": _interval(clusters, lambda ts: _spearman(ts, "share"))},
        "spearman_some": {"rho": _spearman(ranked, "some_share"),
                          "interval": _interval(clusters, lambda ts: _spearman(ts, "some_share")),
                          "tests": sum(t["some_share"] is not None for t in ranked)},
        "auc": {"auc": _auc(ranked), "interval": _interval(clusters, _auc), "positives": positives,
                "negatives": len(ranked) - positives},
        "bootstrap": {"draws": N_BOOT, "seed": SEED, "level": 0.95, "unit": "instance"},
    }


def _wrong_fix_count(tests: Sequence[dict[str, Any]]) -> int:
    """The distinct wrong fixes the tests were run on (the largest count of one instance's tests)."""
    most: dict[str, int] = {}
    for t in tests:
        most[t["instance_id"]] = max(most.get(t["instance_id"], 0), t["wrong"] + t["inadmissible"])
    return sum(most.values())


def coverage(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Instances by status (all and per repository and split) and fixes by status, with the lists of the wrong
    fixes the golden test accepts, the fixes that do not apply and the correct fixes the golden test rejects."""
    heads, fixes = _by_instance(rows)
    per_repo: dict[str, Counter[str]] = {}
    for head in heads.values():
        per_repo.setdefault(head["repo"], Counter())[head["status"]] += 1
    all_fixes = [f for fs in fixes.values() for f in fs]
    fix_status = Counter(f"{f['kind']} {f['status']}" for f in all_fixes)

    def listed(kind: str, status: str) -> list[dict[str, Any]]:
        return [{"instance_id": f["instance_id"], "fix_id": f["fix_id"], "reason": f.get("reason")}
                for f in all_fixes if f["kind"] == kind and f["status"] == status]

    golden_rejects_correct = [{"instance_id": f["instance_id"], "fix_id": f["fix_id"],
                               "reason": f.get("reasons", {}).get(GOLDEN)}
                              for f in all_fixes if f["kind"] == "correct" and f["status"] == "ran"
                              and f["outcomes"].get(GOLDEN) in REJECTS]
    outcomes = Counter(f"{f['kind']} {outcome}" for f in all_fixes if f["status"] in ("counted", "ran")
                       for name, outcome in f["outcomes"].items() if name != GOLDEN)
    inadmissible = Counter(f"{name} {outcome}" for f in all_fixes if f["status"] in ("counted", "ran")
                           for name, outcome in f["outcomes"].items() if outcome not in DECIDED)
    return {
        "instances": dict(Counter(h["status"] for h in heads.values())),
        "instances_by_split": {s: dict(Counter(h["status"] for h in heads.values() if h["split"] == s))
                               for s in ("dev", "heldout")},
        "per_repo": {repo: dict(c) for repo, c in sorted(per_repo.items())},
        "fixes": dict(sorted(fix_status.items())),
        "golden_accepts": listed("wrong", "golden_accepts"),
        "does_not_apply": listed("wrong", "does_not_apply") + listed("correct", "does_not_apply"),
        "golden_inadmissible": listed("wrong", "golden_inadmissible"),
        "errors": listed("wrong", "error") + listed("correct", "error"),
        "golden_rejects_correct": golden_rejects_correct,
        "inadmissible_outcomes": dict(sorted(inadmissible.items())),
        "test_outcomes": dict(sorted(outcomes.items())),
        "timeouts": {str(t): sorted(h["instance_id"] for h in heads.values() if h.get("timeout") == t)
                     for t in sorted({h["timeout"] for h in heads.values() if h.get("timeout") is not None})},
        "skipped": [{"instance_id": h["instance_id"], "status": h["status"], "reason": h.get("reason")}
                    for h in heads.values() if h["status"] != "ran"],
    }


def summarize_validity(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Everything the report says, from the dataset's rows."""
    tests = per_test(rows)
    run = next((r for r in rows if r.get("row") == "run"), {})
    return {
        "rows": len(rows),
        "run": {k: run.get(k) for k in ("table", "unit", "environment", "timeout", "revision")},
        "fix_counts": run.get("fix_counts") or {},
        "notes": run.get("notes") or [],
        "coverage": coverage(rows),
        "splits": {split: figures([t for t in tests if split == "all" or t["split"] == split]) for split in SPLITS},
        "tests": tests,
    }
