"""The mechanical operator registry: each operator a named class, registered by its :class:`Operator` name.

An operator imitates one kind of real wrong fix (its docstring says which). It gets the fix and what the input
recorder saw (:class:`OperatorInputs`), yields :class:`RawMutant` s, and notes why it produced nothing for a
site in ``inputs.skipped`` (the pool reports those counts). ``examples()`` gives small before/after pairs with
the mutant text each must produce; the parametrized unit test runs every registered operator on its own.

A new operator: a class with ``name``, ``needs``, ``generate`` and ``examples``, decorated with
:func:`register`, in a module listed in ``BUILTIN_MODULES``; one that reads only the fix subclasses
:class:`ContextOperator` and sets ``from_context`` and ``EXAMPLES``.
"""

from __future__ import annotations

import importlib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.schema.mutant import Operator

#: modules holding the built-in operators, in registry order (which is also the pool's sampling order)
BUILTIN_MODULES = (
    "coharden.mutation.incomplete_fix",
    "coharden.mutation.behavior_substitution",
    "coharden.mutation.symptom_suppression",
    "coharden.mutation.input_specific_shortcut",
    "coharden.mutation.token_revert",
    "coharden.mutation.widened_scope",
    "coharden.mutation.narrowed_scope",
    "coharden.mutation.caller_patch",
)

#: what an operator may need recorded before it runs
FIXED_RECORDS = "fixed_records"  # the touched functions' inputs/outcomes (and callers) on the fixed code
BUGGY_RECORDS = "buggy_records"  # the same on the buggy code, with the fixed run's inputs probed


@dataclass
class OperatorInputs:
    """Everything an operator may use: the fix, the recorder's data, and a way to read other files."""

    ctx: FixContext
    fixed_records: list[dict[str, Any]] = field(default_factory=list)
    buggy_records: list[dict[str, Any]] = field(default_factory=list)
    base_file: Callable[[str], str | None] = lambda path: None
    """Buggy (base commit) content of any repository file, for operators that patch outside the fix."""
    is_test_path: Callable[[str], bool] = lambda path: False
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(operator, reason) -> count of sites an operator could not use."""

    def skip(self, operator: Operator, reason: str, count: int = 1) -> None:
        self.skipped[(operator.value, reason)] += count

    def revealing(self) -> list[dict[str, Any]]:
        """Inputs recorded on the fixed code whose outcome differs on the buggy code (or was not seen there)."""
        from coharden.mutation.recording import revealing_inputs

        return revealing_inputs(self.fixed_records, self.buggy_records)

    def revealing_shapes(self) -> list[dict[str, Any]]:
        """Calls recorded by shape only (values with no safe encoding) whose observed outcome differs on the
        buggy code."""
        from coharden.mutation.recording import revealing_shapes

        return revealing_shapes(self.fixed_records, self.buggy_records)


@dataclass(frozen=True)
class Example:
    """A small fix (buggy -> fixed, one file ``m.py``) and a text one of the operator's mutants must contain."""

    buggy: str
    fixed: str
    expect: str
    records: tuple[dict[str, Any], ...] = ()  # fixed-code records (buggy records are derived as 'not seen')
    extra_files: tuple[tuple[str, str], ...] = ()  # other repository files (path, buggy content)


class MutationOperator(Protocol):
    name: ClassVar[Operator]
    needs: ClassVar[frozenset[str]]

    def generate(self, inputs: OperatorInputs) -> Iterable[RawMutant]: ...

    @classmethod
    def examples(cls) -> list[Example]: ...


class ContextOperator:
    """Base of the operators that read only the fix, not the recorder: ``generate`` runs the operator's
    ``from_context`` (its module's ``generate(ctx)``) and ``examples()`` lists its ``EXAMPLES``."""

    needs: ClassVar[frozenset[str]] = frozenset()
    from_context: ClassVar[Callable[[FixContext], Iterable[RawMutant]]]
    EXAMPLES: ClassVar[tuple[Example, ...]] = ()

    def generate(self, inputs: OperatorInputs) -> Iterable[RawMutant]:
        return type(self).from_context(inputs.ctx)

    @classmethod
    def examples(cls) -> list[Example]:
        return list(cls.EXAMPLES)


_REGISTRY: dict[Operator, type[MutationOperator]] = {}


def register(cls: type[MutationOperator]) -> type[MutationOperator]:
    """Class decorator: make ``cls`` the operator named ``cls.name``."""
    if cls.name in _REGISTRY and _REGISTRY[cls.name] is not cls:
        raise ValueError(f"two operators named {cls.name.value}")
    _REGISTRY[cls.name] = cls
    return cls


def registry() -> dict[Operator, type[MutationOperator]]:
    """Every registered operator by name, in ``BUILTIN_MODULES`` order (imports them on first use)."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    # in BUILTIN_MODULES order whatever imported them first (a test or a caller may import one module early),
    # then any operator registered from elsewhere, in registration order
    builtin = [Operator(name) for name in builtin_names() if Operator(name) in _REGISTRY]
    return {op: _REGISTRY[op] for op in [*builtin, *(op for op in _REGISTRY if op not in builtin)]}


def operator_names() -> list[str]:
    return [op.value for op in registry()]


def builtin_names() -> list[str]:
    """The built-in operators' names without importing them (each module is named after its operator): for
    ``--help`` texts, which must not pay for importing libcst."""
    return [module.rsplit(".", 1)[1] for module in BUILTIN_MODULES]


def get(name: Operator | str) -> MutationOperator:
    """An instance of the operator called ``name``; a clear error naming the known ones otherwise."""
    ops = registry()
    try:
        return ops[Operator(name)]()
    except (ValueError, KeyError):
        raise ValueError(f"unknown mutation operator {name!r} (known: {', '.join(operator_names())})") from None
