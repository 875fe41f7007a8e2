"""Reproduction tests written by a model from an issue: each reply's test module is checked with
:func:`coharden.environment.reproduce.check_reproduction` (fails on the buggy commit, passes on the patched one,
imports and runs the real code, mocks nothing under test); a failed check is shown to the model in the next try."""

from __future__ import annotations

import dataclasses
import re
import time
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.attempt_log import AttemptLog
from coharden.environment.reproduce import ReproductionJob, ReproductionReport, check_reproduction
from coharden.execution.git import show_file
from coharden.llm.client import LLMClient
from coharden.llm.errors import LLMError, failure_of
from coharden.patches import make_diff, touched_files

# --- generation with a model ------------------------------------------------------------------------------------
GEN_SYSTEM = """\
You write bug reproduction tests for Python repositories. Given an issue and the relevant source files, write \
one pytest test module that FAILS on the current (buggy) code because of the bug the issue describes and PASSES \
once the bug is fixed. Import and call the real code of the project; never mock, stub or monkeypatch the code \
under test. Mock only model clients (OpenAI, Anthropic, ...) or network access when the code needs them. Reply \
with the complete test module in one ```python fenced block and nothing else."""


@dataclass(frozen=True)
class GenerationRequest:
    """What the model is asked for: a test reproducing ``issue`` (its text), saved as ``test_path``, in at most
    ``max_attempts`` tests."""

    issue: str
    test_path: str = "tests/test_coharden_reproduction.py"
    max_attempts: int = 3


class GenerationAttempt(BaseModel):
    attempt: int
    time: float
    request_hash: str | None = None
    test_source: str | None = None
    accepted: bool = False
    reasons: list[str] = Field(default_factory=list)
    stop: str = ""


class GenerationResult(BaseModel):
    accepted: bool
    test_patch: str = ""
    report: ReproductionReport | None = None
    attempts: list[GenerationAttempt] = Field(default_factory=list)
    stop_reason: str = ""


def extract_python(text: str) -> str | None:
    blocks = re.findall(r"```(?:python|py)?\s*\n(.*?)```", text, re.DOTALL)
    return max(blocks, key=len) if blocks else None


def _context_files(repo: Path, buggy: str, fix: str, limit: int = 8000) -> str:
    parts = []
    for path in touched_files(fix):
        content = show_file(repo, buggy, path)
        if content is not None:
            parts.append(f"### {path}\n```python\n{content[:limit]}\n```")
    return "\n\n".join(parts)


def generate_reproduction(job: ReproductionJob, request: GenerationRequest, settings: Settings, llm: LLMClient, *,
                          log: AttemptLog = AttemptLog()) -> GenerationResult:
    """Ask ``llm`` for a reproduction test of the request's issue and check it with :func:`check_reproduction`
    against ``job``; feed the reasons for a rejection back, up to ``request.max_attempts`` tests (each attempt
    also written to ``log``). The model sees the issue and the buggy versions of the files the fix touches,
    never the fix."""
    repo, test_path, max_attempts = job.repo, request.test_path, request.max_attempts
    buggy, _, fix = job.resolved(list(settings.tests.test_patterns))
    checked = dataclasses.replace(job, buggy=buggy, patched=None, fix=fix)  # resolved once, not per attempt
    existing = show_file(repo, buggy, test_path)
    messages: list[dict[str, str]] = [
        {"role": "system", "content": GEN_SYSTEM},
        {"role": "user", "content": f"Issue:\n{request.issue.strip()}\n\nRelevant source files:\n\n"
                                    f"{_context_files(repo, buggy, fix)}\n\nThe test module will be saved as "
                                    f"{test_path} and run with pytest from the repository root."},
    ]
    result = GenerationResult(accepted=False)

    def record(entry: GenerationAttempt) -> None:
        result.attempts.append(entry)
        log.write(entry)

    for number in range(1, max_attempts + 1):
        entry = GenerationAttempt(attempt=number, time=time.time())
        log.say(f"attempt {number}: asking the model for a test")
        try:
            reply = llm.complete(messages, sample_index=0)
        except LLMError as exc:
            failed = failure_of(exc)
            if failed.completion is not None:
                entry.request_hash = failed.completion.request_hash
            entry.stop = failed.stop()
        if entry.stop:
            record(entry)
            result.stop_reason = entry.stop
            return result
        entry.request_hash = reply.request_hash
        source = extract_python(reply.content)
        if source is None:
            entry.reasons = ["the reply holds no ```python block"]
            feedback = "Your reply held no ```python fenced block. Reply with the complete test module."
        else:
            entry.test_source = source
            patch = make_diff(test_path, existing, source)
            log.say(f"attempt {number}: checking the test")
            report = check_reproduction(checked, patch, settings)
            result.report, result.test_patch = report, patch
            entry.accepted, entry.reasons = report.accepted, report.reasons
            if report.accepted:
                entry.stop = "accepted"
                record(entry)
                result.accepted, result.stop_reason = True, "accepted"
                return result
            feedback = "The test was rejected:\n" + report.feedback() + "\nReply with a corrected complete module."
        if number == max_attempts:
            entry.stop = f"rejected; {max_attempts} attempts used"
        record(entry)
        if entry.stop:
            result.stop_reason = entry.stop
            return result
        messages += [{"role": "assistant", "content": reply.content}, {"role": "user", "content": feedback}]
    return result  # pragma: no cover
