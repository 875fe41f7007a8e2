"""Exceptions of the LLM layer.

Every failure the layer can produce is a subclass of :class:`LLMError`, so callers can fail closed with one
``except``. The classes say *what* went wrong (and whether a retry could help); the messages say what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from coharden.llm.types import Completion

__all__ = [
    "BudgetExceeded",
    "ContextWindowExceeded",
    "ErrorKind",
    "Failure",
    "LLMAuthError",
    "LLMConfigError",
    "LLMError",
    "LLMRequestError",
    "MissingAPIKey",
    "ReplayMiss",
    "RetriesExhausted",
    "TruncatedReply",
    "UnsupportedParameter",
    "UnusableReply",
    "failure_of",
    "kind_of",
]


class ErrorKind(StrEnum):
    """What kind of model failure an :class:`LLMError` is: the one vocabulary of LLM failures. Every caller
    records it (:func:`failure_of`): a loop run per instance, the LLM mutator per sample, the suite roles, the
    refiners; so "no API key" and "cost cap reached" never look alike."""

    AUTH = "auth"  # missing, invalid or unauthorized key (HTTP 401 / 403, or no key at all)
    BAD_PARAMETER = "bad_parameter"  # the model rejects a parameter (HTTP 400 "unsupported parameter")
    CONTEXT_WINDOW = "context_window"  # the request does not fit the model's context
    PROVIDER_DOWN = "provider_down"  # 429 / 5xx / connection errors / timeouts, through every retry
    COST_CAP = "cost_cap"  # a configured cost cap was reached; the call was not made
    BAD_REQUEST = "bad_request"  # any other rejected request (400, 404, malformed reply)
    TRUNCATED = "truncated"  # a paid reply that hit the token limit
    UNUSABLE_REPLY = "unusable_reply"  # any other paid reply that must not be used (withheld, filtered)
    REPLAY_MISS = "replay_miss"  # replay mode without a stored reply
    CONFIG = "config"  # the client is misconfigured


class LLMError(RuntimeError):
    """Base class of all errors raised by :mod:`coharden.llm`. ``kind`` (an :class:`ErrorKind` value) says what
    went wrong in one word, for records and summaries."""

    kind: ClassVar[str] = ErrorKind.BAD_REQUEST.value


class LLMConfigError(LLMError):
    """The client is misconfigured (replay mode without a store, ...)."""

    kind = ErrorKind.CONFIG.value


class MissingAPIKey(LLMConfigError):
    """No API key: the configured key variable is unset, or the provider library found no key at all. An auth
    failure found before (or instead of) a request, so it is never retried."""

    kind = ErrorKind.AUTH.value


class LLMAuthError(LLMError):
    """The provider rejected the credentials (HTTP 401 / 403). Never retried."""

    kind = ErrorKind.AUTH.value


class ContextWindowExceeded(LLMError):
    """The request does not fit the model's context window. Never retried: the same request fails again."""

    kind = ErrorKind.CONTEXT_WINDOW.value


class LLMRequestError(LLMError):
    """A non-retryable provider error other than auth / context window (HTTP 400, 404, malformed reply)."""

    kind = ErrorKind.BAD_REQUEST.value


class UnsupportedParameter(LLMRequestError):
    """The model rejects a request parameter (HTTP 400 "unsupported parameter", litellm's
    ``UnsupportedParamsError``). Never retried. ``LLMConfig.drop_params`` (on by default) lets litellm drop the
    parameters it knows a model does not take; this error means one got through anyway."""

    kind = ErrorKind.BAD_PARAMETER.value


class RetriesExhausted(LLMError):
    """A retryable error (429, 5xx, connection, timeout) persisted through every allowed attempt."""

    kind = ErrorKind.PROVIDER_DOWN.value

    def __init__(self, message: str, *, attempts: int) -> None:
        super().__init__(message)
        self.attempts = attempts


