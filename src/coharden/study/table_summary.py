"""The numbers of the laxity table, computed from the dataset's rows alone
(:mod:`coharden.study.table`): coverage, per system and per repository shares with their intervals, laxity
histograms, agreement with AssertFlip's published SWT-bench report, the Lax share of AssertFlip's F->P tests
beside the paper's, and a scaling estimate. :mod:`coharden.study.table_report` renders them."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from coharden.analysis import stats
from coharden.schema.estimate import clopper_pearson
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study.summary import LAXITY_EDGES

PLOT_EDGES = tuple(i / 10 for i in range(11))
"""The bins of the laxity figure: ten of equal width."""

#: the paper's Table 7: AssertFlip's F->P tests called Lax (LLM mutants, point rule at tau 0.202)
PAPER_ASSERTFLIP_LAX = (121, 198)
F2P_CLASSES = ("Rigorous", "Borderline", "Lax", "Inconclusive")
"""The classes of a F->P test; their shares are of F->P tests."""
TEST_CLASSES = ("Misaligned", "NotReproducing", "Invalid")
"""The classes of a test that is not F->P (or does not run); their shares are of evaluated tests."""
EVALUATED = ("graded", "invalid")
"""Statuses of a prediction that was tried on its instance here (F->P or not, applies or not)."""
DONE = frozenset({"graded", "invalid", "needs_network", "no_prediction", "golden_not_f2p", "error"})
"""Statuses of a row no rerun changes (under the same configuration)."""
#: an instance's state: the first of these its rows have (all rows of an instance share the environment ones)
INSTANCE_ORDER = ("unreachable", "unchecked", "env_unverified", "env_error", "pending", "harness_error",
                  "golden_not_f2p", "error")
SCALING_CORES = (2, 16, 64, 256)


def share(hits: int, total: int, confidence: float = 0.95) -> dict[str, Any]:
    """``hits`` of ``total`` with the rate and its exact (Clopper-Pearson) interval."""
    return {"hits": hits, "total": total, "rate": hits / total if total else None,
            "interval": list(clopper_pearson(hits, total, confidence)) if total else None}


def instance_state(rows: Sequence[dict[str, Any]]) -> str:
    """``done`` when every row of the instance is final and ran (or needed no run: ``no_prediction`` after a
    verified golden test), else the first problem of :data:`INSTANCE_ORDER` among its rows."""
    statuses = {r["status"] for r in rows}
    for state in INSTANCE_ORDER:
        if state in statuses:
            return state
    return "done"


def _by_instance(rows: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        out.setdefault(r["instance_id"], []).append(r)
    return out


def coverage(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Instances of the table by state, in all and per repository and benchmark: how many are reachable, in the
    environment check, verified, run to the end."""
    instances = _by_instance(rows)
    states = {iid: instance_state(rs) for iid, rs in instances.items()}

    def count(ids: Iterable[str]) -> dict[str, Any]:
        ids = list(ids)
        c = Counter(states[i] for i in ids)
        reachable = len(ids) - c["unreachable"]
        checked = reachable - c["unchecked"]
        verified = checked - c["env_unverified"]
        return {"instances": len(ids), "reachable": reachable, "checked": checked, "verified": verified,
                "done": c["done"] + c["golden_not_f2p"] + c["error"], "golden_not_f2p": c["golden_not_f2p"],
                "pending": c["pending"], "env_error": c["env_error"], "harness_error": c["harness_error"],
                "error": c["error"]}

    repos = sorted({rs[0]["repo"] for rs in instances.values()})
    benchmarks = sorted({r["benchmark"] for r in rows})
    return {
        "all": count(instances),
        "per_repo": {repo: count(i for i, rs in instances.items() if rs[0]["repo"] == repo) for repo in repos},
        "per_benchmark": {b: count({r["instance_id"] for r in rows if r["benchmark"] == b}) for b in benchmarks},
        "states": dict(Counter(states.values())),
    }


