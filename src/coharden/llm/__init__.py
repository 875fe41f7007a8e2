"""LLM layer: one client over many providers (litellm model names), cost and token accounting, budgets,
fail-closed truncation check, content-addressed record / replay, and a local OpenAI-compatible mock server.

Only :mod:`coharden.llm.client` imports litellm, and only on the first provider call; everything else
(replay, the store, the mock server) works without it.
"""

from coharden.llm.accounting import Budget, Ledger, Usage
from coharden.llm.cache import CacheMode, CallStore, request_hash
from coharden.llm.client import LLMClient
from coharden.llm.config import CostOverride, LLMConfig
from coharden.llm.errors import *  # noqa: F403 (the error types and kind_of: errors.__all__)
from coharden.llm.errors import __all__ as _error_names
from coharden.llm.mockrules import Rule, RulesError, load_rules
from coharden.llm.mockserver import MockLLMServer
from coharden.llm.types import Completion

__all__ = [
    "Budget",
    "CacheMode",
    "CallStore",
    "Completion",
    "CostOverride",
    "LLMClient",
    "LLMConfig",
    "Ledger",
    "MockLLMServer",
    "Rule",
    "RulesError",
    "Usage",
    "load_rules",
    "request_hash",
    *_error_names,
]
