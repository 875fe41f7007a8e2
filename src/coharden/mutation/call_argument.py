"""call_argument: the fix's own calls with a wrong argument list (libcst, so layout is kept).

Sites, on the fixed code, for calls and arguments on lines the fix adds:

* an argument dropped: each keyword argument (``**kwargs`` too), and the last positional one of a call with
  two or more (a positional argument in the middle would shift the others; whether one has a default is not
  known here), except in a call of a builtin (``isinstance``, ``max``: dropped, it raises);
* two neighbouring positional arguments swapped (not a builtin's either);
* a plain-name argument replaced by another local of the same function (a parameter or a name assigned in
  it) that the fix's added lines use: the right call with the wrong variable;
* the helper skipped: a call with a positional first argument replaced by that argument (``saferepr(x)`` ->
  ``x``), unless the call is a statement of its own (dropping a line is ``incomplete_fix``'s), the exception
  of a ``raise``, or of a class (a capitalised name: constructing it is the point).
"""

from __future__ import annotations

import builtins
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import libcst as cst
from libcst.metadata import PositionProvider

from coharden.mutation.behavior_substitution import Site, code_of, line_site_mutants
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.cstedit import LineSites
from coharden.mutation.registry import ContextOperator, Example, register
from coharden.schema.mutant import Operator

MAX_OTHER_NAMES = 3
"""Replacement names tried per argument (the first locals in order of use on the added lines): a function with
many locals would otherwise give one mutant per pair, most of them the same wrong fix told apart by a name."""

_BUILTINS = frozenset(dir(builtins))
_ATOMS = (cst.Name, cst.Attribute, cst.Call, cst.Subscript, cst.SimpleString, cst.FormattedString, cst.Integer,
          cst.Float, cst.Imaginary, cst.List, cst.Dict, cst.Set, cst.ListComp, cst.SetComp, cst.DictComp,
          cst.ConcatenatedString, cst.Ellipsis)


