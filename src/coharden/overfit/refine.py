"""Reward-guided refinement of a (fix, test) pair by an LLM critic.

Start from a fix and a test. While the test is not F->P on (old code, new code) and fewer than
``max_iterations`` critic calls were made:

1. show the critic the two execution logs (the test on the old and on the new code), the focal functions the
   current fix modifies, and the test; with ``extra_context`` also the issue, the fix's files whole (when
   short: an incomplete fix may need a change outside the functions it touched) and which changed lines the
   test does not run;
2. the critic answers with a JSON decision ``{"change": "focal" | "test" | "both"}`` and SEARCH/REPLACE
   blocks (the format of :mod:`coharden.mutation.llm_operators`) against the files it was shown;
3. the edited pair is run (real verdicts, real coverage) and kept only if its reward
   (:mod:`coharden.overfit.reward`) is strictly higher than the current pair's.

Every iteration is recorded with the side that was changed (``focal`` / ``test`` / ``both``) and whether it
was kept. A reply that cannot be used (no decision, malformed blocks, a SEARCH text that does not match, edits
outside the sides the decision names, no change at all) is recorded as ``invalid`` and the loop goes on; it
counts towards the cap. A truncated or withheld reply, a budget refusal or any other LLM error stops the loop
(fail closed) and is reported as the stop reason; the pair kept so far is the result.

Variants: ``hide_test`` shows the critic the test's pass/fail flags only (no test code, no logs) and lets it
change the focal code only; ``extra_context=False`` leaves out the issue text, the whole files and the coverage
feedback.

The golden test and the golden fix are never shown to the critic and never run here.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.store import Store
from coharden.instances import resolve_repo
from coharden.llm import Completion, LLMClient, LLMError, failure_of
from coharden.overfit.critic_prompt import SIDES, ReplyError, apply_reply, build_messages
from coharden.overfit.pair import PairState
from coharden.overfit.refine_config import RefineConfig
from coharden.overfit.reward import PairEvaluation, RewardError, check_backend, coverage_settings, evaluate_pair
from coharden.patches import split_patch
from coharden.schema.instance import Instance

STOP_FAIL_TO_PASS = "fail_to_pass"
STOP_MAX_ITERATIONS = "max_iterations"
STOP_ERROR = "error"
"""Stop reasons besides an LLM failure's kind (a :class:`~coharden.llm.ErrorKind` value: truncated, cost_cap,
...)."""


class IterationRecord(BaseModel):
    """One critic call and what came of it (one line of ``iterations.jsonl``)."""

    run: str
    instance: str
    iteration: int
    """1-based."""
    status: Literal["kept", "rejected", "invalid", "stopped"]
    """kept: higher reward, the new pair; rejected: not higher, discarded; invalid: unusable reply; stopped:
    the call failed (truncated / LLM error) and the loop stopped."""
    decision: str | None = None
    """The critic's JSON decision (focal / test / both)."""
    changed: str | None = None
    """The side the applied edits actually changed (focal / test / both)."""
    reason: str = ""
    reward_before: float
    reward_after: float | None = None
    before: dict[str, Any] = Field(default_factory=dict)
    after: dict[str, Any] | None = None
    fix_patch: str | None = None
    """The candidate fix (only when the focal side changed)."""
    test_patch: str | None = None
    """The candidate test (only when the test side changed)."""
    request_hash: str | None = None
    tokens: int = 0
    usd: float = 0.0
    variant: dict[str, Any] = Field(default_factory=dict)


class RefineResult(BaseModel):
    """The outcome of refining one instance's pair."""

    run: str
    instance: str
    stop_reason: str
    error: str | None = None
    iterations: int = 0
    initial_fix: str
    initial_test: str
    fix: str
    test: str
    initial: dict[str, Any] = Field(default_factory=dict)
    final: dict[str, Any] = Field(default_factory=dict)
    changed: dict[str, int] = Field(default_factory=dict)
    """How many KEPT iterations changed each side."""
    attempted: dict[str, int] = Field(default_factory=dict)
    """How many usable proposals (kept or not) changed each side."""
    tokens: int = 0
    usd: float = 0.0
    records: list[IterationRecord] = Field(default_factory=list, exclude=True)


@dataclass(frozen=True)
class RefineRun:
    """What the instances of one refinement run share: the critic's client, how the loop runs (``config``),
    the run's name (each record's ``run``, the refined predictions' ``model_name_or_path``), the verdict store
    of the executor :func:`refine_instance` opens (:func:`refine_pair` runs on the executor it is given), and
    who hears each iteration's record as it is made."""

    client: LLMClient
    config: RefineConfig
    name: str = "overfit-refine"
    store: Store | None = None
    on_iteration: Callable[[IterationRecord], None] | None = None


# --- the loop --------------------------------------------------------------------------------------------------

def split_pair(fix: str, test: str, test_patterns: list[str]) -> tuple[str, str]:
    """The source part of ``fix`` and the test part of ``test`` (the other parts are dropped)."""
    source, _ = split_patch(fix, test_patterns) if fix.strip() else ("", "")
    _, tests = split_patch(test, test_patterns) if test.strip() else ("", "")
    return source, tests


