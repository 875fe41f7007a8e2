"""Smoke-test a built environment: collect the repository's tests, run a seeded sample, and judge only
environment failures.

An environment failure is something the environment, not the code, is to blame for: a test module that does
not collect, an import that fails (``ModuleNotFoundError``, ``ImportError``), a missing fixture (a missing
pytest plugin), missing package metadata, a missing executable, pytest refusing its own configuration (an
option of a plugin that is not installed), a hang. An assertion failure (or any other exception raised by
test code) says nothing about the environment and does not count.

Runs go through coharden's own machinery (:func:`~coharden.execution.pytest_runner.run_pytest` with the
environment's interpreter) in a throwaway checkout of the commit, exactly as verdicts are later made.
"""

from __future__ import annotations

import dataclasses
import os
import random
import re
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.build import BuildResult
from coharden.environment.mockenv import MockServices, loopback_only_settings
from coharden.environment.plan import EnvPlan, EnvTarget
from coharden.execution.process_options import ProcessOptions
from coharden.execution.pytest_results import Case, PytestRun
from coharden.execution.pytest_runner import run_pytest
from coharden.execution.workspace import Workspace
from coharden.schema.verdict import TestStatus

# (pattern over a failure's text, kind); the first that matches names the kind
_ENV_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"ModuleNotFoundError: No module named '([^']+)'"), "missing_dependency"),
    (re.compile(r"\b(PackageNotFoundError|DistributionNotFound)\b"), "missing_dependency"),
    (re.compile(r"fixture '([^']+)' not found"), "missing_fixture"),
    (re.compile(r"\bImportError\b"), "import_error"),
    (re.compile(r"FileNotFoundError: \[Errno 2\] No such file or directory: '([^'/]+)'$", re.MULTILINE),
     "missing_executable"),
    (re.compile(r"command not found"), "missing_executable"),
)


class EnvFailure(BaseModel):
    """One failure the environment is to blame for."""

    where: str
    kind: str
    detail: str


class SmokeReport(BaseModel):
    ok: bool
    python: str
    seed: int
    collected: int = 0
    sampled: list[str] = Field(default_factory=list)
    passed: int = 0
    test_failures: list[str] = Field(default_factory=list, description="Failures that do not count (code, "
                                     "not environment).")
    env_failures: list[EnvFailure] = Field(default_factory=list)
    unreported: list[str] = Field(default_factory=list)
    duration: float = 0.0
    reason: str = ""
    notes: list[str] = Field(default_factory=list)
    output_tail: str = ""

    def error_text(self, limit: int = 4000) -> str:
        """What went wrong, for a person or a refinement prompt."""
        lines = [self.reason] + [f"{f.kind} in {f.where}: {f.detail}" for f in self.env_failures[:15]]
        text = "\n".join(line for line in lines if line)
        if self.output_tail:
            text += "\n--- pytest output (tail) ---\n" + self.output_tail
        return text[-limit:]


def _classify(text: str) -> tuple[str, str] | None:
    for pattern, kind in _ENV_PATTERNS:
        match = pattern.search(text)
        if match:
            line = next((ln[1:].strip() for ln in text.splitlines()[::-1] if ln.startswith("E ")), match.group(0))
            return kind, line[:300]
    return None


def _case_text(case: Case) -> str:
    return f"{case.message}\n{case.details}"


def _collected_ids(output: str) -> list[str]:
    ids = []
    for line in output.splitlines():
        line = line.strip()
        if "::" in line and not line.startswith(("ERROR", "FAILED", "E ", "=", "_")) and " " not in line.split("::")[0]:
            ids.append(line)
    return list(dict.fromkeys(ids))


def _collection_failures(run: PytestRun) -> list[EnvFailure]:
    failures = []
    for case in run.collection_errors():
        found = _classify(_case_text(case))
        kind, detail = found if found else ("collection_error", case.summary()[:300])
        if not found and "SyntaxError" in case.details:
            kind = "syntax_error"  # often a Python version the code does not support
        failures.append(EnvFailure(where=case.name or "collection", kind=kind, detail=detail))
    if not failures:  # older pytest or no JUnit file: read the text report
        for match in re.finditer(r"_+ ERROR collecting (\S+) _+\n(.*?)(?=\n_+ |\n=+ )", run.output, re.DOTALL):
            found = _classify(match.group(2))
            kind, detail = found if found else ("collection_error", match.group(2).strip().splitlines()[-1][:300])
            failures.append(EnvFailure(where=match.group(1), kind=kind, detail=detail))
    return failures


def _test_env(plan: EnvPlan, mock_env: dict[str, str]) -> dict[str, str]:
    env = {**plan.env, **mock_env}
    if "PYTHONPATH" in plan.env and "PYTHONPATH" in mock_env:
        env["PYTHONPATH"] = os.pathsep.join([mock_env["PYTHONPATH"], plan.env["PYTHONPATH"]])
    return env


@dataclass(frozen=True)
class SmokeSample:
    """Which existing tests a smoke test runs: ``size`` of those collected, drawn with ``seed``."""

    size: int
    seed: int


def smoke_sample(settings: Settings) -> SmokeSample:
    """The smoke test's sample as the ``build`` section says, the seed by default the MPE's."""
    build = settings.build
    return SmokeSample(build.smoke_sample, settings.mpe.seed if build.smoke_seed is None else build.smoke_seed)


