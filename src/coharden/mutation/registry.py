"""The mechanical operator registry: each operator a named class, registered by its :class:`Operator` name.

An operator imitates one kind of real wrong fix (its docstring says which). It gets the fix and what the input
recorder saw (:class:`OperatorInputs`), yields :class:`RawMutant` s, and notes why it produced nothing for a
site in ``inputs.skipped`` (the pool reports those counts). ``examples()`` gives small before/after pairs with
the mutant text each must produce; the parametrized unit test runs every registered operator on its own.

A new built-in operator: a module ``coharden.mutation.NAME`` holding a class with ``name``, ``needs``,
``generate`` and ``examples``, decorated with :func:`register`, and ``NAME`` added to
:data:`~coharden.schema.mutant.BUILTIN` (its order is the registry order; everything else, the default
selection, ``--operators``, the report columns, is derived). One that reads only the fix subclasses
:class:`ContextOperator` and sets ``from_context`` and ``EXAMPLES``.

An operator from outside: an installed distribution declares the class as an entry point of the group
``coharden.operators`` (``NAME = "package.module:Class"``, where ``Class.name == "NAME"``); it is loaded with
the registry, and runs when named (``--operators``, ``MPEConfig.operators``). A plugin that fails to load is
a :class:`OperatorPluginError` naming it and its distribution.
"""

from __future__ import annotations

import abc
import importlib
import threading
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, cast

from coharden.errors import CoHardenError
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.schema.mutant import MECHANICAL_DEFAULT, OPERATOR_GROUP, Operator

#: modules holding the built-in operators, in registry order (which is also the pool's sampling order)
BUILTIN_MODULES = tuple(f"coharden.mutation.{op}" for op in MECHANICAL_DEFAULT)

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
    operators: tuple[Operator, ...] | None = None
    """The pool's chosen operators (None: the default pool), for an operator that combines others' mutants."""
    skipped: Counter[tuple[str, str]] = field(default_factory=Counter)
    """(operator, reason) -> count of sites an operator could not use."""

    def skip(self, operator: Operator, reason: str, count: int = 1) -> None:
        self.skipped[(str(operator), reason)] += count

    def revealing(self) -> list[dict[str, Any]]:
        """Inputs recorded on the fixed code whose outcome differs on the buggy code (or was not seen there)."""
        from coharden.mutation.revealing import revealing_inputs

        return revealing_inputs(self.fixed_records, self.buggy_records)

    def revealing_shapes(self) -> list[dict[str, Any]]:
        """Calls recorded by shape only (values with no safe encoding) whose observed outcome differs on the
        buggy code."""
        from coharden.mutation.revealing import revealing_shapes

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


class ContextOperator(abc.ABC):
    """Base of the operators that read only the fix, not the recorder: ``generate`` runs the operator's
    ``from_context`` (its module's ``generate(ctx)``) and ``examples()`` lists its ``EXAMPLES``."""

    name: ClassVar[Operator]
    needs: ClassVar[frozenset[str]] = frozenset()
    EXAMPLES: ClassVar[tuple[Example, ...]] = ()

    @staticmethod
    @abc.abstractmethod
    def from_context(ctx: FixContext) -> Iterable[RawMutant]:
        """The operator's mutants of the fix (its module's ``generate``); a subclass without it cannot be made."""

    def generate(self, inputs: OperatorInputs) -> Iterable[RawMutant]:
        return type(self).from_context(inputs.ctx)

    @classmethod
    def examples(cls) -> list[Example]:
        return list(cls.EXAMPLES)


class OperatorPluginError(CoHardenError):
    """An operator of the ``coharden.operators`` entry-point group could not be loaded or is not an operator."""


_REGISTRY: dict[Operator, type[MutationOperator]] = {}
_LOCK = threading.RLock()
_PLUGINS_LOADED = False
_OPERATOR_PARTS = ("name", "needs", "generate", "examples")


def register(cls: type[MutationOperator]) -> type[MutationOperator]:
    """Class decorator: make ``cls`` the operator named ``cls.name`` (a new name is an outside operator's)."""
    name = Operator(cls.name)
    with _LOCK:
        if name in _REGISTRY and _REGISTRY[name] is not cls:
            raise ValueError(f"two operators named {name}")
        cls.name = name
        _REGISTRY[name] = cls
    return cls


def load_plugins() -> list[Operator]:
    """Register every operator of the ``coharden.operators`` entry-point group not registered yet (the
    registry does this once per process; call it again after installing one). Raises
    :class:`OperatorPluginError` naming the first plugin that cannot be loaded."""
    global _PLUGINS_LOADED
    from importlib.metadata import entry_points

    loaded = []
    with _LOCK:
        for ep in entry_points(group=OPERATOR_GROUP):
            try:
                op = Operator(ep.name)
            except ValueError as exc:
                raise _plugin_error(ep, str(exc)) from None
            if op in _REGISTRY:
                continue
            try:
                cls: Any = ep.load()
            except Exception as exc:  # noqa: BLE001 - any failure of a plugin's import is reported as its own
                raise _plugin_error(ep, f"{type(exc).__name__}: {exc}") from None
            if not isinstance(cls, type):
                raise _plugin_error(ep, f"not a class but {type(cls).__name__}")
            missing = [part for part in _OPERATOR_PARTS if not hasattr(cls, part)]
            if missing:
                raise _plugin_error(ep, f"not an operator class (it lacks {', '.join(missing)})")
            operator = cast("type[MutationOperator]", cls)
            if str(operator.name) != ep.name:
                raise _plugin_error(ep, f"the class is named {str(operator.name)!r}, the entry point {ep.name!r}")
            register(operator)
            loaded.append(op)
        _PLUGINS_LOADED = True
    return loaded


def _plugin_error(ep: Any, reason: str) -> OperatorPluginError:
    dist = getattr(ep, "dist", None)
    source = f" (distribution {dist.name} {dist.version})" if dist is not None else ""
    return OperatorPluginError(f"mutation operator plugin {ep.name!r}{source}, entry point "
                               f"{ep.name} = {ep.value} of group {OPERATOR_GROUP}: {reason}")


def registry() -> dict[Operator, type[MutationOperator]]:
    """Every registered operator by name: the built-in ones in ``BUILTIN_MODULES`` order (imported on first
    use), then the outside ones in registration order (the entry points loaded on first use)."""
    for module in BUILTIN_MODULES:
        importlib.import_module(module)
    if not _PLUGINS_LOADED:
        load_plugins()
    # in BUILTIN_MODULES order whatever imported them first (a test or a caller may import one module early),
    # then any operator registered from elsewhere, in registration order
    with _LOCK:
        builtin = [op for op in MECHANICAL_DEFAULT if op in _REGISTRY]
        return {op: _REGISTRY[op] for op in [*builtin, *(op for op in _REGISTRY if op not in builtin)]}


def operator_names() -> list[str]:
    return [str(op) for op in registry()]


def builtin_names() -> list[str]:
    """The built-in operators' names without importing them: for ``--help`` texts, which must not pay for
    importing libcst."""
    return [str(op) for op in MECHANICAL_DEFAULT]


def get(name: Operator | str) -> MutationOperator:
    """An instance of the operator called ``name``; a clear error naming the known ones otherwise."""
    ops = registry()
    try:
        return ops[Operator(name)]()
    except (ValueError, KeyError):
        raise ValueError(f"unknown mutation operator {name!r} (known: {', '.join(operator_names())})") from None
