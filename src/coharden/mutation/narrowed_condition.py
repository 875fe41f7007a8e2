"""narrowed_scope's condition form: a condition the fix adds or widens, narrowed to the recorded case.

A *site* is an ``if``/``elif`` condition or a conditional expression whose condition starts on a line the fix
adds or rewrites, directly inside a function the recorder watched. When the fix rewrote an existing condition
(the most similar condition of the same function in the buggy lines of the same change block), the site
*widens* it: buggy ``B`` -> fixed ``F``; otherwise the fix *adds* ``F``.

The narrowed condition holds the fixed behaviour only for calls whose arguments have the recorded
bug-revealing shape (:func:`coharden.mutation.recorded.shape_source`, tested once at the function's entry,
before any parameter is reassigned): an added condition becomes ``(F) and _coh_case``, a widened one
``(F) if _coh_case else (B)``. Everything else the fix does stays in place, so the mutant is the fix whose new
condition covers the issue's example and nothing beyond it (real cases: sympy-16597 generalises even/odd but
not integer, 18698 univariate only).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from coharden.mutation.behavior_substitution import code_of
from coharden.mutation.context import FileChange, normalized
from coharden.mutation.cstedit import ScopedTransformer, ScopedVisitor
from coharden.mutation.funcwrap import is_docstring

CASE = "_coh_case"
_MIN_RATIO = 0.4


@dataclass(frozen=True)
class ConditionSite:
    qualname: str  # the function holding the condition (innermost)
    line: int  # 1-based fixed-file line where the condition starts
    fixed: str  # the condition on the fixed code
    buggy: str | None  # the buggy condition the fix widens; None when the fix adds the condition


def shape_names(params: cst.Parameters) -> list[str]:
    """Parameter names in the order of ``co_varnames`` (positional, keyword-only, ``*args``, ``**kwargs``): the
    order in which the recorder takes a call's arguments for its shape."""
    names = [p.name.value for p in (*params.posonly_params, *params.params, *params.kwonly_params)]
    if isinstance(params.star_arg, cst.Param):
        names.append(params.star_arg.name.value)
    if params.star_kwarg is not None:
        names.append(params.star_kwarg.name.value)
    return names


def shape_call(params: cst.Parameters, level: str, expected: str) -> str:
    """``_coh_narrow((a, b, ), level, expected)``: whether a call's arguments have the recorded shape."""
    return "_coh_narrow((" + "".join(f"{n}, " for n in shape_names(params)) + f"), {level!r}, {expected!r})"


_LEVEL, _EXPECTED = "__coh_level_slot__", "__coh_expected_slot__"


def shape_filled(cache: dict[Any, str | None], key: Any, sources: Sequence[str],
                 make: Callable[[str, str], str | None], level: str, expected: str) -> str | None:
    """``make(level, expected)``, from a template made once per ``key`` with slot literals in their place.

    A narrowing rewrites a whole module (a libcst parse, a transform, the code) while ``level`` and ``expected``
    only appear as the string literals of :func:`shape_call`; a fix with many recorded shapes rewrote fu.py
    (2,000 lines) 48 times, 20 s of pool building (sympy-17139). The template is rewritten once and the literals
    are put in by text, giving the same code; sources that contain a slot name are rewritten directly."""
    if any(_LEVEL in source or _EXPECTED in source for source in sources):
        return make(level, expected)
    if key not in cache:
        cache[key] = make(_LEVEL, _EXPECTED)
    template = cache[key]
    if template is None:
        return None
    return template.replace(repr(_LEVEL), repr(level)).replace(repr(_EXPECTED), repr(expected))


class _Conditions(ScopedVisitor):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, int, str]] = []  # (function, line, condition code)

    def _note(self, test: cst.BaseExpression) -> None:
        function = self.scopes.function()
        if function is not None:
            self.found.append((function, self.get_metadata(PositionProvider, test).start.line, code_of(test)))

    def visit_If(self, node: cst.If) -> None:
        self._note(node.test)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        self._note(node.test)


def _conditions(source: str) -> list[tuple[str, int, str]]:
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError:
        return []
    visitor = _Conditions()
    wrapper.visit(visitor)
    return visitor.found


def condition_sites(change: FileChange, qualname: str) -> list[ConditionSite]:
    """The conditions of ``qualname`` that the fix adds or widens (see the module docstring)."""
    added = change.added_lines()
    fixed = [c for c in _conditions(change.new) if c[0] == qualname and c[1] in added]
    if not fixed:
        return []
    buggy = [c for c in _conditions(change.old) if c[0] == qualname]
    blocks = change.opcodes()
    sites = []
    for _, line, code in fixed:
        widened = None
        for tag, i1, i2, j1, j2 in blocks:
            if tag == "replace" and j1 < line <= j2:
                scored = [(difflib.SequenceMatcher(a=old, b=code).ratio(), old) for _, old_line, old in buggy
                          if i1 < old_line <= i2]
                if scored and max(scored)[0] >= _MIN_RATIO:
                    widened = max(scored)[1]
        if widened is not None and normalized(widened) == normalized(code):
            continue  # the condition itself did not change (a rewrite elsewhere on its line)
        sites.append(ConditionSite(qualname, line, code, widened))
    return sites


class _NarrowCondition(ScopedTransformer):
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, site: ConditionSite, level: str, expected: str) -> None:
        super().__init__()
        self.site, self.level, self.expected = site, level, expected
        self.replaced = self.entered = False

    def leave_function(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        if self.scopes.function() != self.site.qualname or not self.replaced or self.entered \
                or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        body = list(updated_node.body.body)
        doc = 1 if body and is_docstring(body[0]) else 0
        entry = cst.parse_statement(f"{CASE} = {shape_call(updated_node.params, self.level, self.expected)}\n")
        self.entered = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[*body[:doc], entry, *body[doc:]]))

    def _narrowed(self, test: cst.BaseExpression) -> cst.BaseExpression | None:
        if self.replaced or self.scopes.function() != self.site.qualname \
                or self.get_metadata(PositionProvider, test).start.line != self.site.line:
            return None
        self.replaced = True
        fixed = code_of(test)
        text = f"({fixed}) and {CASE}" if self.site.buggy is None else f"({fixed}) if {CASE} else ({self.site.buggy})"
        return cst.parse_expression(text)

    def leave_If(self, original_node: cst.If, updated_node: cst.If) -> cst.If:
        test = self._narrowed(original_node.test)
        return updated_node if test is None else updated_node.with_changes(test=test)

    def leave_IfExp(self, original_node: cst.IfExp, updated_node: cst.IfExp) -> cst.IfExp:
        test = self._narrowed(original_node.test)
        return updated_node if test is None else updated_node.with_changes(test=test)


def narrow_condition(fixed: str, site: ConditionSite, level: str, expected: str) -> str | None:
    """``fixed`` with ``site``'s condition narrowed to arguments whose shape at ``level`` is ``expected`` (the
    caller appends the shape helpers); None when the site is not found or its condition does not parse."""
    try:
        wrapper = MetadataWrapper(cst.parse_module(fixed))
        transformer = _NarrowCondition(site, level, expected)
        code = wrapper.visit(transformer).code
    except cst.ParserSyntaxError:
        return None
    return code if transformer.entered else None
