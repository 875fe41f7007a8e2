"""A mutant: a plausible-but-incorrect variant of a fix, as a source patch against the base commit."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Any, ClassVar

from pydantic import AfterValidator, BaseModel, Field, GetCoreSchemaHandler
from pydantic_core import CoreSchema, core_schema

OPERATOR_GROUP = "coharden.operators"
"""The entry-point group through which an installed distribution adds mutation operators: an entry point
``NAME = "package.module:Class"`` (see :mod:`coharden.mutation.registry`)."""

_OPERATOR_NAME = re.compile(r"[a-z][a-z0-9_]*")


class Operator(str):
    """The name of a mutant operator: a plain word (lower-case letters, digits and underscores, a letter first),
    compared, hashed, printed and stored as the string it is. The class constants are the built-in mechanical
    operators (each the name of its module in ``coharden.mutation``) and ``vanilla`` (the LLM mutator's own);
    :data:`BUILTIN` lists them in registry order.

    The name alone is checked here: an operator from outside (an entry point of :data:`OPERATOR_GROUP`) needs
    nothing made at run time, and a stored mutant of an operator no longer installed still reads back. Whether
    a name is one that can run is asked where operators are selected (:func:`known_operator`, and the registry
    in ``coharden.mutation.registry``)."""

    __slots__ = ()

    INCOMPLETE_FIX: ClassVar[Operator]
    BEHAVIOR_SUBSTITUTION: ClassVar[Operator]
    SYMPTOM_SUPPRESSION: ClassVar[Operator]
    INPUT_SPECIFIC_SHORTCUT: ClassVar[Operator]
    TOKEN_REVERT: ClassVar[Operator]
    WIDENED_SCOPE: ClassVar[Operator]
    NARROWED_SCOPE: ClassVar[Operator]
    CALLER_PATCH: ClassVar[Operator]
    CALL_ARGUMENT: ClassVar[Operator]
    MISPLACED_GUARD: ClassVar[Operator]
    HIGHER_ORDER: ClassVar[Operator]
    VANILLA: ClassVar[Operator]

    def __new__(cls, name: str) -> Operator:
        if type(name) is cls:
            return name
        if not isinstance(name, str) or not _OPERATOR_NAME.fullmatch(name):
            raise ValueError(f"{name!r} is not a valid Operator name: lower-case letters, digits and underscores, "
                             "a letter first")
        return super().__new__(cls, name)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        """Validated from a string, stored as one: a row or a cache key holds the name as it always did."""
        return core_schema.no_info_after_validator_function(cls, core_schema.str_schema(),
                                                            serialization=core_schema.to_string_ser_schema())


BUILTIN: tuple[Operator, ...] = tuple(Operator(name) for name in (
    "incomplete_fix", "behavior_substitution", "symptom_suppression", "input_specific_shortcut", "token_revert",
    "widened_scope", "narrowed_scope", "caller_patch", "call_argument", "misplaced_guard", "higher_order",
    "vanilla"))
"""The built-in operators, in registry order (the order of the report's columns and of the pool's draw)."""
for _op in BUILTIN:
    setattr(Operator, _op.upper(), _op)
del _op


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


def known_operator(name: str) -> Operator:
    """``name`` as an operator that can be selected: a built-in one, or one an installed distribution declares
    (read from its metadata, nothing imported); a ``ValueError`` naming the known ones otherwise."""
    op = Operator(name)
    if op in BUILTIN or op in outside_names():
        return op
    raise ValueError(f"unknown mutation operator {name!r} (known: {', '.join([*BUILTIN, *outside_names()])})")


KnownOperator = Annotated[Operator, AfterValidator(known_operator)]
"""An operator field of a selection (``MPEConfig.operators``): checked against the operators known."""

MECHANICAL_DEFAULT: tuple[Operator, ...] = tuple(op for op in BUILTIN if op != Operator.VANILLA)
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
