"""Agreement with the official SWE-bench harness: coharden's fix grades (``coharden eval`` report) against the
harness's ``resolved`` flag and per-test ``tests_status`` stored with the same predictions.

Per test, a harness id counts as agreeing when coharden put it in the same bucket (success / failure) of the
same kind (FAIL_TO_PASS / PASS_TO_PASS); an id the harness's log parser cut at a space is compared with the
base test coharden ran for it. Ids coharden does not report are counted apart, not as agreement.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.execution.testids import runnable_id
from coharden.jsonl import json_lines


@dataclass
class Disagreement:
    instance_id: str
    harness_resolved: bool
    coharden_resolved: bool | None
    outcome: str = ""
    reason: str = ""
    tests: list[str] = field(default_factory=list)  # ids whose bucket differs


@dataclass
class Agreement:
    system: str
    compared: int = 0
    resolved_agree: int = 0
    tests_compared: int = 0
    tests_agree: int = 0
    tests_unreported: int = 0
    not_graded: dict[str, str] = field(default_factory=dict)
    disagreements: list[Disagreement] = field(default_factory=list)
    by_repo: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def resolved_rate(self) -> float | None:
        return self.resolved_agree / self.compared if self.compared else None

    @property
    def tests_rate(self) -> float | None:
        return self.tests_agree / self.tests_compared if self.tests_compared else None


def _buckets(status: dict[str, Any]) -> dict[str, tuple[str, str]]:
    found: dict[str, tuple[str, str]] = {}
    for kind in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        for bucket in ("success", "failure"):
            for test_id in (status.get(kind) or {}).get(bucket, []):
                found[test_id] = (kind, bucket)
    return found


def load_predictions(path: Path) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        raise CoHardenError(f"{path}: predictions file not found")
    rows: dict[str, dict[str, Any]] = {}
    for number, row in json_lines(path):
        if "resolved" not in row:
            raise CoHardenError(f"{path}:{number}: no 'resolved' field (not a graded prediction)")
        rows[row["instance_id"]] = row
    return rows


def compare(report: dict[str, Any], harness: dict[str, dict[str, Any]], system: str | None = None) -> Agreement:
    """Agreement of one fix system of an eval ``report`` with the harness's grades in ``harness``."""
    fixes = report.get("fixes") or {}
    if not fixes:
        raise CoHardenError("the eval report grades no fixes")
    name = system or next(iter(fixes))
    if name not in fixes:
        raise CoHardenError(f"the eval report has no fix system {name!r} (has: {', '.join(fixes)})")
    result = Agreement(system=name)
    errors = {**report.get("instances", {}).get("errors", {}), **report.get("instances", {}).get("fix_errors", {})}
    for iid, ours in fixes[name]["instances"].items():
        theirs = harness.get(iid)
        if theirs is None:
            continue
        if "error" in ours or iid in errors or ours.get("resolved") is None:
            result.not_graded[iid] = str(ours.get("error") or errors.get(iid) or "not graded")[:300]
            continue
        repo = iid.rsplit("-", 1)[0]
        counts = result.by_repo.setdefault(repo, Counter())
        result.compared += 1
        counts["compared"] += 1
        same = bool(ours["resolved"]) == bool(theirs["resolved"])
        result.resolved_agree += same
        counts["agree"] += same
        mine = _buckets(ours.get("tests_status") or {})
        by_name: dict[str, list[str]] = {}
        for node in mine:  # sympy's harness ids are bare names; coharden's are path::name
            by_name.setdefault(node.rsplit("::", 1)[-1], []).append(node)
        differing: list[str] = []
        for harness_id, where in _buckets(theirs.get("tests_status") or {}).items():
            # grades keep the harness's ids; reports made before that keyed a cut id by its base test
            test_id = harness_id if harness_id in mine else runnable_id(harness_id)
            if test_id not in mine and len(by_name.get(harness_id, [])) == 1:
                test_id = by_name[harness_id][0]
            if test_id not in mine:
                result.tests_unreported += 1
                continue
            result.tests_compared += 1
            if mine[test_id] == where:
                result.tests_agree += 1
            else:
                differing.append(test_id)
        if not same or differing:
            result.disagreements.append(Disagreement(iid, bool(theirs["resolved"]), bool(ours["resolved"]),
                                                     str(ours.get("outcome", "")), str(ours.get("reason", ""))[:300],
                                                     differing[:10]))
    result.by_repo = {k: dict(v) for k, v in sorted(result.by_repo.items())}
    return result


def render(result: Agreement) -> str:
    def pct(value: float | None) -> str:
        return "n/a" if value is None else f"{100 * value:.1f} %"

    lines = [f"# Agreement with the SWE-bench harness: {result.system}", "",
             f"- resolved: {result.resolved_agree} / {result.compared} agree ({pct(result.resolved_rate)})",
             f"- per test: {result.tests_agree} / {result.tests_compared} agree ({pct(result.tests_rate)}); "
             f"{result.tests_unreported} harness ids not reported by coharden",
             f"- not graded here: {len(result.not_graded)}", "",
             "| repository | compared | resolved agree |", "| --- | ---: | ---: |"]
    lines += [f"| {repo} | {c.get('compared', 0)} | {c.get('agree', 0)} |" for repo, c in result.by_repo.items()]
    if result.disagreements:
        lines += ["", "## Disagreements", ""]
        for d in result.disagreements:
            lines.append(f"- `{d.instance_id}`: harness resolved={d.harness_resolved}, coharden "
                         f"resolved={d.coharden_resolved} ({d.outcome}); tests differing: "
                         f"{', '.join(d.tests) or 'none'}; {d.reason.splitlines()[0] if d.reason else ''}")
    if result.not_graded:
        lines += ["", "## Not graded", ""]
        lines += [f"- `{iid}`: {why.splitlines()[0] if why else ''}" for iid, why in result.not_graded.items()]
    return "\n".join(lines) + "\n"


def to_json(result: Agreement) -> dict[str, Any]:
    data = asdict(result)
    data.update(resolved_rate=result.resolved_rate, tests_rate=result.tests_rate)
    return data
