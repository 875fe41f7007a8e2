"""A mutant: a plausible-but-incorrect variant of a fix, as a source patch against the base commit."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable
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
        """The initials of its words (``incomplete_fix``: IF); report columns take :func:`short_names`, which
        keeps them distinct."""
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


def short_names(names: Iterable[str]) -> dict[str, str]:
    """Report-column abbreviations of operator ``names``, each distinct: the initials of its words
    (``incomplete_fix``: IF), and where two names share them (an outside operator's ``narrow_search`` beside
    ``narrowed_scope``) the last word of each grows a letter at a time until they differ (NSe, NSc)."""
    names = list(dict.fromkeys(names))
    length = dict.fromkeys(names, 1)  # letters taken from the last word

    def short(name: str) -> str:
        words = [w for w in name.split("_") if w] or [name]
        last = words[-1][:length[name]]
        return "".join(w[:1] for w in words[:-1]).upper() + last[:1].upper() + last[1:]

    while True:
        by_short: dict[str, list[str]] = {}
        for name in names:
            by_short.setdefault(short(name), []).append(name)
        clashes = [group for group in by_short.values() if len(group) > 1]
        grown = False
        for group in clashes:
            for name in group:
                if length[name] < len(name.split("_")[-1] or name):
                    length[name] += 1
                    grown = True
        if not clashes or not grown:
            break
    out = {name: short(name) for name in names}
    taken: dict[str, int] = {}
    for name in names:  # names alike to the end (``a_b`` and ``a__b``) are told apart by a number
        taken[out[name]] = taken.get(out[name], 0) + 1
        if taken[out[name]] > 1:
            out[name] += str(taken[out[name]])
    return out


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