def refine_pair(executor: InstanceExecutor, fix: str, test: str, refine: RefineRun) -> RefineResult:
    """Refine one (fix, test) pair on ``executor``'s instance (see the module docstring)."""
    client, config, run, on_iteration = refine.client, refine.config, refine.name, refine.on_iteration
    instance = executor.instance
    fix, test = split_pair(fix, test, executor.settings.tests.test_patterns)
    result = RefineResult(run=run, instance=instance.instance_id, stop_reason=STOP_ERROR, initial_fix=fix,
                          initial_test=test, fix=fix, test=test)
    variant = {"hide_test": config.hide_test, "extra_context": config.extra_context}
    evaluations: dict[tuple[str, str], PairEvaluation] = {}

    def evaluate(state: PairState) -> PairEvaluation:
        key = (state.fix, state.test)
        if key not in evaluations:
            evaluations[key] = evaluate_pair(executor, state.fix, state.test, backend=config.backend)
        return evaluations[key]

    try:
        state = PairState(executor, fix, test)
        current = evaluate(state)
    except CoHardenError as exc:
        result.error = f"{type(exc).__name__}: {exc}"
        return result
    result.initial = result.final = current.summary()
    previous = ""
    sides: Counter[str] = Counter()
    attempted: Counter[str] = Counter()
    while True:
        if current.fail_to_pass:
            result.stop_reason = STOP_FAIL_TO_PASS
            break
        if result.iterations >= config.max_iterations:
            result.stop_reason = STOP_MAX_ITERATIONS
            break
        result.iterations += 1
        record = IterationRecord(run=run, instance=instance.instance_id, iteration=result.iterations,
                                 status="invalid", reward_before=current.reward, before=current.summary(),
                                 variant=variant)
        messages = build_messages(instance, current, state, config, previous)
        completion = _ask(client, messages, instance.instance_id, result, record)
        if completion is None:
            _finish_record(result, record, on_iteration)
            break
        try:
            decision, changed, new_fix, new_test = apply_reply(completion.content, state.fix_files,
                                                               state.test_files, hide_test=config.hide_test)
        except ReplyError as exc:
            record.reason = str(exc)
            previous = f"Your previous reply could not be used: {exc}. The pair below is unchanged."
            _finish_record(result, record, on_iteration)
            continue
        record.decision, record.changed = decision, changed
        attempted[changed] += 1
        candidate_state = state.with_edits(new_fix, new_test)
        if changed in ("focal", "both"):
            record.fix_patch = candidate_state.fix
        if changed in ("test", "both"):
            record.test_patch = candidate_state.test
        try:
            candidate = evaluate(candidate_state)
        except RewardError as exc:  # a harness problem: stop, the pair kept so far stands
            record.status, record.reason = "stopped", str(exc)
            result.stop_reason, result.error = STOP_ERROR, str(exc)
            _finish_record(result, record, on_iteration)
            break
        kept, previous = _judge(record, current, candidate, changed)
        if kept:
            state, current = candidate_state, candidate
            sides[changed] += 1
        _finish_record(result, record, on_iteration)
    result.fix, result.test = state.fix, state.test
    result.final = current.summary()
    result.changed = {s: sides.get(s, 0) for s in SIDES}
    result.attempted = {s: attempted.get(s, 0) for s in SIDES}
    return result


def _ask(client: LLMClient, messages: list[dict[str, str]], instance_id: str, result: RefineResult,
         record: IterationRecord) -> Completion | None:
    """The model's reply for this iteration, its request and cost on ``record``; None when the model failed
    (the record says how, and the result stops with the failure's kind)."""
    try:
        completion = client.complete(messages, instance_id=instance_id, sample_index=result.iterations - 1)
    except LLMError as exc:
        failed = failure_of(exc)
        record.status, record.reason = "stopped", f"{failed.error}: {failed.message}"
        if failed.completion is not None:
            record.request_hash = failed.completion.request_hash
            record.tokens, record.usd = failed.completion.total_tokens, failed.completion.cost_usd
        result.stop_reason, result.error = failed.kind.value, record.reason  # an ErrorKind value
        return None
    record.request_hash, record.tokens, record.usd = (completion.request_hash, completion.total_tokens,
                                                      completion.cost_usd)
    return completion


def _judge(record: IterationRecord, current: PairEvaluation, candidate: PairEvaluation,
           changed: str) -> tuple[bool, str]:
    """Whether the candidate pair is kept (only when its reward is higher; ``record`` is filled in), and the
    note for the next prompt ('' when kept)."""
    record.reward_after, record.after = candidate.reward, candidate.summary()
    if candidate.reward > current.reward:
        record.status = "kept"
        record.reason = f"reward {current.reward:.4f} -> {candidate.reward:.4f}"
        return True, ""
    record.status = "rejected"
    record.reason = f"reward {candidate.reward:.4f} is not higher than {current.reward:.4f}"
    return False, (f"You changed the {changed} side; that pair scored {candidate.reward:.4f}, not higher than "
            f"the current {current.reward:.4f}, so it was discarded. The pair below is unchanged.")


def _finish_record(result: RefineResult, record: IterationRecord,
                   on_iteration: Callable[[IterationRecord], None] | None) -> None:
    result.tokens += record.tokens
    result.usd += record.usd
    result.records.append(record)
    if on_iteration is not None:
        on_iteration(record)


def refine_instance(instance: Instance, settings: Settings, fix: str, test: str, refine: RefineRun) -> RefineResult:
    """:func:`refine_pair` in a fresh executor (its own workspace and fork server, ``refine.store``) for
    ``instance``."""
    backend = refine.config.backend
    check_backend(settings, backend, instance.python)
    settings = coverage_settings(settings, backend)
    repo = resolve_repo(instance, settings.repos_dir)
    with InstanceExecutor(instance, Path(repo), settings, refine.store) as executor:
        return refine_pair(executor, fix, test, refine)
