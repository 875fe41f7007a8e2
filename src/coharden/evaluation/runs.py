"""Metrics of the loop's round records (``coharden eval --runs``): per-round Resolved, F->P, activity and
cost of each run."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coharden.analysis.rows import CELLS
from coharden.analysis.stats import mean, rate
from coharden.evaluation.grading_jobs import InstanceGrades, fix_row
from coharden.schema.round_record import RoundRecord


def _record_flags(rec: RoundRecord, grades: Mapping[str, InstanceGrades]) -> tuple[bool | None, bool | None]:
    """(resolved, fail_to_pass) of a record: its flags, else its patches' grades, else None (unknown)."""
    resolved = rec.resolved
    if resolved is None and rec.fix_patch is not None:
        grade, _ = fix_row(grades, rec.instance, rec.fix_patch)
        resolved = None if grade is None or grade.infra_failure else grade.resolved
    fail_to_pass = rec.fail_to_pass
    if fail_to_pass is None and rec.test_patch is not None:
        g = grades.get(rec.instance)
        row = g.test_fp(rec.test_patch) if g is not None and not g.error else None
        fail_to_pass = None if row is None or "error" in row else bool(row["fail_to_pass"])
    return resolved, fail_to_pass


def run_section(records: Sequence[RoundRecord], grades: Mapping[str, InstanceGrades],
                known_instances: Iterable[str]) -> dict[str, Any]:
    """Per-round Resolved / F->P / active instances / matrix / cost, cost per instance (see DEFINITIONS)."""
    flags = {(r.instance, r.round): _record_flags(r, grades) for r in records}
    by_instance: dict[str, list[RoundRecord]] = {}
    for rec in records:
        by_instance.setdefault(rec.instance, []).append(rec)
    for recs in by_instance.values():
        recs.sort(key=lambda r: r.round)
    rounds = sorted({r.round for r in records})
    rows: list[dict[str, Any]] = []
    cum_usd = cum_mutant = 0.0
    cum_tokens = 0
    for rnd in rounds:
        active = [r for r in records if r.round == rnd]
        states = {iid: [r for r in recs if r.round <= rnd][-1] for iid, recs in by_instance.items()
                  if recs[0].round <= rnd}
        res = [flags[(iid, s.round)][0] for iid, s in states.items()]
        fp = [flags[(iid, s.round)][1] for iid, s in states.items()]
        usd = sum(r.usd for r in active)
        mutant = sum(r.mutant_usd for r in active)
        tokens = sum(r.tokens for r in active)
        cum_usd += usd
        cum_mutant += mutant
        cum_tokens += tokens
        matrix = dict.fromkeys(CELLS, 0)
        for r in active:
            if r.matrix is not None:
                for cell, v in r.matrix.as_dict().items():
                    matrix[cell] += v
        laxities = [r.laxity for r in active if r.laxity is not None]
        known_res = [x for x in res if x is not None]
        known_fp = [x for x in fp if x is not None]
        rows.append({
            "round": rnd, "active": len(active), "started": len(states),
            "resolved": sum(known_res), "resolved_known": len(known_res), "resolved_unknown": len(res) - len(known_res),
            "resolved_rate": rate(sum(known_res), len(known_res)),
            "fail_to_pass": sum(known_fp), "fail_to_pass_known": len(known_fp),
            "fail_to_pass_unknown": len(fp) - len(known_fp), "fail_to_pass_rate": rate(sum(known_fp), len(known_fp)),
            "decisions": dict(sorted(Counter(r.decision for r in active).items())),
            "matrix": matrix, "admissible": sum(r.admissible_count or 0 for r in active),
            "mean_laxity": mean(laxities),
            "usd": usd, "mutant_usd": mutant, "round_mutant_share": rate(mutant, usd), "tokens": tokens,
            "cumulative_usd": cum_usd, "cumulative_mutant_usd": cum_mutant,
            "mutant_share": rate(cum_mutant, cum_usd), "cumulative_tokens": cum_tokens,
        })
    per_instance: dict[str, Any] = {}
    for iid, recs in sorted(by_instance.items()):
        last = recs[-1]
        resolved, fail_to_pass = flags[(iid, last.round)]
        per_instance[iid] = {
            "rounds": len(recs), "first_round": recs[0].round, "last_round": last.round,
            "final_decision": last.decision, "usd": sum(r.usd for r in recs),
            "mutant_usd": sum(r.mutant_usd for r in recs), "tokens": sum(r.tokens for r in recs),
            "resolved": resolved, "fail_to_pass": fail_to_pass,
        }
    n = len(per_instance)
    total_usd = sum(p["usd"] for p in per_instance.values())
    total_mutant = sum(p["mutant_usd"] for p in per_instance.values())
    total_tokens = sum(p["tokens"] for p in per_instance.values())
    final = rows[-1] if rows else {}
    known = set(known_instances)
    return {
        "rounds": rows,
        "per_instance": per_instance,
        "totals": {
            "instances": n, "records": len(records), "usd": total_usd, "mutant_usd": total_mutant,
            "mutant_share": rate(total_mutant, total_usd), "tokens": total_tokens,
            "usd_per_instance": total_usd / n if n else None, "tokens_per_instance": total_tokens / n if n else None,
            "resolved": final.get("resolved"), "resolved_rate": final.get("resolved_rate"),
            "fail_to_pass": final.get("fail_to_pass"), "fail_to_pass_rate": final.get("fail_to_pass_rate"),
        },
        "unknown_instances": sorted(i for i in by_instance if i not in known),
    }
