"""A mutant: a plausible-but-incorrect variant of a fix, as a source patch against the base commit."""

from __future__ import annotations

import re
import threading
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field

OPERATOR_GROUP = "coharden.operators"
"""The entry-point group through which an installed distribution adds mutation operators: an entry point
``NAME = "package.module:Class"`` (see :mod:`coharden.mutation.registry`)."""

_OPERATOR_NAME = re.compile(r"[a-z][a-z0-9_]*")
_RUNTIME_NAMES: set[str] = set()
_NAMES_LOCK = threading.Lock()


class Operator(StrEnum):
    """The name of a mutant operator. The members are the built-in mechanical operators, in registry order
    (each the name of its module in ``coharden.mutation``), and ``vanilla`` (the LLM mutator's own).

    An operator from outside (an entry point of :data:`OPERATOR_GROUP`, or a class registered at run time) is
    a member too, made on first use, so a mutant, a config or ``--operators`` naming it validates; iterating
    the enum lists the built-in names only (the registry lists every operator)."""

    INCOMPLETE_FIX = "incomplete_fix"
    BEHAVIOR_SUBSTITUTION = "behavior_substitution"
    SYMPTOM_SUPPRESSION = "symptom_suppression"
    INPUT_SPECIFIC_SHORTCUT = "input_specific_shortcut"
    TOKEN_REVERT = "token_revert"
    WIDENED_SCOPE = "widened_scope"
    NARROWED_SCOPE = "narrowed_scope"
    CALLER_PATCH = "caller_patch"
    CALL_ARGUMENT = "call_argument"
    MISPLACED_GUARD = "misplaced_guard"
    HIGHER_ORDER = "higher_order"
    VANILLA = "vanilla"

    @property
    def short(self) -> str:
        """The abbreviation of report columns: the initials of its words (``incomplete_fix``: IF)."""
        return "".join(word[:1] for word in self.value.split("_")).upper()

    @classmethod
    def _missing_(cls, value: object) -> Operator | None:
        if isinstance(value, str) and (value in _RUNTIME_NAMES or value in outside_names()):
            return cls._outside(value)
        return None

    @classmethod
    def named(cls, name: str) -> Operator:
        """The operator called ``name``, made a member if it is a new (outside) operator's."""
        if name in cls._value2member_map_:
            return cls(name)
        if not _OPERATOR_NAME.fullmatch(name):
            raise ValueError(f"operator name {name!r}: lower-case letters, digits and underscores, a letter first")
        with _NAMES_LOCK:
            _RUNTIME_NAMES.add(name)
        return cls(name)

    @classmethod
    def _outside(cls, name: str) -> Operator:
        with _NAMES_LOCK:
            member = cls._value2member_map_.get(name)
            if member is None:
                member = str.__new__(cls, name)
                member._name_ = name.upper()
                member._value_ = name
                cls._value2member_map_[name] = member
        return member  # type: ignore[return-value]


def outside_names() -> list[str]:
    """Names of the operators installed distributions declare (entry points of :data:`OPERATOR_GROUP`), read
    from their metadata: nothing of theirs is imported."""
    from importlib.metadata import entry_points

    return [ep.name for ep in entry_points(group=OPERATOR_GROUP) if _OPERATOR_NAME.fullmatch(ep.name)]


MECHANICAL_DEFAULT: tuple[Operator, ...] = tuple(op for op in Operator if op is not Operator.VANILLA)
"""The built-in mechanical operators, in registry order: the default selection (an outside operator runs
only when named, so installing a package does not change a run's results or its cache keys). The registry,
``coharden.mutation.registry``, holds their code, one module named after each."""

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
    """The mutant as a patch of the buggy code (what is applied)."""
    source: str = "mechanical"  # or "llm"
    meta: dict[str, Any] = Field(default_factory=dict)
    change: str = ""
    """The diff from the fixed code to the mutant: what the operator changed, as mutmut's ``show`` diffs against
    the code it mutated (empty in results stored before it was kept)."""