def classes_of(rows: Sequence[dict[str, Any]], confidence: float = 0.95) -> dict[str, Any]:
    """F->P rate and class shares of ``rows`` (one system, or one repository's rows of a system)."""
    evaluated = [r for r in rows if r["status"] in EVALUATED]
    f2p = [r for r in evaluated if r["status"] == "graded" and r.get("fail_to_pass")]
    classes = Counter(r.get("class") for r in evaluated)
    out: dict[str, Any] = {
        "rows": len(rows), "predictions": sum(1 for r in rows if r.get("has_prediction")),
        "evaluated": len(evaluated), "fail_to_pass": share(len(f2p), len(evaluated), confidence),
        "classes": {c: classes.get(c, 0) for c in (*F2P_CLASSES, *TEST_CLASSES)},
        "shares": {c: share(classes.get(c, 0), len(f2p) if c in F2P_CLASSES else len(evaluated), confidence)
                   for c in (*F2P_CLASSES, *TEST_CLASSES)},
        "invalid_kinds": dict(Counter(r.get("invalid_kind", "other") for r in evaluated
                                      if r.get("class") == "Invalid")),
        "not_evaluated": dict(Counter(r["status"] for r in rows if r.get("has_prediction")
                                      and r["status"] not in EVALUATED)),
    }
    laxities = [r for r in f2p if r.get("laxity") is not None]
    out["laxity_median"] = stats.median(float(r["laxity"]) for r in laxities)
    out["laxity_histogram"] = {c: stats.histogram([float(r["laxity"]) for r in laxities if r.get("class") == c],
                                                  LAXITY_EDGES) for c in F2P_CLASSES[:3]}
    # the figure's bins: even tenths (the table's edges put tau on an edge, so their widths differ and bar heights
    # of unequal widths mislead; tau is a line on the figure)
    out["laxity_plot_histogram"] = {c: stats.histogram([float(r["laxity"]) for r in laxities
                                                        if r.get("class") == c], PLOT_EDGES)
                                    for c in F2P_CLASSES[:3]}
    out["admissible_median"] = stats.median(int(r.get("admissible") or 0) for r in f2p)
    out["drawn_median"] = stats.median(int(r.get("drawn") or 0) for r in f2p)
    return out


def assertflip_agreement(rows: Sequence[dict[str, Any]], system: str = "AssertFlip") -> dict[str, Any]:
    """coharden's F->P vs the published SWT-bench report, per instance, on the instances both graded."""
    mine = [r for r in rows if r["system"] == system and r.get("published_fail_to_pass") is not None]
    compared = [r for r in mine if r["status"] in EVALUATED]
    pairs = [(bool(r["status"] == "graded" and r.get("fail_to_pass")), bool(r["published_fail_to_pass"]))
             for r in compared]
    agree = sum(1 for ours, theirs in pairs if ours == theirs)
    def version(r: dict[str, Any]) -> tuple[str, str]:
        return r["repo"], str(r.get("version"))

    # what the published run resolved per repository version, to tell a pattern of that run from one test
    of_version = Counter(version(r) for r in mine)
    resolved = Counter(version(r) for r in mine if r["published_fail_to_pass"])

    def why(r: dict[str, Any], ours: bool) -> str:
        reason = r.get("reason") or f"buggy {r.get('buggy')}, fixed {r.get('fixed')}"
        if ours and not resolved[version(r)]:
            reason += (f"; the published report resolves none of its {of_version[version(r)]} "
                       f"{' '.join(version(r))} instances")
        return reason

    return {
        "published": len(mine), "compared": len(compared), "agree": share(agree, len(compared)),
        "confusion": stats.confusion(pairs),
        "disagreements": [{"instance_id": r["instance_id"], "ours": r.get("class") or r["status"],
                           "theirs": "F->P" if r["published_fail_to_pass"] else "not F->P",
                           "reason": why(r, ours)}
                          for r, (ours, theirs) in zip(compared, pairs, strict=True) if ours != theirs],
        "not_compared": dict(Counter(r["status"] for r in mine if r["status"] not in EVALUATED)),
    }


def assertflip_lax(rows: Sequence[dict[str, Any]], system: str = "AssertFlip") -> dict[str, Any]:
    """The Lax share of AssertFlip's F->P tests (interval classes; and the paper's point rule, laxity >= tau),
    on every F->P test here and on those the published report also calls F->P, beside the paper's 121/198."""
    def shares(chosen: list[dict[str, Any]]) -> dict[str, Any]:
        n = len(chosen)
        tau = chosen[0]["config"].get("tau", PAPER_TAU) if chosen else PAPER_TAU
        return {"n": n, "lax": share(sum(1 for r in chosen if r.get("class") == "Lax"), n),
                "lax_or_borderline": share(sum(1 for r in chosen if r.get("class") in ("Lax", "Borderline")), n),
                "point_rule": share(sum(1 for r in chosen if r.get("laxity") is not None and r["laxity"] >= tau),
                                    sum(1 for r in chosen if r.get("laxity") is not None)),
                "tau": tau}

    f2p = [r for r in rows if r["system"] == system and r["status"] == "graded" and r.get("fail_to_pass")]
    return {"here": shares(f2p), "published_f2p": shares([r for r in f2p if r.get("published_fail_to_pass")]),
            "paper": share(*PAPER_ASSERTFLIP_LAX)}


def smallest_deciding_pool(tau: float, confidence: float = 0.95) -> int:
    """How many admissible units a test must reject, all of them, before its interval lies below ``tau``: the
    smallest pool that can call any test Rigorous (17 at the paper's tau 0.202 and 95 %)."""
    n = 1
    while clopper_pearson(0, n, confidence)[1] >= tau:
        n += 1
    return n


