"""Parsed sources shared by the operators, and one-node replacements regenerated in time proportional to the
enclosing statement rather than to the file.

Building a pool on a sympy fix rewrites files of 2,000 lines dozens of times. Done naively each mutant costs a
libcst parse, a transformer visiting every node of the module, and code generation of the whole module: most
of the pool's time (sympy-16597: 107 s of 132 s). Here:

* :func:`parsed` parses a source once (a small bounded memo keyed by the text: the operators of one pool ask
  for the same few files again and again, and libcst trees are immutable, so sharing them is safe);
* while generating the module's code once, :class:`ParsedModule` records, for every statement in a body (the
  module's or an indented block's), which of the module's output tokens it produced and the indentation it was
  generated under. A node replaced inside statement ``S`` changes only ``S``'s tokens (code generation is
  compositional: a node's tokens depend only on the indentation it starts at), so the new file is the tokens
  before ``S``, the regenerated ``S``, and the tokens after ``S``.

:meth:`ParsedModule.replace` is exactly ``module.visit(SiteReplacer(node, replacement)).code``; it falls back
to that whenever the shortcut does not apply (a node it cannot place, a file without a trailing newline), and
``tests/mutation/test_cstedit.py`` checks the two agree on every site of real files and that pools are unchanged.

:class:`ScopedVisitor` and :class:`ScopedTransformer` know the qualified name of the definition they are in
(:class:`Scopes`), for the operators that find or rewrite a function by that name.
"""

from __future__ import annotations

import bisect
import functools
import threading
from typing import Any, final

import libcst as cst
from libcst._nodes.internal import CodegenState
from libcst.metadata import MetadataWrapper, PositionProvider

_Span = tuple[int, int, tuple[str, ...]]  # first token, token after the last, indentation at the start


class _RecordingState(CodegenState):
    """Code generation that notes each node's parent and token span."""

    def __init__(self, default_indent: str, default_newline: str) -> None:
        super().__init__(default_indent=default_indent, default_newline=default_newline)
        self.stack: list[cst.CSTNode] = []
        self.parents: dict[int, cst.CSTNode] = {}
        self.starts: dict[int, tuple[int, tuple[str, ...]]] = {}
        self.spans: dict[int, _Span] = {}

    def before_codegen(self, node: cst.CSTNode) -> None:
        if self.stack:
            self.parents[id(node)] = self.stack[-1]
        self.stack.append(node)
        if isinstance(node, cst.BaseStatement):
            self.starts[id(node)] = (len(self.tokens), tuple(self.indent_tokens))

    def after_codegen(self, node: cst.CSTNode) -> None:
        self.stack.pop()
        start = self.starts.pop(id(node), None)
        if start is not None:
            self.spans[id(node)] = (start[0], len(self.tokens), start[1])


class _PathReplacer(cst.CSTTransformer):
    """Replace ``target`` (by identity), descending only into the nodes on the path to it."""

    def __init__(self, path: set[int], target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        self.path, self.target, self.replacement = path, target, replacement

    def on_visit(self, node: cst.CSTNode) -> bool:
        return id(node) in self.path and node is not self.target

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:  # noqa: ANN401
        return self.replacement if original_node is self.target else updated_node


class _FullReplacer(cst.CSTTransformer):
    def __init__(self, target: cst.CSTNode, replacement: cst.CSTNode) -> None:
        self.target, self.replacement = target, replacement

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> Any:  # noqa: ANN401
        return self.replacement if original_node is self.target else updated_node


class Scopes:
    """The classes and functions around the node being visited, outermost first, by their nodes."""

    def __init__(self) -> None:
        self._stack: list[cst.ClassDef | cst.FunctionDef] = []

    def enter(self, node: cst.ClassDef | cst.FunctionDef) -> None:
        self._stack.append(node)

    def leave(self) -> None:
        self._stack.pop()

    def qualname(self) -> str:
        """The dotted names of all the enclosing definitions (``Class.method``, ``outer.inner``)."""
        return ".".join(scope.name.value for scope in self._stack)

    def function(self) -> str | None:
        """The qualified name of the innermost function; None in a class body or at module level."""
        return self.qualname() if self._stack and isinstance(self._stack[-1], cst.FunctionDef) else None

    def enclosing_class(self) -> str | None:
        """The name of the class whose body holds the innermost definition (a method's class), else None."""
        outer = self._stack[-2] if len(self._stack) > 1 else None
        return outer.name.value if isinstance(outer, cst.ClassDef) else None


class _Scoped(cst.MetadataDependent):
    """What :class:`ScopedVisitor` and :class:`ScopedTransformer` share: ``self.scopes``, kept in libcst's hooks
    of the two definitions. The hooks are final, so that no subclass can skip a step: a subclass implements
    :meth:`visit_function` (and a transformer ``leave_function``) instead. Hooks by node name rather than an
    ``on_visit`` override, which would cost every node of the module a call."""

    def __init__(self) -> None:
        super().__init__()
        self.scopes = Scopes()

    @final
    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        self.scopes.enter(node)

    @final
    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self.scopes.enter(node)
        self.visit_function(node)

    def visit_function(self, node: cst.FunctionDef) -> None:
        """Called on entering a function, which is then the innermost scope."""


class ScopedVisitor(_Scoped, cst.CSTVisitor):
    """A visitor that knows its :class:`Scopes` (``self.scopes``) at every node."""

    @final
    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        self.scopes.leave()

    @final
    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.scopes.leave()


class ScopedTransformer(_Scoped, cst.CSTTransformer):
    """A transformer that knows its :class:`Scopes` (``self.scopes``, of the original nodes) at every node."""

    @final
    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.scopes.leave()
        return updated_node

    @final
    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
                          ) -> cst.FunctionDef | cst.FlattenSentinel[cst.BaseStatement]:
        result = self.leave_function(original_node, updated_node)
        self.scopes.leave()
        return result

    def leave_function(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
                       ) -> cst.FunctionDef | cst.FlattenSentinel[cst.BaseStatement]:
        """Called on leaving a function, which is still the innermost scope; returns what replaces it."""
        return updated_node