def smoke_test(target: EnvTarget, build: BuildResult, settings: Settings, *, sample: SmokeSample | None = None,
               mock: bool | None = None) -> SmokeReport:
    """Collect the tests of the target's repository at its commit with the built environment, run ``sample`` of
    them (default: the settings' :func:`smoke_sample`), and report the environment failures. ``mock`` (default:
    the plan's ``mock_services``) serves the provider variables from a local mock server for the duration."""
    plan = target.plan
    sample = smoke_sample(settings) if sample is None else sample
    started = time.monotonic()
    report = SmokeReport(ok=False, python=build.python, seed=sample.seed)
    if not build.ok:
        report.reason = f"the environment did not build: {build.error}"
        return report
    use_mock = plan.mock_services if mock is None else mock
    run_settings = build.settings(settings)
    image = run_settings.sandbox.docker_image if build.backend == "docker" else None
    if use_mock and image is not None:
        # the container has no network, so it cannot reach a mock on the host; the image bakes in plan.env
        report.notes.append("mock services are not available inside the Docker container (no network)")
        use_mock = False
    if use_mock:
        run_settings = loopback_only_settings(run_settings)
    services = MockServices() if use_mock else None
    try:
        if services is not None:
            services.__enter__()
        options = ProcessOptions(extra_args=tuple(plan.test_args),
                                 env=_test_env(plan, services.env if services else {}), image=image)
        with Workspace(target.repo, target.commit) as ws:
            ids = _collect(ws.root, plan, run_settings, options, report)
            if ids:
                report.sampled = sorted(random.Random(sample.seed).sample(sorted(ids), min(sample.size, len(ids))))
                _run_sample(ws.root, run_settings, options, report)
    finally:
        if services is not None:
            services.__exit__(None, None, None)
    report.duration = round(time.monotonic() - started, 3)
    return report


def _collect(root: Path, plan: EnvPlan, settings: Settings, options: ProcessOptions, report: SmokeReport) -> list[str]:
    """The test ids collected under the plan's test paths; none when the sample is not to run (collection timed
    out, pytest could not start, nothing was collected: ``report`` says which)."""
    collect = run_pytest(root, list(plan.test_paths), settings,
                         dataclasses.replace(options, extra_args=("--collect-only", *options.extra_args)))
    report.output_tail = "\n".join(collect.output.strip().splitlines()[-30:])
    if collect.timed_out:
        report.env_failures.append(EnvFailure(where="collection", kind="timeout", detail="collection timed out"))
        report.reason = "test collection timed out"
        return []
    ids = _collected_ids(collect.output)
    report.collected = len(ids)
    report.env_failures += _collection_failures(collect)
    if collect.returncode == 4 or (collect.returncode not in (0, 1, 2, 5)):
        found = _classify(collect.output)
        kind, detail = found if found else ("pytest_usage", _last_error_line(collect.output))
        report.env_failures.append(EnvFailure(where="pytest", kind=kind, detail=detail))
        report.reason = f"pytest could not start (exit code {collect.returncode}): {detail}"
        return []
    if not ids:
        report.reason = report.reason or ("no tests were collected" + (
            f" ({len(report.env_failures)} modules failed to collect)" if report.env_failures else ""))
    return ids


def _run_sample(root: Path, settings: Settings, options: ProcessOptions, report: SmokeReport) -> None:
    """Run the sampled tests (``report.sampled``) and judge their failures."""
    chosen = report.sampled
    run = run_pytest(root, chosen, settings, options)
    report.output_tail = "\n".join(run.output.strip().splitlines()[-30:])
    if run.timed_out:
        report.env_failures.append(EnvFailure(where="sample", kind="timeout",
                                              detail=f"the sample did not finish in {settings.sandbox.timeout:.0f}s"))
    elif not run.junit_ok:
        found = _classify(run.output)
        kind, detail = found if found else ("harness", f"pytest produced no results (exit code {run.returncode})")
        report.env_failures.append(EnvFailure(where="sample", kind=kind, detail=detail))
    else:
        _judge_cases(chosen, run, report)
    n = len(report.env_failures)
    report.ok = n == 0
    report.reason = "ok" if report.ok else f"{n} environment failure{'s' if n != 1 else ''}: " + "; ".join(
        f"{f.kind} ({f.where})" for f in report.env_failures[:5])


def _judge_cases(ids: list[str], run: PytestRun, report: SmokeReport) -> None:
    from coharden.execution.pytest_results import case_matches

    report.env_failures += [f for f in _collection_failures(run) if f.where not in
                            {e.where for e in report.env_failures}]
    for node in ids:
        cases = [c for c in run.cases if case_matches(node, c)]
        if not cases:
            report.unreported.append(node)
            continue
        for case in cases:
            if case.status in (TestStatus.PASSED, TestStatus.XFAIL, TestStatus.SKIPPED):
                report.passed += case.status is TestStatus.PASSED
                continue
            found = _classify(_case_text(case))
            if found:
                report.env_failures.append(EnvFailure(where=node, kind=found[0], detail=found[1]))
            else:
                report.test_failures.append(f"{node}: {case.summary()[:200]}")
    if report.unreported and len(report.unreported) == len(ids):
        report.env_failures.append(EnvFailure(where="sample", kind="harness",
                                              detail="no sampled test was reported by pytest"))


def _last_error_line(output: str) -> str:
    """The most telling line of a failed pytest start: argparse's ``error:`` line, else the last ``E`` line,
    else the last ``ERROR`` line, else the last line."""
    lines = [ln.strip() for ln in output.splitlines() if ln.strip()]
    for wanted in (lambda ln: ": error:" in ln or ln.startswith("error:"), lambda ln: ln.startswith("E "),
                   lambda ln: ln.startswith("ERROR")):
        found = [ln for ln in lines if wanted(ln)]
        if found:
            return found[-1][:300]
    return (lines or ["(no output)"])[-1][:300]
