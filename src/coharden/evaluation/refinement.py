"""``coharden eval --overfit DIR``: test overfitting before and after reward-guided refinement.

``DIR`` is the output of ``coharden overfit refine`` (:mod:`coharden.overfit.report`): the starting pairs
(``initial_fixes.jsonl`` / ``initial_tests.jsonl``), the refined pairs (``fixes.jsonl`` / ``tests.jsonl``) and
one line per instance with the changed-line coverage the refinement measured (``instances.jsonl``).

Both sides are graded here like any system (Resolved with the golden tests; the fix's own test on base + the
fix), and overfitting is :func:`coharden.evaluation.metrics.overfitting` on each side. The coverage figures
are the ones ``coharden overfit`` measured (real coverage runs recorded in ``instances.jsonl``); eval does not
rerun coverage.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.analysis.stats import mean
from coharden.errors import CoHardenError
from coharden.evaluation.grading_jobs import InstanceGrades, InstanceWork, fix_row
from coharden.evaluation.inputs import PredictionSet, load_prediction_sets
from coharden.evaluation.metrics import paired_delta
from coharden.evaluation.pairs import overfitting
from coharden.schema.instance import Instance

DEFINITION = (
    "--overfit runs (coharden overfit refine): each side's pairs (before = the starting fix and test, after = the "
    "refined ones) are graded like a system whose fixes and tests pair up; overfit and rate as in 'overfitting' "
    "(a fix that passes its own test but is not resolved; rate = overfit / fixes passing their own test). "
    "resolved_change is paired over the instances whose two fixes are both gradable: gained = resolved after but "
    "not before, lost = resolved before but not after, net_gain = gained - lost. coverage: the changed-line "
    "coverage of the test over the fix (executable lines the fix deletes from the old code and adds in the new "
    "code that the test runs, measured by coharden overfit with coverage.py), averaged over the fixes that pass "
    "their own test, split into overfitted and non-overfitted; pairs whose fix changes no executable line have "
    "no coverage and are counted apart (n_without_coverage)."
)


@dataclass
class RefinementRun:
    """One ``coharden overfit refine`` output directory."""

    name: str
    source: str
    before_fixes: PredictionSet
    before_tests: PredictionSet
    after_fixes: PredictionSet
    after_tests: PredictionSet
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)

    def pairs(self) -> list[tuple[PredictionSet, PredictionSet]]:
        return [(self.before_fixes, self.before_tests), (self.after_fixes, self.after_tests)]


def load_refinement(directory: Path, instances: Mapping[str, Instance]) -> RefinementRun:
    """Read an overfit output directory (fails with the missing file named)."""
    needed = ["summary.json", "instances.jsonl", "initial_fixes.jsonl", "initial_tests.jsonl", "fixes.jsonl",
              "tests.jsonl"]
    missing = [n for n in needed if not (directory / n).is_file()]
    if missing:
        raise CoHardenError(f"--overfit {directory}: not a coharden overfit output (missing {', '.join(missing)})")
    summary = json.loads((directory / "summary.json").read_text())
    if summary.get("kind") != "coharden-overfit":
        raise CoHardenError(f"--overfit {directory}: summary.json is not a coharden overfit summary")
    name = str(summary.get("run") or directory.name)
    records: dict[str, dict[str, Any]] = {}
    for number, line in enumerate((directory / "instances.jsonl").read_text().splitlines(), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CoHardenError(f"{directory / 'instances.jsonl'}:{number}: malformed JSON: {exc.msg}") from exc
            records[str(row["instance"])] = row

    def one(file: str, kind: str, label: str) -> PredictionSet:
        sets = load_prediction_sets(str(directory / file), instances, kind, name=label)  # type: ignore[arg-type]
        return sets[0]

    return RefinementRun(name=name, source=str(directory),
                         before_fixes=one("initial_fixes.jsonl", "fix", f"{name}/before"),
                         before_tests=one("initial_tests.jsonl", "test", f"{name}/before"),
                         after_fixes=one("fixes.jsonl", "fix", f"{name}/after"),
                         after_tests=one("tests.jsonl", "test", f"{name}/after"),
                         records=records, summary=summary)


def plan_refinement(work: Mapping[str, InstanceWork], run: RefinementRun) -> None:
    """Add what the refinement section needs: every fix's grade and every pair's own-test verdict."""
    for fixes, tests in run.pairs():
        for iid in fixes.predictions.keys() & tests.predictions.keys():
            if iid in work:
                work[iid].add_fix(fixes.patch(iid))
                work[iid].add_own(fixes.patch(iid), tests.patch(iid))


def _coverage_groups(rows: Mapping[str, Any], records: Mapping[str, Any], side: str) -> dict[str, Any]:
    groups: dict[str, Any] = {}
    for label, wanted in (("overfit", True), ("not_overfit", False)):
        ids = [iid for iid, r in rows.items() if r["passes_own_test"] and r["overfit"] is wanted]
        values = [(records.get(iid) or {}).get(side, {}).get("coverage") for iid in ids]
        known = [v for v in values if v is not None]
        groups[label] = {"n": len(ids), "n_without_coverage": len(ids) - len(known), "mean_coverage": mean(known),
                         "ids": sorted(ids)}
    return groups


def refinement_section(run: RefinementRun, instance_ids: Sequence[str],
                       grades: Mapping[str, InstanceGrades]) -> dict[str, Any]:
    """Overfitting before / after, the paired change in Resolved (net gain) and coverage by overfit group."""
    before = overfitting(run.before_fixes, run.before_tests, instance_ids, grades)
    after = overfitting(run.after_fixes, run.after_tests, instance_ids, grades)
    paired: dict[str, tuple[bool, bool]] = {}
    excluded: dict[str, str] = {}
    for iid in instance_ids:
        if iid not in run.before_fixes.predictions or iid not in run.after_fixes.predictions:
            continue
        b, why_b = fix_row(grades, iid, run.before_fixes.patch(iid))
        a, why_a = fix_row(grades, iid, run.after_fixes.patch(iid))
        if b is None or b.infra_failure:
            excluded[iid] = f"fix before: {why_b or b.infra_failure_reason}"  # type: ignore[union-attr]
        elif a is None or a.infra_failure:
            excluded[iid] = f"fix after: {why_a or a.infra_failure_reason}"  # type: ignore[union-attr]
        else:
            paired[iid] = (b.resolved, a.resolved)
    change = paired_delta(paired.values())
    change.update(net_gain=change["gained"] - change["lost"],
                  gained_ids=sorted(i for i, (b, a) in paired.items() if a and not b),
                  lost_ids=sorted(i for i, (b, a) in paired.items() if b and not a),
                  excluded=dict(sorted(excluded.items())))
    instances: dict[str, Any] = {}
    for iid in instance_ids:
        rec = run.records.get(iid)
        if rec is None:
            continue
        instances[iid] = {
            "stop_reason": rec.get("stop_reason"), "iterations": rec.get("iterations"),
            "changed": rec.get("changed"),
            "before": {**(before["instances"].get(iid) or {}), "coverage": rec.get("initial", {}).get("coverage"),
                       "reward": rec.get("initial", {}).get("reward")},
            "after": {**(after["instances"].get(iid) or {}), "coverage": rec.get("final", {}).get("coverage"),
                      "reward": rec.get("final", {}).get("reward")},
            "resolved_change": (None if iid not in paired else
                                {(False, True): "gained", (True, False): "lost"}.get(paired[iid], "same")),
        }
    return {
        "source": run.source,
        "model": run.summary.get("model"),
        "config": run.summary.get("config"),
        "before": before,
        "after": after,
        "overfit_rate": {"before": before["rate"], "after": after["rate"]},
        "resolved_change": change,
        "coverage": {"before": _coverage_groups(before["instances"], run.records, "initial"),
                     "after": _coverage_groups(after["instances"], run.records, "final")},
        "stop_reasons": run.summary.get("stop_reasons", {}),
        "sides_changed": run.summary.get("sides_changed", {}),
        "instances": instances,
    }
