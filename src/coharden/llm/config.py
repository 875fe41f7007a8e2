"""Configuration of the LLM client: one :class:`LLMConfig` per model endpoint.

API keys are never stored in the config (configs end up in run records and reports); the config names the
environment variable that holds the key (``api_key_env``). Without it litellm falls back to the provider's
usual variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ...).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: Environment variables read by :meth:`LLMConfig.from_env` (field name -> variable).
ENV_VARS: dict[str, str] = {
    "model": "COHARDEN_LLM_MODEL",
    "api_base": "COHARDEN_LLM_API_BASE",
    "api_key_env": "COHARDEN_LLM_API_KEY_ENV",
    "temperature": "COHARDEN_LLM_TEMPERATURE",
    "max_tokens": "COHARDEN_LLM_MAX_TOKENS",
    "timeout": "COHARDEN_LLM_TIMEOUT",
    "max_retries": "COHARDEN_LLM_MAX_RETRIES",
    "concurrency": "COHARDEN_LLM_CONCURRENCY",
}


class CostOverride(BaseModel):
    """Price of one model in USD per token, used instead of litellm's price table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input_per_token: float = Field(ge=0)
    output_per_token: float = Field(ge=0)


class LLMConfig(BaseModel):
    """How to reach one model and how hard to try."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1)
    """litellm model name with provider prefix: ``openai/gpt-5-mini``, ``anthropic/...``, ``hosted_vllm/...``,
    ``ollama/...``."""
    api_base: str | None = None
    """Endpoint URL (e.g. ``http://127.0.0.1:8000/v1``); ``None`` = the provider's default."""
    api_key_env: str | None = None
    """Name of the environment variable holding the API key; ``None`` = litellm's provider default."""
    temperature: float = Field(default=0.0, ge=0)
    max_tokens: int = Field(default=4096, ge=1)
    """Completion token limit; a reply reaching it is rejected as truncated."""
    timeout: float = Field(default=120.0, gt=0)
    """Seconds per HTTP attempt."""
    concurrency: int | None = Field(default=None, ge=1)
    """At most this many provider calls of one client at a time (the others wait before their attempt starts,
    so ``timeout`` counts from the start); ``None`` = no limit. ``1`` for a local server that answers one
    request at a time (``scripts/local-model``): queued requests would otherwise spend their timeout waiting.
    Not part of the request hash."""
    max_retries: int = Field(default=4, ge=0)
    """Retries after the first attempt, for 429 / 5xx / connection errors / timeouts only."""
    retry_wait_s: float = Field(default=2.0, ge=0)
    """Wait before the first retry; doubles (``retry_multiplier``) each retry up to ``retry_max_wait_s``."""
    retry_multiplier: float = Field(default=2.0, ge=1)
    retry_max_wait_s: float = Field(default=60.0, ge=0)
    cost_overrides: dict[str, CostOverride] = Field(default_factory=dict)
    """Per model name: price per token, used instead of litellm's table (local or unlisted models)."""
    extra_params: dict[str, Any] = Field(default_factory=dict)
    """More keyword arguments for ``litellm.completion`` (``seed``, ``top_p``, ...). Part of the request hash."""
    drop_params: bool = True
    """Let litellm drop parameters it knows the model does not take (``temperature`` on reasoning models such as
    ``gpt-5-mini``) instead of failing the call. Not part of the request hash: the request as configured is."""

    @field_validator("extra_params")
    @classmethod
    def _no_reserved_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        reserved = {"model", "messages", "stream", "n", "api_key", "api_base", "base_url", "timeout", "num_retries"}
        clash = sorted(reserved & set(value))
        if clash:
            raise ValueError(f"extra_params must not set {', '.join(clash)} (use the config fields instead)")
        try:  # they are part of the request hash, so they must have a canonical JSON form
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"extra_params must be plain JSON data: {exc}") from exc
        return value

    def cost_override(self) -> CostOverride | None:
        """The override for this config's model, if any."""
        return self.cost_overrides.get(self.model)

    def resolve_api_key(self, environ: Mapping[str, str] | None = None) -> str | None:
        """The API key from ``api_key_env``; ``None`` when no variable is named (litellm then uses its default).

        Fails closed: a named but unset/empty variable is a configuration error, not an anonymous request.
        """
        if self.api_key_env is None:
            return None
        env = os.environ if environ is None else environ
        key = env.get(self.api_key_env, "")
        if not key:
            from coharden.llm.errors import MissingAPIKey

            raise MissingAPIKey(
                f"LLM config for {self.model!r} names API key variable ${self.api_key_env}, but it is not set"
            )
        return key

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMConfig:
        """Build a config from ``COHARDEN_LLM_*`` variables (see :data:`ENV_VARS`); non-None overrides win."""
        env = os.environ if environ is None else environ
        values: dict[str, Any] = {field: env[var] for field, var in ENV_VARS.items() if env.get(var)}
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls.model_validate(values)
