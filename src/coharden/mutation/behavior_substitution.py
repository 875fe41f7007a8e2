"""behavior_substitution: rewrite one expression on a line the fix adds, or in a condition that guards one
(libcst, so layout is kept).

Sites: comparison swaps (< <=, > >=, == !=, in / not in, is / is not), and/or, dropping a ``not``,
arithmetic swaps (+ -, * /, // /), numeric constants +-1, True/False, removing one type from an isinstance
tuple, look-alike builtins (min/max, any/all, str/repr, ...) and methods (startswith/endswith,
lower/upper, append/extend, ...), and non-constant slice bounds +-1.

Guard sites: the test of every ``if`` / ``elif`` / ``while`` that encloses a line the fix adds, within the same
function (the fix relies on that condition to reach its new code: a wrong fix gets it subtly wrong too).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import PositionProvider

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.cstedit import LineSites, ParsedModule, parsed
from coharden.mutation.registry import ContextOperator, Example, register
from coharden.schema.mutant import Operator

_COMPARE_SWAPS: dict[type, Callable[[], cst.BaseCompOp]] = {
    cst.LessThan: cst.LessThanEqual,
    cst.LessThanEqual: cst.LessThan,
    cst.GreaterThan: cst.GreaterThanEqual,
    cst.GreaterThanEqual: cst.GreaterThan,
    cst.Equal: cst.NotEqual,
    cst.NotEqual: cst.Equal,
    cst.In: cst.NotIn,
    cst.NotIn: cst.In,
    cst.Is: cst.IsNot,
    cst.IsNot: cst.Is,
}
_BINARY_SWAPS: dict[type, Callable[[], cst.BaseBinaryOp]] = {
    cst.Add: cst.Subtract,
    cst.Subtract: cst.Add,
    cst.Multiply: cst.Divide,
    cst.Divide: cst.Multiply,
    cst.FloorDivide: cst.Divide,
}
_BUILTIN_SWAPS = {"min": "max", "max": "min", "any": "all", "all": "any", "str": "repr", "repr": "str",
                  "sorted": "reversed", "int": "round", "round": "int", "list": "set", "set": "list"}
_METHOD_SWAPS = {"startswith": "endswith", "endswith": "startswith", "lower": "upper", "upper": "lower",
                 "append": "extend", "extend": "append", "lstrip": "rstrip", "rstrip": "lstrip",
                 "find": "rfind", "rfind": "find", "index": "rindex", "rindex": "index", "split": "rsplit",
                 "rsplit": "split", "removeprefix": "removesuffix", "removesuffix": "removeprefix",
                 "keys": "values", "values": "keys", "pop": "get", "get": "pop", "add": "discard"}


@dataclass
class Site:
    node: cst.CSTNode
    replacement: cst.CSTNode
    description: str
    line: int


def code_of(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


class SubstitutionSites(LineSites):
    """The substitution sites of a module on the 1-based ``lines`` (public: ``coharden suite`` reuses it)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, lines: set[int]) -> None:
        self.lines = lines
        self.sites: list[Site] = []

    def _line(self, node: cst.CSTNode) -> int | None:
        line = self.get_metadata(PositionProvider, node).start.line
        return line if line in self.lines else None

    def _add(self, node: cst.CSTNode, replacement: cst.CSTNode, description: str) -> None:
        line = self._line(node)
        if line is not None:
            self.sites.append(Site(node, replacement, description, line))

    def visit_Comparison(self, node: cst.Comparison) -> None:
        for k, target in enumerate(node.comparisons):
            swap = _COMPARE_SWAPS.get(type(target.operator))
            if swap is None:
                continue
            targets = list(node.comparisons)
            targets[k] = target.with_changes(operator=swap())
            new = node.with_changes(comparisons=targets)
            self._add(node, new, f"{code_of(node)} -> {code_of(new)}")

    def visit_BooleanOperation(self, node: cst.BooleanOperation) -> None:
        new_op = cst.Or() if isinstance(node.operator, cst.And) else cst.And()
        new = node.with_changes(operator=new_op)
        self._add(node, new, f"{code_of(node)} -> {code_of(new)}")

    def visit_UnaryOperation(self, node: cst.UnaryOperation) -> None:
        if isinstance(node.operator, cst.Not):
            self._add(node, node.expression, f"{code_of(node)} -> {code_of(node.expression)}")

    def visit_BinaryOperation(self, node: cst.BinaryOperation) -> None:
        swap = _BINARY_SWAPS.get(type(node.operator))
        if swap is not None:
            op: Any = node.operator  # every concrete binary operator has its two whitespace fields
            new = node.with_changes(operator=swap().with_changes(whitespace_before=op.whitespace_before,
                                                                 whitespace_after=op.whitespace_after))
            self._add(node, new, f"{code_of(node)} -> {code_of(new)}")

    def visit_Integer(self, node: cst.Integer) -> None:
        value = node.evaluated_value
        for delta in (1, -1):
            if value + delta >= 0:
                new = cst.Integer(str(value + delta))
                self._add(node, new, f"{node.value} -> {value + delta}")

    def visit_Float(self, node: cst.Float) -> None:
        new = cst.Float(repr(node.evaluated_value + 1))
        self._add(node, new, f"{node.value} -> {new.value}")

    def visit_Name(self, node: cst.Name) -> None:
        if node.value in ("True", "False"):
            new = cst.Name("False" if node.value == "True" else "True")
            self._add(node, new, f"{node.value} -> {new.value}")

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Name):
            if func.value == "isinstance" and len(node.args) == 2 and isinstance(node.args[1].value, cst.Tuple):
                elements = node.args[1].value.elements
                if len(elements) > 1:
                    for k in range(len(elements)):
                        rest = [e.with_changes(comma=cst.MaybeSentinel.DEFAULT) for i, e in enumerate(elements)
                                if i != k]
                        value = rest[0].value if len(rest) == 1 else node.args[1].value.with_changes(elements=rest)
                        new = node.with_changes(args=[node.args[0], node.args[1].with_changes(value=value)])
                        self._add(node, new, f"{code_of(node)} -> {code_of(new)}")
            elif func.value in _BUILTIN_SWAPS:
                new = node.with_changes(func=cst.Name(_BUILTIN_SWAPS[func.value]))
                self._add(node, new, f"{func.value}(...) -> {_BUILTIN_SWAPS[func.value]}(...)")
        elif isinstance(func, cst.Attribute) and func.attr.value in _METHOD_SWAPS:
            other = _METHOD_SWAPS[func.attr.value]
            new = node.with_changes(func=func.with_changes(attr=cst.Name(other)))
            self._add(node, new, f".{func.attr.value}(...) -> .{other}(...)")

    def visit_Slice(self, node: cst.Slice) -> None:
        for part in ("lower", "upper"):
            bound = getattr(node, part)
            if bound is None or isinstance(bound, cst.Integer | cst.UnaryOperation):
                continue  # constants are covered by the numeric +-1 sites
            for op, sign in ((cst.Add(), "+"), (cst.Subtract(), "-")):
                new_bound = cst.BinaryOperation(left=bound, operator=op, right=cst.Integer("1"))
                new = node.with_changes(**{part: new_bound})
                self._add(node, new, f"slice {part} {code_of(bound)} -> {code_of(bound)} {sign} 1")


