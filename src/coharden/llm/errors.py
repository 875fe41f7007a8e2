"""Exceptions of the LLM layer.

Every failure the layer can produce is a subclass of :class:`LLMError`, so callers can fail closed with one
``except``. The classes say *what* went wrong (and whether a retry could help); the messages say what to do.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coharden.llm.types import Completion


class LLMError(RuntimeError):
    """Base class of all errors raised by :mod:`coharden.llm`."""


class LLMConfigError(LLMError):
    """The client is misconfigured (missing API key variable, replay mode without a store, ...)."""


class LLMAuthError(LLMError):
    """The provider rejected the credentials (HTTP 401 / 403). Never retried."""


class ContextWindowExceeded(LLMError):
    """The request does not fit the model's context window. Never retried: the same request fails again."""


class LLMRequestError(LLMError):
    """A non-retryable provider error other than auth / context window (HTTP 400, 404, unsupported params)."""


class RetriesExhausted(LLMError):
    """A retryable error (429, 5xx, connection, timeout) persisted through every allowed attempt."""

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class UnusableReply(LLMError):
    """The provider answered, was paid, and the answer must not be used (fail closed).

    ``completion`` carries the reply with its usage and cost (already entered in the ledger); ``partial`` is
    its text, for logs only.
    """

    def __init__(self, message: str, *, completion: Completion) -> None:
        super().__init__(message)
        self.completion = completion

    @property
    def partial(self) -> str:
        return self.completion.content


class TruncatedReply(UnusableReply):
    """The reply hit the token limit (``finish_reason == "length"`` or ``completion_tokens >= max_tokens``)."""


class BudgetExceeded(LLMError):
    """A cost cap was already reached before a call; the call was not made."""

    def __init__(self, message: str, *, scope: str, cap_usd: float, spent_usd: float) -> None:
        super().__init__(message)
        self.scope = scope
        self.cap_usd = cap_usd
        self.spent_usd = spent_usd


class ReplayMiss(LLMError):
    """Replay mode found no stored reply for a request (the network is never used in replay mode)."""

    def __init__(self, message: str, *, request_hash: str) -> None:
        super().__init__(message)
        self.request_hash = request_hash
