"""LLM layer: one client over many providers (litellm model names), cost and token accounting, budgets,
fail-closed truncation check, content-addressed record / replay, and a local OpenAI-compatible mock server.

Only :mod:`coharden.llm.client` imports litellm, and only on the first provider call; everything else
(replay, the store, the mock server) works without it.
"""

from coharden.llm.accounting import Budget, Ledger, Usage
from coharden.llm.cache import CacheMode, CallStore, request_hash
from coharden.llm.client import LLMClient
from coharden.llm.config import CostOverride, LLMConfig
from coharden.llm.errors import (
    BudgetExceeded,
    ContextWindowExceeded,
    ErrorKind,
    LLMAuthError,
    LLMConfigError,
    LLMError,
    LLMRequestError,
    MissingAPIKey,
    ReplayMiss,
    RetriesExhausted,
    TruncatedReply,
    UnsupportedParameter,
    UnusableReply,
    kind_of,
)
from coharden.llm.mockserver import MockLLMServer, Rule, RulesError, load_rules
from coharden.llm.types import Completion

__all__ = [
    "Budget",
    "BudgetExceeded",
    "CacheMode",
    "CallStore",
    "Completion",
    "ContextWindowExceeded",
    "CostOverride",
    "ErrorKind",
    "LLMAuthError",
    "LLMClient",
    "LLMConfig",
    "LLMConfigError",
    "LLMError",
    "LLMRequestError",
    "Ledger",
    "MissingAPIKey",
    "MockLLMServer",
    "ReplayMiss",
    "RetriesExhausted",
    "Rule",
    "RulesError",
    "TruncatedReply",
    "UnsupportedParameter",
    "UnusableReply",
    "Usage",
    "kind_of",
    "load_rules",
    "request_hash",
]