class SiteReplacer(cst.CSTTransformer):
    """Replace one node (found by identity) of a module; the rest keeps its layout."""

    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        self.target = target
        self.replacement = replacement

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        if original_node is self.target:
            return self.replacement
        return updated_node


class GuardLines(LineSites):
    """The lines of the test of every ``if`` / ``elif`` / ``while`` enclosing one of the 1-based ``added``
    lines in the same function (a ``def`` in between makes the line another function's)."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, added: set[int]) -> None:
        self.added = self.lines = added
        self.found: set[int] = set()
        self._defs: list[tuple[int, int]] = []
        self._guards: list[tuple[int, int, int]] = []  # test's first line, test's last line, statement's last

    def _span(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.end.line

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._defs.append(self._span(node))

    def _guard(self, node: cst.If | cst.While) -> None:
        first, last = self._span(node.test)
        self._guards.append((first, last, self._span(node)[1]))

    def visit_If(self, node: cst.If) -> None:
        self._guard(node)

    def visit_While(self, node: cst.While) -> None:
        self._guard(node)

    def _function_of(self, line: int) -> tuple[int, int] | None:
        inside = [span for span in self._defs if span[0] <= line <= span[1]]
        return max(inside) if inside else None  # the innermost: the one starting last

    def leave_Module(self, original_node: cst.Module) -> None:
        for first, last, end in self._guards:
            function = self._function_of(first)
            if any(last < line <= end and self._function_of(line) == function for line in self.added):
                self.found.update(range(first, last + 1))


def guard_lines(module: ParsedModule, added: set[int]) -> set[int]:
    """The lines of the conditions guarding the ``added`` lines (see :class:`GuardLines`), added ones excluded."""
    finder = GuardLines(added)
    module.visit(finder)
    return finder.found - added


def sites(source: str, lines: set[int]) -> tuple[ParsedModule, list[Site]] | None:
    """The parsed source (shared, see :mod:`coharden.mutation.cstedit`) and its sites on ``lines``."""
    module = parsed(source)
    if module is None:
        return None
    collector = SubstitutionSites(lines)
    module.visit(collector)
    return module, collector.sites


def mutate_file(change: FileChange) -> Iterator[tuple[Site, str, bool]]:
    """(site, mutated file, whether the site is in a guarding condition rather than on an added line)."""
    added = change.added_lines()
    module = parsed(change.new)
    if module is None:
        return
    guards = guard_lines(module, added)
    found = sites(change.new, added | guards)
    if found is None:
        return
    module, all_sites = found
    for site in all_sites:
        yield site, module.replace(site.node, site.replacement), site.line in guards


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    fixed = {c.path: c.new for c in ctx.files}
    for change in ctx.python_files:
        for site, code, on_guard in mutate_file(change):
            files = {**fixed, change.path: code}
            yield RawMutant(Operator.BEHAVIOR_SUBSTITUTION, site.description[:160], f"{change.path}:{site.line}",
                            files, {"site": "guard"} if on_guard else {})


def line_site_mutants(ctx: FixContext, operator: Operator,
                      collector: Callable[[set[int]], LineSites]) -> Iterator[RawMutant]:
    """One mutant per site that ``collector(lines the fix adds)`` finds in each fixed Python file (its
    ``sites``: :class:`Site` s), the other files of the fix as fixed: the loop every line-site operator shares."""
    fixed = {c.path: c.new for c in ctx.files}
    for change in ctx.python_files:
        module = parsed(change.new)
        if module is None:
            continue
        sites = collector(change.added_lines())
        module.visit(sites)
        for site in sites.sites:  # type: ignore[attr-defined]
            yield RawMutant(operator, site.description[:160], f"{change.path}:{site.line}",
                            {**fixed, change.path: module.replace(site.node, site.replacement)})


@register
class BehaviorSubstitution(ContextOperator):
    """Imitates a wrong fix with the right shape but a *slightly wrong expression* (an off-by-one bound, the
    wrong comparison or look-alike call) on a line the fix adds, or in the condition that leads to it."""

    name = Operator.BEHAVIOR_SUBSTITUTION
    from_context = staticmethod(generate)
    EXAMPLES = (Example("def f(x):\n    return x\n", "def f(x):\n    return x if x > 0 else 0\n",
                        "return x if x >= 0 else 0"),
                Example("def f(x, n):\n    if n > 0:\n        return x\n    return 0\n",
                        "def f(x, n):\n    if n > 0:\n        return x[:n]\n    return 0\n", "if n >= 0:"))
