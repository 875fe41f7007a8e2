"""Rewrite the body of one function (found by qualified name) with libcst."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

BodyRewrite = Callable[[Sequence[cst.BaseStatement]], Sequence[cst.BaseStatement]]


def _is_docstring(stmt: cst.BaseStatement) -> bool:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    return isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)


class _Rewriter(cst.CSTTransformer):
    def __init__(self, qualname: str, rewrite: BodyRewrite, whole: cst.FunctionDef | None = None) -> None:
        self.qualname = qualname
        self.rewrite = rewrite
        self.whole = whole
        self.stack: list[str] = []
        self.done = False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.stack.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        name = ".".join(self.stack)
        self.stack.pop()
        if name != self.qualname or self.done or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        if self.whole is not None:
            self.done = True
            return self.whole
        body = list(updated_node.body.body)
        doc = body[:1] if body and _is_docstring(body[0]) else []
        rest = body[len(doc):]
        if not rest:
            return updated_node
        self.done = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[*doc, *self.rewrite(rest)]))


def rewrite_function(source: str, qualname: str, rewrite: BodyRewrite, *,
                     whole: cst.FunctionDef | None = None) -> str | None:
    """``source`` with the body (after any docstring) of ``qualname`` replaced (or, with ``whole``, the entire
    definition); None if not found."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    rewriter = _Rewriter(qualname, rewrite, whole)
    new = module.visit(rewriter)
    return new.code if rewriter.done else None


def ensure_import(source: str, module: str) -> str:
    """Add ``import module`` after any ``from __future__`` imports and the module docstring."""
    tree = cst.parse_module(source)
    body = list(tree.body)
    index = 0
    while index < len(body) and (_is_docstring(body[index]) if index == 0 else False):
        index += 1
    while index < len(body) and isinstance(body[index], cst.SimpleStatementLine) and any(
        isinstance(s, cst.ImportFrom) and isinstance(s.module, cst.Name) and s.module.value == "__future__"
        for s in body[index].body
    ):
        index += 1
    body.insert(index, cst.parse_statement(f"import {module}\n"))
    return tree.with_changes(body=body).code


class _FunctionFinder(cst.CSTVisitor):
    def __init__(self, qualname: str) -> None:
        self.qualname = qualname
        self.stack: list[str] = []
        self.found: cst.FunctionDef | None = None

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:  # type: ignore[override]
        self.stack.pop()

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        if ".".join(self.stack) == self.qualname and self.found is None:
            self.found = node
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:  # type: ignore[override]
        self.stack.pop()


def find_function(source: str, qualname: str) -> cst.FunctionDef | None:
    """The definition of ``qualname`` in ``source`` (None when absent or ``source`` does not parse)."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    finder = _FunctionFinder(qualname)
    module.visit(finder)
    return finder.found


def transplant_function(target: str, donor: str, qualname: str) -> str | None:
    """``target`` with the function ``qualname`` replaced by its definition in ``donor``.

    Used to put one function back to its buggy version inside otherwise fixed code, so an operator can act on
    one function of a fix that touches several while the rest of the fix stays in place.
    """
    try:
        donor_module = cst.parse_module(donor)
    except cst.ParserSyntaxError:
        return None
    finder = _FunctionFinder(qualname)
    donor_module.visit(finder)
    if finder.found is None:
        return None
    replacement = finder.found
    return rewrite_function(target, qualname, lambda body: list(body), whole=replacement)
