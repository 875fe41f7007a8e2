"""A check's whole report kept in the store, so that checking an unchanged commit again answers at once, without
a checkout, a fork server or a test process.

The key names everything that decides the report: the commits (the checked commit and its parent or merge base;
their ids name their trees), the fix and the test as read from them, the test-file patterns and the tests that
judge plausibility, the reference (its name and text), the test environment (the interpreter's path and the
digest of it and every package installed in it, pytest and its plugins among them,
:class:`coharden.check.interpreter.Interpreter`; the sandbox this machine gives), the settings that reach a
test run (limits, pytest arguments, network, ...), the MPE config's
:meth:`~coharden.schema.mpe_config.MPEConfig.cache_key` and coharden itself (its version and the content of
its package, :func:`coharden_digest`: a development install whose code changed never answers with a report an
older code made). Anything changed: another key, and the check runs (its
verdicts still come from the store where their own keys match). The report's presentation (``--format``,
``--fail-on``, ``--output``) is not in the key: one stored report renders in every format.

A report is not stored when one of its runs hit a harness error (the verdict store never keeps those either, so
the next check tries them again)."""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

from coharden.check.commit import CommitChange, Reference
from coharden.check.report import CheckReport, Survivor
from coharden.config import SECTIONS, Settings
from coharden.execution.store import Store, content_key, text_key
from coharden.schema.estimate import Estimate
from coharden.schema.instance import Instance
from coharden.schema.matrix import TestClass
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.verdict import Outcome, Verdict

KIND = "check-report"
VERSION = 1
"""Of the stored form below: a change to it stores under new keys."""

#: Settings that cannot change a verdict or the report: where things are kept, how many run at once, and the
#: fields the key names otherwise (the interpreter by the environment id and digest, MPE by its cache key).
_NOT_DECIDING = frozenset({"store", "cache_dir", "repos_dir", "workers", "test_lanes", "agent_readable",
                           "swebench_specs", "python", "mpe", "llm", "engine", "loop", "agent",
                           "build", "study"})


def _deciding(settings: Settings) -> dict[str, object]:
    """The settings that can change a check's report: every field but those of :data:`_NOT_DECIDING`, looked
    for among the top-level names and inside each section."""
    deciding: dict[str, object] = {}
    for name, value in settings.model_dump(mode="json").items():
        if name in _NOT_DECIDING:
            continue
        deciding[name] = ({k: v for k, v in value.items() if k not in _NOT_DECIDING} if isinstance(value, dict)
                          and name in SECTIONS else value)
    return deciding


def report_key(change: CommitChange, instance: Instance, settings: Settings, config: MPEConfig, *,
               reference: Reference | None) -> str:
    """The store key of the report of checking ``change`` (see the module docstring). ``reference``: the
    ``--reference`` test (None: the candidate is its own). ``settings`` hold the interpreter's digest
    (``env_fingerprint``) and the import roots of the checked code (``test_env``)."""
    if not settings.environment.env_fingerprint:
        raise ValueError("report_key: settings without the environment's fingerprint")
    deciding = _deciding(settings)
    return content_key(KIND, VERSION, coharden_digest(), change.base, change.head, text_key(change.fix),
                       text_key(change.test), sorted(instance.PASS_TO_PASS), reference.name if reference else "",
                       text_key(reference.text if reference else ""),
                       settings.environment.python, sandbox_level(settings), deciding, config.cache_key())


@functools.cache
def coharden_digest() -> str:
    """coharden's version and the content of every file of its package (sources and data)."""
    import coharden

    root = Path(coharden.__file__).parent
    digest = hashlib.sha256(coharden.__version__.encode())
    for path in sorted(root.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
            digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def sandbox_level(settings: Settings) -> str:
    """The isolation a test process gets on this machine under ``settings`` (``bwrap``, ``netns``, ...), as the
    executor's environment id names it: a store shared by machines with and without bubblewrap keeps their
    reports apart (where ``--allow-weak-sandbox`` lets a weaker one run)."""
    from coharden.execution.confinement import run_confinement
    from coharden.execution.sandbox import isolation_level

    return isolation_level(settings.sandbox.network, run_confinement(settings.sandbox))


def storable(report: CheckReport) -> bool:
    """No run of the report hit a harness error (a retry may answer otherwise)."""
    harness = Outcome.HARNESS_ERROR.value
    return (report.buggy.outcome is not Outcome.HARNESS_ERROR and report.fixed.outcome is not Outcome.HARNESS_ERROR
            and harness not in report.inadmissible.values())


def save(store: Store, key: str, report: CheckReport) -> None:
    """Keep ``report`` (all of it but the commit as read and the time it took: those are the next check's own)."""
    store.put_record(KIND, key, {
        "reference": report.reference, "test_ids": report.test_ids,
        "buggy": report.buggy.model_dump(mode="json"), "fixed": report.fixed.model_dump(mode="json"),
        "class": report.test_class.value, "problem": report.problem,
        "estimate": report.estimate.model_dump(mode="json") if report.estimate else None, "tau": report.tau,
        "survivors": [vars(s) for s in report.survivors], "killed": report.killed,
        "inadmissible": report.inadmissible, "matrix": report.matrix, "runs": report.runs,
        "warnings": report.warnings, "counted": report.counted, "seconds": report.seconds,
    })


def load(store: Store, key: str, change: CommitChange) -> CheckReport | None:
    """The stored report under ``key`` for ``change`` as read now, marked as from the store; None when there is
    none (or it cannot be read back: then the check runs)."""
    data: Any = store.get_record(KIND, key)
    if not isinstance(data, dict):
        return None
    try:
        return CheckReport(
            change=change, reference=data["reference"], test_ids=list(data["test_ids"]),
            buggy=Verdict.model_validate(data["buggy"]), fixed=Verdict.model_validate(data["fixed"]),
            test_class=TestClass(data["class"]), problem=data["problem"],
            estimate=Estimate.model_validate(data["estimate"]) if data["estimate"] else None, tau=data["tau"],
            survivors=[Survivor(**s) for s in data["survivors"]], killed=list(data["killed"]),
            inadmissible=dict(data["inadmissible"]), matrix=dict(data["matrix"]), runs=dict(data["runs"]),
            warnings=list(data["warnings"]), counted=data["counted"], stored_seconds=float(data["seconds"]))
    except (KeyError, TypeError, ValueError):
        return None
