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
    def __init__(self, qualname: str, rewrite: BodyRewrite) -> None:
        self.qualname = qualname
        self.rewrite = rewrite
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
        body = list(updated_node.body.body)
        doc = body[:1] if body and _is_docstring(body[0]) else []
        rest = body[len(doc):]
        if not rest:
            return updated_node
        self.done = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[*doc, *self.rewrite(rest)]))


def rewrite_function(source: str, qualname: str, rewrite: BodyRewrite) -> str | None:
    """``source`` with the body (after any docstring) of ``qualname`` replaced; None if not found."""
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    rewriter = _Rewriter(qualname, rewrite)
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