class _Functions(ScopedVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, list[cst.FunctionDef]] = {}

    def on_visit(self, node: cst.CSTNode) -> bool:
        # a definition lies only in a body: simple statements and expressions (lambdas are no FunctionDef)
        # need no visit, which skips most of the module's nodes
        if isinstance(node, cst.SimpleStatementLine | cst.BaseExpression | cst.Decorator | cst.Parameters):
            return False
        return super().on_visit(node)

    def visit_function(self, node: cst.FunctionDef) -> None:
        self.found.setdefault(self.scopes.qualname(), []).append(node)


class ParsedModule:
    """One parsed source: the module, its metadata wrapper (positions resolved once) and its code pieces."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.module = cst.parse_module(source)
        self._lock = threading.Lock()
        self._wrapper: MetadataWrapper | None = None
        self._functions: dict[str, list[cst.FunctionDef]] | None = None
        state = _RecordingState(self.module.default_indent, self.module.default_newline)
        self.module._codegen(state)
        self._tokens = state.tokens
        self._parents = state.parents
        self._spans = state.spans
        # the shortcut is exact only where the module's code is the plain concatenation of its tokens
        self._exact = self.module.has_trailing_newline and "".join(self._tokens) == source

    @property
    def wrapper(self) -> MetadataWrapper:
        """A metadata wrapper over :attr:`module` itself (not a copy: site nodes are this module's nodes); a
        provider's metadata is resolved once and kept."""
        with self._lock:
            if self._wrapper is None:
                self._wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            return self._wrapper

    def visit(self, visitor: cst.CSTVisitor) -> None:
        with self._lock:  # resolving metadata fills the wrapper's cache: one thread at a time
            if self._wrapper is None:
                self._wrapper = MetadataWrapper(self.module, unsafe_skip_copy=True)
            self._wrapper.visit(visitor)


    def functions(self) -> dict[str, list[cst.FunctionDef]]:
        """Qualified name (``Class.method``, ``outer.inner``) -> its definitions, in source order."""
        with self._lock:
            if self._functions is None:
                finder = _Functions()
                self.module.visit(finder)
                self._functions = finder.found
            return self._functions

    def replace(self, target: cst.CSTNode, replacement: cst.CSTNode) -> str:
        """The module's code with ``target`` (a node of :attr:`module`) replaced by ``replacement``."""
        if self._exact and isinstance(replacement, cst.CSTNode):
            path: list[cst.CSTNode] = [target]
            while id(path[-1]) in self._parents:
                path.append(self._parents[id(path[-1])])
            if path[-1] is self.module:
                for k, node in enumerate(path):
                    span = self._spans.get(id(node))
                    parent = path[k + 1] if k + 1 < len(path) else None
                    if span is not None and isinstance(parent, cst.Module | cst.IndentedBlock):
                        return self._splice(node, span, {id(n) for n in path[: k + 1]}, target, replacement)
        return self.full_replace(target, replacement)

    def _splice(self, statement: cst.CSTNode, span: _Span, path: set[int], target: cst.CSTNode,
                replacement: cst.CSTNode) -> str:
        new = replacement if statement is target else statement.visit(_PathReplacer(path, target, replacement))
        if not isinstance(new, cst.CSTNode):  # the replacer removes nothing; a sentinel would be spliced whole
            return self.full_replace(target, replacement)
        start, end, indent = span
        state = CodegenState(default_indent=self.module.default_indent,
                             default_newline=self.module.default_newline, indent_tokens=list(indent))
        new._codegen(state)
        return "".join(self._tokens[:start]) + "".join(state.tokens) + "".join(self._tokens[end:])

    def full_replace(self, target: cst.CSTNode, replacement: cst.CSTNode) -> str:
        """The reference: a transformer over the whole module, then the whole module's code."""
        return self.module.visit(_FullReplacer(target, replacement)).code


class LineSites(cst.CSTVisitor):
    """Base of the site collectors that only look at nodes starting on given lines (``self.lines``): a node
    whose lines hold none of them is not entered (its sites would all be elsewhere), so a visit costs the
    statements around the fix rather than the file. Subclasses declare ``PositionProvider``."""

    lines: set[int]
    _sorted: tuple[set[int], list[int]] | None = None

    def on_visit(self, node: cst.CSTNode) -> bool:
        if not isinstance(node, cst.Module):
            pos = self.get_metadata(PositionProvider, node, None)
            if pos is not None:
                if self._sorted is None or self._sorted[0] is not self.lines:
                    self._sorted = (self.lines, sorted(self.lines))
                lines = self._sorted[1]
                at = bisect.bisect_left(lines, pos.start.line)
                if at == len(lines) or lines[at] > pos.end.line:
                    return False
        return super().on_visit(node)


@functools.lru_cache(maxsize=12)
def _parsed(source: str) -> ParsedModule | None:
    try:
        return ParsedModule(source)
    except cst.ParserSyntaxError:
        return None


def parsed(source: str) -> ParsedModule | None:
    """``source`` parsed (None when libcst cannot parse it), shared with every earlier caller of the same text."""
    return _parsed(source)
