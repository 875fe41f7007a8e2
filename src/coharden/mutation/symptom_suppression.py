"""symptom_suppression: wrap the buggy version of a function the fix touches so the symptom disappears.

The function is put back to its buggy version while the rest of the fix stays in place (for a fix of one
function this is exactly "the buggy code, wrapped"; for a fix spanning several it is the plausible wrong
fix that suppresses one symptom and fixes the others).

Three wrappers per touched function: swallow any exception and return None; silence warnings (when the
function or the fix mentions warnings); convert any exception into the exception type the fix raises
(when the fix adds ``raise SomeError(...)``). Exception wrappers are made only where the symptom is an
exception: when the function, run by the tests on the buggy code, let one escape (or was not seen run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from typing import ClassVar

import libcst as cst

from coharden import pysource
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext, functions_touched
from coharden.mutation.funcwrap import ensure_import, rewrite_transplanted
from coharden.mutation.registry import BUGGY_RECORDS, Example, OperatorInputs, register
from coharden.mutation.revealing import buggy_symptoms
from coharden.schema.mutant import Operator


def _swallow(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    return [cst.Try(body=cst.IndentedBlock(body=list(body)),
                    handlers=[cst.ExceptHandler(body=cst.IndentedBlock(body=[cst.parse_statement("return None\n")]),
                                                type=cst.Name("Exception"))])]


def _silence(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
    template = cst.parse_statement("with _coh_warnings.catch_warnings():\n    _coh_warnings.simplefilter('ignore')\n")
    assert isinstance(template, cst.With)
    inner = [*template.body.body, *body]
    return [template.with_changes(body=template.body.with_changes(body=inner))]


def _convert(exc_name: str):
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
        tree = pysource.parse(change.new)
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


def generate(ctx: FixContext, symptoms: dict[str, set[str]] | None = None) -> Iterator[RawMutant]:
    """``symptoms``: per function seen running on the buggy code, the exception types that escaped it. A
    function seen running that never raised gets no exception wrapper (it would be the buggy function again);
    functions not seen at all get every wrapper."""
    symptoms = symptoms or {}
    fixed = {c.path: c.new for c in ctx.files}
    for change in ctx.python_files:
        if not change.old:
            continue
        warnings_involved = "warn" in change.new or "warn" in change.old
        exc_types = raised_types(change, "")
        for qualname in functions_touched(change):
            # the rest of the fix stays; only this function is back to its buggy self, then wrapped
            def base(rewrite, qualname=qualname, change=change):
                return rewrite_transplanted(change.new, change.old, qualname, rewrite)

            loc = f"{change.path}:{qualname}"
            raised = symptoms.get(qualname)
            code = base(_swallow) if raised is None or raised else None
            if code:
                yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: swallow exceptions, return None", loc,
                                {**fixed, change.path: code}, {"kind": "swallow", "function": qualname})
            if warnings_involved:
                code = base(_silence)
                if code:
                    code = ensure_import(code, "warnings as _coh_warnings")
                    yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: silence warnings", loc,
                                    {**fixed, change.path: code}, {"kind": "silence", "function": qualname})
            for exc in exc_types:
                if raised is not None and not (raised - {exc.rsplit(".", 1)[-1]}):
                    continue  # the buggy function raised nothing, or already the fix's type
                code = base(_convert(exc))
                if code:
                    yield RawMutant(Operator.SYMPTOM_SUPPRESSION, f"{qualname}: convert any exception to {exc}", loc,
                                    {**fixed, change.path: code}, {"kind": "convert", "function": qualname,
                                                                  "exception": exc})


@register
class SymptomSuppression:
    """Imitates a wrong fix that *hides the symptom at the crash site* instead of removing its cause (real
    case: sympy-17318, where a guard in the crashing helper returns an empty result)."""

    name: ClassVar[Operator] = Operator.SYMPTOM_SUPPRESSION
    needs: ClassVar[frozenset[str]] = frozenset({BUGGY_RECORDS})

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        return generate(inputs.ctx, buggy_symptoms(inputs.buggy_records))

    @classmethod
    def examples(cls) -> list[Example]:
        return [Example("def f(xs):\n    return xs[0]\n", "def f(xs):\n    return xs[0] if xs else None\n",
                        "except Exception:\n        return None")]
