"""Accounting of LLM calls (:class:`Ledger`) and cost caps (:class:`Budget`).

The ledger sums calls, tokens, USD, truncations, retries and errors for the whole run, per instance and per
model. It is thread-safe (one lock) and serializes to a plain dict for reports.

Costs are kept as the list of per-call costs and summed with :func:`math.fsum`, which is exactly rounded and
so independent of the order in which concurrent calls finished: a replayed run reports the same totals as the
recorded one, to the last digit.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from coharden.llm.errors import BudgetExceeded
from coharden.llm.types import Completion


class Usage:
    """Totals for one scope (the run, one instance or one model). Not locked itself; the :class:`Ledger` is."""

    def __init__(self) -> None:
        self.calls = 0
        """Replies obtained (fresh or from the store), including truncated / unusable ones."""
        self.cached_calls = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.truncations = 0
        self.errors = 0
        """Calls that ended in an error (after retries), plus unusable replies other than truncation."""
        self.retries = 0
        self.unpriced_calls = 0
        """Replies of models without a known price, counted at 0 USD (see ``Completion.cost_note``)."""
        self.budget_refusals = 0
        self.errors_by_kind: Counter[str] = Counter()
        self._costs: list[float] = []
        self._cached_costs: list[float] = []

    @property
    def cost_usd(self) -> float:
        """All accounted cost, including replies replayed from the store (budgets apply to this)."""
        return math.fsum(self._costs)

    @property
    def cached_cost_usd(self) -> float:
        """The part of :attr:`cost_usd` that came from stored replies (not paid again in this process)."""
        return math.fsum(self._cached_costs)

    def add_completion(self, completion: Completion) -> None:
        self.calls += 1
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self._costs.append(completion.cost_usd)
        if completion.cached:
            self.cached_calls += 1
            self._cached_costs.append(completion.cost_usd)
        if completion.cost_note is not None:
            self.unpriced_calls += 1

    def merge(self, other: Usage) -> None:
        """Add ``other``'s totals to these (counts, per-kind errors and the cost terms)."""
        for name, value in other.__dict__.items():
            mine = getattr(self, name)
            if isinstance(value, Counter):
                mine.update(value)
            elif isinstance(value, list):
                mine.extend(value)
            else:
                setattr(self, name, mine + value)

    def copy(self) -> Usage:
        other = Usage()
        other.__dict__.update({k: (v.copy() if isinstance(v, list | Counter) else v) for k, v in self.__dict__.items()})
        return other

    def to_dict(self) -> dict[str, Any]:
        return {
            "calls": self.calls,
            "cached_calls": self.cached_calls,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "cached_cost_usd": self.cached_cost_usd,
            "truncations": self.truncations,
            "errors": self.errors,
            "errors_by_kind": dict(sorted(self.errors_by_kind.items())),
            "retries": self.retries,
            "unpriced_calls": self.unpriced_calls,
            "budget_refusals": self.budget_refusals,
        }