class UnusableReply(LLMError):
    """The provider answered, was paid, and the answer must not be used (fail closed).

    ``completion`` carries the reply with its usage and cost (already entered in the ledger); ``partial`` is
    its text, for logs only.
    """

    kind = ErrorKind.UNUSABLE_REPLY.value

    def __init__(self, message: str, *, completion: Completion) -> None:
        super().__init__(message)
        self.completion = completion

    @property
    def partial(self) -> str:
        return self.completion.content


class TruncatedReply(UnusableReply):
    """The reply hit the token limit (``finish_reason == "length"`` or ``completion_tokens >= max_tokens``)."""

    kind = ErrorKind.TRUNCATED.value


class BudgetExceeded(LLMError):
    """A cost cap was already reached before a call; the call was not made."""

    kind = ErrorKind.COST_CAP.value

    def __init__(self, message: str, *, scope: str, cap_usd: float, spent_usd: float) -> None:
        super().__init__(message)
        self.scope = scope
        self.cap_usd = cap_usd
        self.spent_usd = spent_usd


class ReplayMiss(LLMError):
    """Replay mode found no stored reply for a request (the network is never used in replay mode)."""

    kind = ErrorKind.REPLAY_MISS.value

    def __init__(self, message: str, *, request_hash: str) -> None:
        super().__init__(message)
        self.request_hash = request_hash


#: A kind in a few words, for a one-line reason (an incomplete pool, a stop).
_WHAT = {ErrorKind.AUTH: "no usable API key", ErrorKind.BAD_PARAMETER: "a parameter the model rejects",
         ErrorKind.CONTEXT_WINDOW: "request beyond the context window",
         ErrorKind.PROVIDER_DOWN: "provider unavailable", ErrorKind.COST_CAP: "cost cap reached",
         ErrorKind.BAD_REQUEST: "request rejected", ErrorKind.TRUNCATED: "truncated reply",
         ErrorKind.UNUSABLE_REPLY: "unusable reply", ErrorKind.REPLAY_MISS: "no stored reply to replay",
         ErrorKind.CONFIG: "client misconfigured"}


@dataclass(frozen=True)
class Failure:
    """An LLM failure as every caller records it: its :class:`ErrorKind`, the error's class name and message,
    and the paid reply when there is one (a truncated or unusable reply: its usage and cost still count)."""

    kind: ErrorKind
    error: str
    message: str
    completion: Completion | None = None

    @property
    def what(self) -> str:
        """The kind in a few words ("truncated reply", "cost cap reached")."""
        return _WHAT[self.kind]

    def describe(self) -> str:
        """One sentence for a record: what happened and the error's message."""
        if self.kind is ErrorKind.TRUNCATED:
            return f"the model's reply was truncated ({self.message})"
        if self.completion is not None:
            return f"the model's reply is unusable ({self.message})"
        return f"model error {self.error} ({self.kind.value}): {self.message}"

    def stop(self) -> str:
        """A stop reason: a paid reply that must not be used fails closed; anything else failed."""
        return f"{'failed closed' if self.completion is not None else 'failed'}: {self.describe()}"


def failure_of(exc: LLMError) -> Failure:
    """The one mapping of an LLM exception to what its callers record (its kind, name, message, paid reply)."""
    return Failure(kind=ErrorKind(exc.kind), error=type(exc).__name__, message=str(exc),
                   completion=getattr(exc, "completion", None))


def _subclasses(cls: type[LLMError]) -> list[type[LLMError]]:
    return [cls, *(sub for direct in cls.__subclasses__() for sub in _subclasses(direct))]


def kind_of(exit_status: str) -> str | None:
    """The :class:`ErrorKind` value of an LLM error class named ``exit_status`` (how agents record why a run
    stopped), or None when it names no LLM error (``Submitted``, ``CriticRejected``, ``LimitsExceeded``, ...)."""
    for cls in _subclasses(LLMError):
        if cls.__name__ == exit_status:
            return cls.kind
    return None


def first_line(message: str, limit: int = 240) -> str:
    """One line of an error message, for summaries (the full text stays in the records)."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."