def pool_figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    """What the mutant pool gave the F->P tests (every system): plausible admissible mutants, distinct
    behaviours and implausible mutants per test (medians and ranges), and the Borderline share with why each
    Borderline test stayed undecided (``pool_too_small``, ``cap``, ...). None without a graded F->P test."""
    f2p = [r for r in rows if r["status"] == "graded" and r.get("fail_to_pass")]
    if not f2p:
        return None
    tau = f2p[0]["config"].get("tau", PAPER_TAU)

    def spread(field: str) -> dict[str, Any] | None:  # None: no row measured it (rows of an older pool)
        values = sorted(int(r[field] or 0) for r in f2p if field in r)
        return {"median": stats.median(values), "min": values[0], "max": values[-1]} if values else None

    borderline = [r for r in f2p if r.get("class") == "Borderline"]
    return {"tests": len(f2p), "instances": len({r["instance_id"] for r in f2p}),
            "admissible": spread("admissible"), "behaviours": spread("behaviours"),
            "implausible": spread("implausible"), "pool": spread("pool"),
            "plausibility_measured": sum(1 for r in f2p if (r.get("plausibility") or {}).get("measured")),
            "counted": dict(Counter(str(r.get("counted") or "mutants") for r in f2p)),
            "borderline": share(len(borderline), len(f2p)),
            "undecided": dict(Counter(str(r.get("undecided") or "straddles tau") for r in borderline)),
            "deciding_pool": smallest_deciding_pool(tau), "tau": tau}


def scaling(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The cost of the whole table on paper: (instances x systems) pairs x the median cost of one pair, plus one
    golden check per instance, over a number of cores; beside what the dataset's rows measured."""
    def cost(r: dict[str, Any]) -> float:  # core-seconds: the step's wall time x the MPE workers it had
        return float(r["seconds"]) * int(r["config"].get("workers") or 1)

    evaluated = [r for r in rows if r["status"] in EVALUATED and r.get("seconds") is not None]
    pair_costs = [cost(r) for r in evaluated]
    # the median of the pairs MPE ran (an Invalid test or one that is not F->P costs next to nothing): the
    # estimate errs high where many predictions are not F->P
    graded = [cost(r) for r in evaluated if r["status"] == "graded" and r.get("fail_to_pass")]
    verify = {r["instance_id"]: float(r["verify_seconds"]) for r in rows if r.get("verify_seconds") is not None}
    runnable = [r for r in rows if r.get("has_prediction") and r["status"] not in ("unreachable", "env_unverified")]
    instances = {r["instance_id"] for r in runnable}
    pair_median, verify_median = stats.median(graded or pair_costs), stats.median(verify.values())
    total = None
    if pair_median is not None:
        total = len(runnable) * pair_median + len(instances) * (verify_median or 0.0)
    measured = sum(pair_costs) + sum(verify.values())
    return {
        "pairs": len(runnable), "instances": len(instances), "pair_median_core_seconds": pair_median,
        "verify_median_seconds": verify_median, "estimate_core_seconds": total,
        "hours_on": {c: total / c / 3600 for c in SCALING_CORES} if total is not None else {},
        "cores_for_one_hour": total / 3600 if total is not None else None,
        "measured_pairs": len(pair_costs), "measured_core_seconds": measured,
        "all_pairs": sum(1 for r in rows if r.get("has_prediction")),
    }


def summarize_table(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Every number of the table's report, from the dataset's current rows."""
    from coharden.study.table_data import TABLE_SYSTEMS

    present = {r["system"] for r in rows}
    systems = [s for s in TABLE_SYSTEMS if s in present] + sorted(present - set(TABLE_SYSTEMS))
    repos = sorted({r["repo"] for r in rows})
    configs: dict[str, dict[str, Any]] = {}
    for r in rows:
        configs.setdefault(r["config"].get("key", "?"), {"config": r["config"], "rows": 0})["rows"] += 1
    return {
        "rows": len(rows), "statuses": dict(Counter(r["status"] for r in rows)),
        "systems": {s: {"benchmark": next(r["benchmark"] for r in rows if r["system"] == s),
                        **classes_of([r for r in rows if r["system"] == s])} for s in systems},
        "per_repo": {repo: {s: classes_of(mine) for s in systems
                            if (mine := [r for r in rows if r["repo"] == repo and r["system"] == s])}
                     for repo in repos},
        "coverage": coverage(rows),
        "assertflip": {"agreement": assertflip_agreement(rows), "lax": assertflip_lax(rows)}
        if any(r["system"] == "AssertFlip" for r in rows) else None,
        "scaling": scaling(rows),
        "pool": pool_figures(rows),
        "configs": configs,
        "versions": dict(Counter(f"{r['coharden'].get('version')} ({r['coharden'].get('revision') or '?'})"
                                 for r in rows)),
    }