class Ledger:
    """Thread-safe accounting of LLM calls for one run, per instance and per model.

    One ledger can be shared by several clients (e.g. a fixer model and a mutator model) so that the run-wide
    budget covers all of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._run = Usage()
        self._instances: dict[str, Usage] = {}
        self._models: dict[str, Usage] = {}

    def _scopes(self, model: str, instance_id: str | None) -> list[Usage]:
        scopes = [self._run, self._models.setdefault(model, Usage())]
        if instance_id is not None:
            scopes.append(self._instances.setdefault(instance_id, Usage()))
        return scopes

    def record_completion(
        self,
        completion: Completion,
        *,
        instance_id: str | None = None,
        truncated: bool = False,
        unusable_kind: str | None = None,
    ) -> None:
        """Account a reply. ``truncated`` / ``unusable_kind`` mark replies that are paid but not returned."""
        with self._lock:
            for usage in self._scopes(completion.model, instance_id):
                usage.add_completion(completion)
                if truncated:
                    usage.truncations += 1
                elif unusable_kind is not None:
                    usage.errors += 1
                    usage.errors_by_kind[unusable_kind] += 1

    def record_retry(self, *, model: str, instance_id: str | None = None) -> None:
        self._bump("retries", model, instance_id)

    def record_error(self, kind: str, *, model: str, instance_id: str | None = None) -> None:
        """Account a call that failed for good (``kind`` like ``auth``, ``retries_exhausted``, ``replay_miss``)."""
        with self._lock:
            for usage in self._scopes(model, instance_id):
                usage.errors += 1
                usage.errors_by_kind[kind] += 1

    def record_budget_refusal(self, *, model: str, instance_id: str | None = None) -> None:
        self._bump("budget_refusals", model, instance_id)

    def _bump(self, counter: str, model: str, instance_id: str | None) -> None:
        """Add one to the integer field ``counter`` of every scope of the call."""
        with self._lock:
            for usage in self._scopes(model, instance_id):
                setattr(usage, counter, getattr(usage, counter) + 1)

    def run_usage(self) -> Usage:
        """A snapshot of the run totals."""
        with self._lock:
            return self._run.copy()

    def instance_usage(self, instance_id: str) -> Usage:
        """A snapshot of one instance's totals (all zero if it made no call)."""
        with self._lock:
            return self._instances.get(instance_id, Usage()).copy()

    def model_usage(self, model: str) -> Usage:
        with self._lock:
            return self._models.get(model, Usage()).copy()

    def run_cost_usd(self) -> float:
        with self._lock:
            return self._run.cost_usd

    def instance_cost_usd(self, instance_id: str) -> float:
        with self._lock:
            usage = self._instances.get(instance_id)
            return usage.cost_usd if usage is not None else 0.0

    def to_dict(self) -> dict[str, Any]:
        """``{"run": {...}, "instances": {id: {...}}, "models": {name: {...}}}`` with sorted keys."""
        with self._lock:
            return {
                "run": self._run.to_dict(),
                "instances": {k: self._instances[k].to_dict() for k in sorted(self._instances)},
                "models": {k: self._models[k].to_dict() for k in sorted(self._models)},
            }


class Budget(BaseModel):
    """Cost caps in USD. A call is refused once the spend of its scope has *reached* the cap.

    The check happens before each call, so the call that crosses a cap completes and is recorded (it was
    within budget when it started, and its reply has been paid for); the next call is refused. With
    concurrent calls the overshoot is bounded by the calls in flight.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    per_instance_usd: float | None = Field(default=None, ge=0)
    per_run_usd: float | None = Field(default=None, ge=0)

    def check(self, ledger: Ledger, *, model: str, instance_id: str | None = None) -> None:
        """Raise :class:`BudgetExceeded` (and count the refusal) if a cap for this call is already reached."""
        if self.per_run_usd is not None:
            spent = ledger.run_cost_usd()
            if spent >= self.per_run_usd:
                ledger.record_budget_refusal(model=model, instance_id=instance_id)
                raise BudgetExceeded(
                    f"run cost cap reached: spent {spent:.6f} USD of {self.per_run_usd:.6f}; call to {model} refused",
                    scope="run",
                    cap_usd=self.per_run_usd,
                    spent_usd=spent,
                )
        if self.per_instance_usd is not None and instance_id is not None:
            spent = ledger.instance_cost_usd(instance_id)
            if spent >= self.per_instance_usd:
                ledger.record_budget_refusal(model=model, instance_id=instance_id)
                raise BudgetExceeded(
                    f"instance {instance_id!r} cost cap reached: spent {spent:.6f} USD of "
                    f"{self.per_instance_usd:.6f}; call to {model} refused",
                    scope=f"instance:{instance_id}",
                    cap_usd=self.per_instance_usd,
                    spent_usd=spent,
                )
