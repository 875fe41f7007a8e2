"""The result of one LLM call."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Completion(BaseModel):
    """One reply of one model to one request.

    ``request_hash`` is the content address of the request (model, messages, params, sample index) in the
    :class:`~coharden.llm.cache.CallStore`. ``cached`` is True when the reply came from the store; usage,
    cost and latency are then the recorded ones, so a replayed run accounts (and hits budget caps) exactly
    like the recorded run. ``cost_note`` explains a cost of 0 for a model without a known price.
    """

    model_config = ConfigDict(frozen=True)

    content: str
    finish_reason: str
    model: str
    """The litellm model name that was requested."""
    response_model: str = ""
    """The model name the provider reported, when it differs in spelling or version."""
    prompt_tokens: int
    completion_tokens: int
    cost_usd: float
    cost_note: str | None = None
    latency_s: float
    request_hash: str
    sample_index: int = 0
    cached: bool = False

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens
