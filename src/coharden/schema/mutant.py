"""A mutant: a plausible-but-incorrect variant of a fix, as a source patch against the base commit."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


class Operator(StrEnum):
    INCOMPLETE_FIX = "incomplete_fix"
    BEHAVIOR_SUBSTITUTION = "behavior_substitution"
    SYMPTOM_SUPPRESSION = "symptom_suppression"
    INPUT_SPECIFIC_SHORTCUT = "input_specific_shortcut"
    TOKEN_REVERT = "token_revert"
    WIDENED_SCOPE = "widened_scope"
    NARROWED_SCOPE = "narrowed_scope"
    CALLER_PATCH = "caller_patch"
    VANILLA = "vanilla"


MECHANICAL_DEFAULT = (
    Operator.INCOMPLETE_FIX,
    Operator.BEHAVIOR_SUBSTITUTION,
    Operator.SYMPTOM_SUPPRESSION,
    Operator.INPUT_SPECIFIC_SHORTCUT,
    Operator.TOKEN_REVERT,
    Operator.WIDENED_SCOPE,
    Operator.NARROWED_SCOPE,
    Operator.CALLER_PATCH,
)
"""Every built-in mechanical operator (the registry, ``coharden.mutation.registry``, holds their code)."""

TARGETED_OPERATORS = (
    Operator.INCOMPLETE_FIX,
    Operator.BEHAVIOR_SUBSTITUTION,
    Operator.SYMPTOM_SUPPRESSION,
    Operator.INPUT_SPECIFIC_SHORTCUT,
)
"""The paper's four targeted operators (the LLM operators' prompts cover these and ``vanilla``)."""


class Mutant(BaseModel):
    id: str
    operator: Operator
    description: str
    location: str  # "path:line"
    patch: str
    source: str = "mechanical"  # or "llm"
    meta: dict[str, Any] = Field(default_factory=dict)
