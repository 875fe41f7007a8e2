"""The rules of the mock LLM server (:mod:`coharden.llm.mockserver`): what a request must match, what answers it
and how often, read from a YAML or JSON rules file (the format is in the server module's docstring). A rules
file that is not valid is one :class:`RulesError` naming the rule and field."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from coharden.yamlfile import read_yaml


class RulesError(ValueError):
    """A rules file (or rules list) is malformed. The message names the source and the offending field."""


class MatchSpec(BaseModel):
    """What a rule matches. All given conditions must hold; an empty spec matches every request.

    The text searched is the concatenation (newline-joined) of the message contents: of all messages, of the
    messages with ``role``, or only of the last user message (``last_user``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    contains: str | None = None
    regex: str | None = None
    """Python regular expression, searched (``re.search``) with DOTALL."""
    role: str | None = None
    last_user: bool = False
    """Search only the last user message (takes precedence over ``role``)."""
    model: str | None = None
    """Exact model name as sent on the wire (litellm strips the provider prefix: ``gpt-4o-mini``)."""

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                raise ValueError(f"invalid regular expression {value!r}: {exc}") from exc
        return value

    def haystack(self, messages: Sequence[Mapping[str, Any]]) -> str:
        if self.last_user:
            users = [m for m in messages if m.get("role") == "user"]
            chosen = users[-1:]
        elif self.role is not None:
            chosen = [m for m in messages if m.get("role") == self.role]
        else:
            chosen = list(messages)
        return "\n".join(_content_text(m.get("content")) for m in chosen)

    def matches(self, body: Mapping[str, Any]) -> bool:
        if self.model is not None and body.get("model") != self.model:
            return False
        messages = body.get("messages") or []
        scope_role = "user" if self.last_user else self.role
        if scope_role is not None and not any(m.get("role") == scope_role for m in messages):
            return False  # a role-scoped rule never matches a request without such a message
        text = self.haystack(messages)
        if self.contains is not None and self.contains not in text:
            return False
        return self.regex is None or re.search(self.regex, text, re.DOTALL) is not None


class UsageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)


class ToolCallSpec(BaseModel):
    """One function call in a scripted reply (OpenAI ``tool_calls``), for agents that use native tool calling."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    arguments: dict[str, Any] = Field(default_factory=dict)


class Rule(BaseModel):
    """One scripted answer: ``reply`` and / or ``tool_calls`` (HTTP 200), or ``status`` (an HTTP error)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str | None = None
    match: MatchSpec = Field(default_factory=MatchSpec)
    reply: str | None = None
    tool_calls: list[ToolCallSpec] = Field(default_factory=list)
    """Function calls the reply makes (its ``finish_reason`` then defaults to ``tool_calls``)."""
    finish_reason: str = "stop"
    usage: UsageSpec | None = None
    """Reported token usage; default: whitespace-separated word counts of the prompt and the reply."""
    delay_s: float = Field(default=0.0, ge=0)
    status: int | None = Field(default=None, ge=400, le=599)
    error_message: str | None = None
    error_code: str | None = None
    """OpenAI error ``code``, e.g. ``context_length_exceeded``, ``unsupported_parameter``, ``invalid_api_key``."""
    error_param: str | None = None
    """OpenAI error ``param``: the request parameter at fault, e.g. ``temperature``."""
    headers: dict[str, str] = Field(default_factory=dict)
    """Extra response headers (e.g. ``retry-after``)."""
    times: int | None = Field(default=None, ge=1)
    """Use this rule at most this many times, then fall through to the next rules."""

    @field_validator("match", mode="before")
    @classmethod
    def _shorthand(cls, value: Any) -> Any:
        if value is None:
            return {}
        return {"contains": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _reply_or_status(self) -> Rule:
        if self.reply is None and self.status is None and not self.tool_calls:
            raise ValueError("a rule needs `reply` or `tool_calls` (a success) or `status` (an HTTP error)")
        if self.tool_calls and "finish_reason" not in self.model_fields_set:
            object.__setattr__(self, "finish_reason", "tool_calls")
        return self


class RuleSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    rules: list[Rule]


def _content_text(content: Any) -> str:
    """Text of an OpenAI message content: a string or a list of parts (``{"type": "text", "text": ...}``)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content)


def _format_loc(loc: Sequence[int | str]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def parse_rules(data: Any, *, source: str = "<rules>") -> list[Rule]:
    """Validate rules given as a list or ``{"rules": [...]}``; errors name ``source`` and the field path."""
    if isinstance(data, list):
        data = {"rules": data}
    if not isinstance(data, Mapping):
        raise RulesError(f"{source}: expected a list of rules or a mapping with `rules`, got {type(data).__name__}")
    try:
        return RuleSet.model_validate(data).rules
    except ValidationError as exc:
        problems = "; ".join(f"{_format_loc(e['loc'])}: {e['msg']}" for e in exc.errors())
        raise RulesError(f"{source}: invalid rules: {problems}") from None


def load_rules(path: str | Path) -> list[Rule]:
    """Read a YAML or JSON rules file (JSON is YAML, so one parser reads both)."""
    path = Path(path)
    data = read_yaml(path, RulesError, what=" rules file", kind="YAML/JSON")
    return parse_rules(data, source=str(path))
