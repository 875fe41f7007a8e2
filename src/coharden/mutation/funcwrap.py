"""Rewrite the body of one function (found by qualified name) with libcst."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import libcst as cst

from coharden.mutation.cstedit import parsed

BodyRewrite = Callable[[Sequence[cst.BaseStatement]], Sequence[cst.BaseStatement]]


def is_docstring(stmt: cst.BaseStatement) -> bool:
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    return isinstance(stmt.body[0].value, cst.SimpleString | cst.ConcatenatedString)


def rewrite_function(source: str, qualname: str, rewrite: BodyRewrite, *,
                     whole: cst.FunctionDef | None = None) -> str | None:
    """``source`` with the body (after any docstring) of ``qualname`` replaced (or, with ``whole``, the entire
    definition); None if not found. The first definition of ``qualname`` with an indented body (and, without
    ``whole``, a statement after its docstring) is the one rewritten, on the shared parse of ``source``
    (see :mod:`coharden.mutation.cstedit`)."""
    module = parsed(source)
    if module is None:
        return None
    for node in module.functions().get(qualname, []):
        if not isinstance(node.body, cst.IndentedBlock):
            continue
        if whole is not None:
            return module.replace(node, whole)
        body = list(node.body.body)
        doc = body[:1] if body and is_docstring(body[0]) else []
        rest = body[len(doc):]
        if rest:
            new = node.with_changes(body=node.body.with_changes(body=[*doc, *rewrite(rest)]))
            return module.replace(node, new)
    return None


def ensure_import(source: str, module: str) -> str:
    """Add ``import module`` after any ``from __future__`` imports and the module docstring."""
    tree = cst.parse_module(source)
    body = list(tree.body)
    index = 0
    while index < len(body) and (is_docstring(body[index]) if index == 0 else False):
        index += 1
    while index < len(body) and isinstance(line := body[index], cst.SimpleStatementLine) and any(
        isinstance(s, cst.ImportFrom) and isinstance(s.module, cst.Name) and s.module.value == "__future__"
        for s in line.body
    ):
        index += 1
    body.insert(index, cst.parse_statement(f"import {module}\n"))
    return tree.with_changes(body=body).code


def find_function(source: str, qualname: str) -> cst.FunctionDef | None:
    """The definition of ``qualname`` in ``source`` (None when absent or ``source`` does not parse)."""
    module = parsed(source)
    found = module.functions().get(qualname) if module is not None else None
    return found[0] if found else None


def transplant_function(target: str, donor: str, qualname: str) -> str | None:
    """``target`` with the function ``qualname`` replaced by its definition in ``donor``.

    Used to put one function back to its buggy version inside otherwise fixed code, so an operator can act on
    one function of a fix that touches several while the rest of the fix stays in place.
    """
    replacement = find_function(donor, qualname)
    if replacement is None:
        return None
    return rewrite_function(target, qualname, lambda body: list(body), whole=replacement)


def rewrite_transplanted(target: str, donor: str, qualname: str, rewrite: BodyRewrite) -> str | None:
    """``rewrite_function(transplant_function(target, donor, qualname), qualname, rewrite)`` without parsing
    the transplanted text: the rewritten donor definition goes straight where the target's one was. The rare
    cases where that is not the same (the donor's definition cannot be rewritten, so a later one of the target
    is; files indented differently) take the long way."""
    module, source = parsed(target), parsed(donor)
    if module is None or source is None:
        return None
    found = source.functions().get(qualname)
    defs = [d for d in module.functions().get(qualname, []) if isinstance(d.body, cst.IndentedBlock)]
    if not found or not defs:
        return None
    donor_def = found[0]
    same_layout = (module.module.default_indent, module.module.default_newline) == (
        source.module.default_indent, source.module.default_newline)
    if same_layout and isinstance(donor_def.body, cst.IndentedBlock):
        body = list(donor_def.body.body)
        doc = body[:1] if body and is_docstring(body[0]) else []
        rest = body[len(doc):]
        if rest:
            new = donor_def.with_changes(body=donor_def.body.with_changes(body=[*doc, *rewrite(rest)]))
            return module.replace(defs[0], new)
    base = transplant_function(target, donor, qualname)
    return rewrite_function(base, qualname, rewrite) if base is not None else None
