"""Build, smoke-test and (optionally) refine an environment plan with a model, in bounded attempts.

One attempt builds the current plan and smoke-tests it. When either fails and a model is configured, the model
sees the plan and the error text and answers with a JSON patch (RFC 6902) of the plan; the patched plan is the
next attempt. The model never judges the environment: the build and the smoke test do.

Every attempt is appended to a JSONL log (plan, digest, build and smoke outcome, the model call's request hash
and usage, the patch, and why the loop stopped), so a run can be audited and, with the LLM call store,
replayed. Fail closed: a truncated or withheld model reply, a model error, or a patch that does not apply (twice
in a row) stops the loop with the environment marked failed.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.attempt_log import AttemptLog
from coharden.environment.build import BuildError, BuildResult
from coharden.environment.plan import EnvPlan, EnvTarget, PlanError, patch_plan
from coharden.environment.smoke import SmokeReport, smoke_sample, smoke_test
from coharden.llm.client import LLMClient
from coharden.llm.errors import LLMError, failure_of

SYSTEM_PROMPT = """\
You repair environment plans for running a Python repository's test suite with pytest.
A plan is JSON. `install` holds shell commands run in the repository root with the environment's python and pip \
first on PATH; `python` is the X.Y version; `env` holds variables for test runs; `test_args` are extra pytest \
arguments; `source_roots` are directories holding the importable code; `system_packages` are Debian packages.
Given the plan and the error of its build or smoke test, reply with ONLY a JSON Patch (RFC 6902) array, in one \
```json fenced block, that changes the plan so the error goes away. Change as little as possible. Do not change \
`repo`, `commit` or `schema_version`. Never add commands that disable or skip tests."""


class Builder(Protocol):
    def build(self, repo: Path, commit: str, plan: EnvPlan, *, force: bool = False) -> BuildResult: ...


class Attempt(BaseModel):
    """One line of the refinement log."""

    attempt: int
    time: float
    plan_digest: str
    plan: dict[str, Any]
    build_ok: bool
    build_error: str = ""
    build_cached: bool = False
    python: str = ""
    smoke: dict[str, Any] | None = None
    llm_calls: list[dict[str, Any]] = Field(default_factory=list)
    patch: Any = None
    patch_error: str = ""
    stop: str = ""


class RefineResult(BaseModel):
    ok: bool
    plan: EnvPlan
    build: BuildResult | None = None
    smoke: SmokeReport | None = None
    attempts: list[Attempt] = Field(default_factory=list)
    stop_reason: str = ""


def extract_patch(text: str) -> Any:
    """The JSON patch in a model reply: the first ```json block, else the outermost [...] span."""
    fenced = re.search(r"```(?:json)?\s*\n(.*?)```", text, re.DOTALL)
    candidate = fenced.group(1) if fenced else text[text.find("["): text.rfind("]") + 1]
    if not candidate.strip():
        raise PlanError("the reply holds no JSON patch")
    try:
        return json.loads(candidate)
    except json.JSONDecodeError as exc:
        raise PlanError(f"the reply's JSON patch does not parse: {exc}") from exc


def _prompt(plan: EnvPlan, error: str, history: list[Attempt], patch_error: str) -> list[dict[str, str]]:
    shown = plan.model_dump(mode="json", exclude={"evidence"})
    parts = [f"Plan:\n```json\n{json.dumps(shown, indent=2)}\n```", f"Error:\n```\n{error.strip()[-4000:]}\n```"]
    tried = [a for a in history if a.patch is not None]
    if tried:
        parts.append("Earlier patches (each still failed):\n" + "\n".join(
            f"- {json.dumps(a.patch)}" for a in tried[-3:]))
    if patch_error:
        parts.append(f"Your previous reply could not be used: {patch_error}. Reply with a valid JSON Patch array.")
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": "\n\n".join(parts)}]


def _smoke_summary(report: SmokeReport) -> dict[str, Any]:
    return report.model_dump(mode="json", include={"ok", "collected", "passed", "reason", "unreported"}) | {
        "sampled": len(report.sampled), "env_failures": [f.model_dump() for f in report.env_failures[:20]],
        "test_failures": len(report.test_failures)}


def refine_environment(target: EnvTarget, builder: Builder, settings: Settings, *, llm: LLMClient | None = None,
                       log: AttemptLog = AttemptLog()) -> RefineResult:
    """Build the target's plan, smoke-test it, and refine it with ``llm`` until it works or
    ``build.max_attempts`` plans were tried (the smoke test as the settings' ``build`` section says). Returns the
    last plan, build and smoke report, and every attempt (also written to ``log``)."""
    max_attempts, smoke = settings.build.max_attempts, settings.build.smoke
    sample = smoke_sample(settings)
    result = RefineResult(ok=False, plan=target.plan)

    def write(attempt: Attempt) -> None:
        result.attempts.append(attempt)
        log.write(attempt)

    for number in range(1, max_attempts + 1):
        plan = target.plan
        log.say(f"attempt {number}: building (python {plan.python}, {len(plan.install)} install commands)")
        record = Attempt(attempt=number, time=time.time(), plan_digest=plan.digest(),
                         plan=plan.model_dump(mode="json"), build_ok=False)
        try:
            build = builder.build(target.repo, target.commit, plan)
        except BuildError as exc:
            record.build_error = str(exc)
            record.stop = f"cannot build: {exc}"
            write(record)
            result.stop_reason = record.stop
            return result
        result.plan, result.build, result.smoke = plan, build, None
        record.build_ok, record.build_error, record.build_cached = build.ok, build.error, build.cached
        record.python = build.python
        error = build.error
        if build.ok and smoke:
            log.say(f"attempt {number}: smoke test ({sample.size} tests, seed {sample.seed})")
            report = smoke_test(target, build, settings, sample=sample)
            result.smoke = report
            record.smoke = _smoke_summary(report)
            error = "" if report.ok else "Smoke test failed.\n" + report.error_text()
        if not error:
            record.stop = "ok"
            write(record)
            result.ok, result.stop_reason = True, "ok"
            return result
        if llm is None:
            record.stop = "failed; no model configured to refine the plan"
        elif number == max_attempts:
            record.stop = f"failed; {max_attempts} attempts used"
        if record.stop:
            write(record)
            result.stop_reason = record.stop
            return result
        assert llm is not None
        new_plan, stop = _propose(llm, result, error, record, log)
        write(record)
        if new_plan is None:
            result.stop_reason = stop
            return result
        target = dataclasses.replace(target, plan=new_plan)
    return result  # pragma: no cover - the loop always returns


def _propose(llm: LLMClient, result: RefineResult, error: str, record: Attempt,
             log: AttemptLog) -> tuple[EnvPlan | None, str]:
    """Ask the model for a patch of the plan just tried (``result.plan``; ``record`` is its attempt, not yet in
    ``result.attempts``) that removes ``error`` (a second time when the first reply is unusable); fill ``record``.
    A patch giving a plan already tried is unusable."""
    plan, history = result.plan, result.attempts
    tried = {a.plan_digest for a in history} | {record.plan_digest}
    patch_error = ""
    for _ in range(2):
        log.say("asking the model for a plan change")
        try:
            reply = llm.complete(_prompt(plan, error, history, patch_error))
        except LLMError as exc:
            failed = failure_of(exc)
            record.llm_calls.append({"error": failed.kind.value, **({"request_hash": failed.completion.request_hash}
                                                                     if failed.completion is not None else {})})
            record.stop = failed.stop()
            return None, record.stop
        record.llm_calls.append({"request_hash": reply.request_hash, "prompt_tokens": reply.prompt_tokens,
                                 "completion_tokens": reply.completion_tokens, "cost_usd": reply.cost_usd,
                                 "cached": reply.cached})
        try:
            operations = extract_patch(reply.content)
            record.patch = operations
            new_plan = patch_plan(plan, operations)
            if new_plan.digest() in tried:
                raise PlanError("the patch gives a plan that was already tried")
        except PlanError as exc:
            patch_error = str(exc)
            record.patch_error = patch_error
            continue
        record.patch_error = ""
        return new_plan, ""
    record.stop = f"failed: the model gave no usable patch ({patch_error})"
    return None, record.stop
