"""Shared helpers for the LLM-layer tests (fixtures are in conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coharden.llm import CostOverride, LLMConfig, MockLLMServer

#: The type of the ``serve`` fixture: start a mock server with these rules.
Serve = Callable[[list[dict[str, Any]]], MockLLMServer]

KEY_VAR = "COHARDEN_TEST_LLM_KEY"
MODEL = "openai/gpt-4o-mini"
#: A round price so expected costs are easy to state: 1 µUSD per prompt token, 2 µUSD per completion token.
PRICE = CostOverride(input_per_token=1e-6, output_per_token=2e-6)


def make_config(base_url: str, **overrides: Any) -> LLMConfig:
    """A config for the mock: fast retries (ms waits), the round test price."""
    values: dict[str, Any] = {
        "model": MODEL,
        "api_base": base_url,
        "api_key_env": KEY_VAR,
        "max_tokens": 256,
        "timeout": 5.0,
        "max_retries": 3,
        "retry_wait_s": 0.001,
        "retry_max_wait_s": 0.01,
        "cost_overrides": {MODEL: PRICE},
    }
    values.update(overrides)
    return LLMConfig.model_validate(values)


def user(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "You are terse."}, {"role": "user", "content": text}]


def reply_rule(
    match: str, reply: str, prompt_tokens: int = 10, completion_tokens: int = 5, **kw: Any
) -> dict[str, Any]:
    return {
        "match": match,
        "reply": reply,
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens},
        **kw,
    }