def _bare(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``expr`` ready to stand where a call stood: parenthesised unless it binds as tightly as a call."""
    if isinstance(expr, _ATOMS) or expr.lpar:
        return expr
    return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _without(args: Sequence[cst.Arg], k: int) -> list[cst.Arg]:
    """``args`` without the ``k``-th; the new last argument takes the dropped last one's comma (none, or a
    trailing one), so no ``f(a, )`` is left."""
    rest = [a for i, a in enumerate(args) if i != k]
    if k == len(args) - 1 and rest:
        rest[-1] = rest[-1].with_changes(comma=args[k].comma)
    return rest


@dataclass
class _Function:
    """What one function knows: its locals, and the local names its added lines use (in order of use)."""

    node: cst.FunctionDef
    local: set[str] = field(default_factory=set)
    used: list[str] = field(default_factory=list)


class _Locals(cst.CSTVisitor):
    """Parameters and names a function assigns itself (nested functions, classes and lambdas not entered)."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Param(self, node: cst.Param) -> None:
        self.names.add(node.name.value)

    def _targets(self, target: cst.BaseExpression | None) -> None:
        if isinstance(target, cst.Name):
            self.names.add(target.value)
        elif isinstance(target, cst.Tuple | cst.List):
            for element in target.elements:
                self._targets(element.value)

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._targets(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._targets(node.target)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._targets(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._targets(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._targets(node.name)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._targets(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        return not self.names  # the function itself (its parameters come first); never a nested one

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        return False

    def visit_Lambda(self, node: cst.Lambda) -> bool:
        return False


class CallSites(LineSites):
    """The argument sites of a module on the 1-based fixed-file lines ``added``."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, added: set[int]) -> None:
        self.added = self.lines = added
        self.sites: list[Site] = []
        self._functions: list[_Function] = []
        self._calls: list[tuple[cst.Call, _Function | None, bool]] = []
        self._not_loads: set[int] = set()  # Name nodes that are attribute names or keywords, not variables
        self._statement_calls: set[int] = set()

    def _line(self, node: cst.CSTNode) -> int:
        return self.get_metadata(PositionProvider, node).start.line

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        finder = _Locals()
        node.visit(finder)
        self._functions.append(_Function(node, local=finder.names))

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        # libcst leaves a node whose visit :class:`LineSites` skipped (a function without added lines) too
        if self._functions and self._functions[-1].node is original_node:
            self._functions.pop()

    def visit_Attribute(self, node: cst.Attribute) -> None:
        self._not_loads.add(id(node.attr))

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self._not_loads.add(id(node.keyword))

    def visit_Expr(self, node: cst.Expr) -> None:
        self._statement_calls.add(id(node.value))

    def visit_Raise(self, node: cst.Raise) -> None:
        if node.exc is not None:  # ``raise E(msg)`` -> ``raise msg`` is a TypeError, not a wrong fix
            self._statement_calls.add(id(node.exc))

    def visit_Name(self, node: cst.Name) -> None:
        function = self._functions[-1] if self._functions else None
        if function is not None and id(node) not in self._not_loads and node.value in function.local \
                and node.value not in function.used and self._line(node) in self.added:
            function.used.append(node.value)

    def visit_Call(self, node: cst.Call) -> None:
        self._calls.append((node, self._functions[-1] if self._functions else None, id(node) in self._statement_calls))

    def leave_Module(self, original_node: cst.Module) -> None:
        # the names a function's added lines use are known only once the whole function is visited
        for call, function, statement in self._calls:
            self._call_sites(call, function, statement)

    def _add(self, node: cst.CSTNode, replacement: cst.CSTNode, description: str, line: int) -> None:
        self.sites.append(Site(node, replacement, description, line))

    def _call_sites(self, call: cst.Call, function: _Function | None, statement: bool) -> None:
        args = list(call.args)
        positional = [k for k, a in enumerate(args) if a.keyword is None and not a.star]
        # a builtin's positional arguments are fixed (isinstance, max, getattr): dropped or swapped, it raises
        fixed_arity = isinstance(call.func, cst.Name) and call.func.value in _BUILTINS
        call_added = self._line(call) in self.added
        name = code_of(call.func)
        for k, arg in enumerate(args):
            line = self._line(arg)
            if line not in self.added:
                continue
            if arg.keyword is not None or arg.star == "**":
                new = call.with_changes(args=_without(args, k))
                dropped = code_of(arg.with_changes(comma=cst.MaybeSentinel.DEFAULT))
                self._add(call, new, f"{name}(...) without {dropped}", line)
            elif not arg.star and not fixed_arity and len(positional) >= 2 and k == positional[-1]:
                new = call.with_changes(args=_without(args, k))
                self._add(call, new, f"{name}(...) without its last argument {code_of(arg.value)}", line)
            if isinstance(arg.value, cst.Name) and function is not None and arg.value.value in function.local:
                others = [n for n in function.used if n != arg.value.value][:MAX_OTHER_NAMES]
                for other in others:
                    new = call.with_changes(args=[a.with_changes(value=cst.Name(other)) if i == k else a
                                                  for i, a in enumerate(args)])
                    where = f"{arg.keyword.value}=" if arg.keyword is not None else ""
                    self._add(call, new, f"{name}(...): argument {where}{arg.value.value} -> {other}", line)
        if not call_added:
            return
        line = self._line(call)
        for left, right in zip(positional, positional[1:], strict=False) if not fixed_arity else ():
            if right != left + 1 or code_of(args[left].value) == code_of(args[right].value):
                continue
            swapped = list(args)
            swapped[left] = args[left].with_changes(value=args[right].value)
            swapped[right] = args[right].with_changes(value=args[left].value)
            self._add(call, call.with_changes(args=swapped),
                      f"{name}(...): arguments {code_of(args[left].value)} and {code_of(args[right].value)} swapped",
                      line)
        constructor = code_of(call.func).rpartition(".")[2][:1].isupper()  # a class: its instance is the point
        if positional and positional[0] == 0 and not statement and not constructor:
            first = args[0].value
            more = ", ..." if len(args) > 1 else ""
            self._add(call, _bare(first), f"{name}({code_of(first)}{more}) -> {code_of(first)} (call skipped)", line)


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    return line_site_mutants(ctx, Operator.CALL_ARGUMENT, CallSites)


@register
class CallArgument(ContextOperator):
    """Imitates a wrong fix that calls the right helper *with the wrong arguments*: a keyword the fix needs
    left out (pytest-7205's wrong fix called ``saferepr`` without ``maxsize``), the arguments in the wrong
    order, a different variable passed (requests-1921's wrong fix read ``request_setting`` where the merged
    one was meant), or the helper not called at all."""

    name = Operator.CALL_ARGUMENT
    from_context = staticmethod(generate)
    EXAMPLES = (
        Example("def f(v, n):\n    return str(v)\n",
                "def f(v, n):\n    return shorten(repr(v), n, end='...')\n",
                "return shorten(repr(v), n)"),
        Example("def f(a, b):\n    return a\n", "def f(a, b):\n    return pick(a, b)\n", "return pick(b, a)"),
        Example("def f(v, n):\n    return v\n", "def f(v, n):\n    return clip(v, limit=n)\n",
                "return clip(v, limit=v)"),
        Example("def f(v):\n    return v\n", "def f(v):\n    return saferepr(v) + '!'\n", "return v + '!'"),
    )
