"""symptom_suppression: on the buggy code, wrap a function the fix touches so the symptom disappears.

Three wrappers per touched function: swallow any exception and return None; silence warnings (when the
function or the fix mentions warnings); convert any exception into the exception type the fix raises
(when the fix adds ``raise SomeError(...)``).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence

import libcst as cst

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext, functions_touched
from coharden.mutation.funcwrap import ensure_import, rewrite_function
from coharden.schema.mutant import Operator


def _swallow(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    return [cst.Try(body=cst.IndentedBlock(body=list(body)),
                    handlers=[cst.ExceptHandler(body=cst.IndentedBlock(body=[cst.parse_statement("return None\n")]),
                                                type=cst.Name("Exception"))])]


def _silence(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    template = cst.parse_statement("with _coh_warnings.catch_warnings():\n    _coh_warnings.simplefilter('ignore')\n")
    assert isinstance(template, cst.With)
    inner = [*template.body.body, *body]  # type: ignore[union-attr]
    return [template.with_changes(body=template.body.with_changes(body=inner))]


def _convert(exc_name: str):  # type: ignore[no-untyped-def]
    def rewrite(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        handler = cst.parse_statement(
            f"try:\n    pass\nexcept {exc_name}:\n    raise\nexcept Exception as _coh_exc:\n"
            f"    raise {exc_name}(str(_coh_exc)) from _coh_exc\n"
        )
        assert isinstance(handler, cst.Try)
        return [handler.with_changes(body=cst.IndentedBlock(body=list(body)))]

    return rewrite


def raised_types(change: FileChange, qualname: str) -> list[str]:
    """Exception names raised by ``raise X(...)`` / ``raise X`` on lines the fix adds in ``qualname``."""
    added = change.added_lines()
    try:
        tree = ast.parse(change.new)
    except SyntaxError:
        return []
    names: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None and node.lineno in added:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name | ast.Attribute):
                name = ast.unparse(target)
                if name not in names:
                    names.append(name)
    return names


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    buggy = {c.path: c.old for c in ctx.files}
    for change in ctx.python_files:
        if not change.old:
            continue
        warnings_involved = "warn" in change.new or "warn" in change.old
        exc_types = raised_types(change, "")
        for qualname in functions_touched(change):
            loc = f"{change.path}:{qualname}"
            code = rewrite_function(change.old, qualname, _swallow)
            if code:
                yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: swallow exceptions, return None", loc,
                                {**buggy, change.path: code}, {"kind": "swallow", "function": qualname})
            if warnings_involved:
                code = rewrite_function(change.old, qualname, _silence)
                if code:
                    code = ensure_import(code, "warnings as _coh_warnings")
                    yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: silence warnings", loc,
                                    {**buggy, change.path: code}, {"kind": "silence", "function": qualname})
            for exc in exc_types:
                code = rewrite_function(change.old, qualname, _convert(exc))
                if code:
                    yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: convert any exception to {exc}", loc,
                                    {**buggy, change.path: code}, {"kind": "convert", "function": qualname,
                                                                  "exception": exc})
