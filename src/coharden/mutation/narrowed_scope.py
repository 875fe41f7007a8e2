"""narrowed_scope: the fixed behaviour only for inputs shaped like the recorded bug-revealing inputs.

While the tests run on the fixed code the recorder notes, per call of a function the fix touches, the
*shape* of its arguments (``self`` included; also for a call whose values have no safe encoding, see
``_shape_only`` in the recorder): the type names (level ``type``: the same Python type, the same
sympy class) and, at level ``shape``, also the sign of a number, the length of a sized value and the classes
of a sympy object's args (``_coh_shape`` in :mod:`coharden.mutation.recorder_plugin`). For each bug-revealing
input (outcome differs on the buggy code) and level, one mutant: the fixed function, which first checks the shape of its
arguments and hands any other shape to a copy of the buggy function (``_coh_buggy_<name>``) placed beside it.
The shape function is copied into the mutated module, so the test code computes shapes exactly as recorded.

And, for a fix that adds or widens a condition in such a function, one mutant per condition and level: the
whole fix kept, that condition narrowed to the recorded case (:mod:`coharden.mutation.narrowed_condition`).

Skipped (counted in the pool's ``skipped``): no recorded bug-revealing input (``no_revealing_input``); a
function that cannot be narrowed (``function_not_narrowable``: a generator, async, or missing from the buggy
or the fixed code); a condition that cannot be narrowed (``condition_not_narrowable``).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any, ClassVar

import libcst as cst

from coharden.mutation.behavior_substitution import code_of
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.cstedit import ScopedTransformer
from coharden.mutation.funcwrap import find_function
from coharden.mutation.narrowed_condition import (
    ConditionSite,
    condition_sites,
    narrow_condition,
    shape_call,
    shape_filled,
)
from coharden.mutation.recorded import SHAPE_FUNCTION, example_record, shape_source
from coharden.mutation.registry import BUGGY_RECORDS, FIXED_RECORDS, Example, OperatorInputs, register
from coharden.schema.mutant import Operator

PREFIX = "_coh_buggy_"
_PROPERTY = re.compile(r"^(property|cached_property|\w+\.(setter|getter|deleter)|functools\.cached_property)$")
_HELPER = f'''

def _coh_narrow(args, level, expected):
    try:
        return repr({SHAPE_FUNCTION}(args, level)) == expected
    except Exception:
        return False
'''


def _call_args(params: cst.Parameters, skip_first: bool) -> str:
    positional = [p.name.value for p in (*params.posonly_params, *params.params)][1 if skip_first else 0:]
    parts = list(positional)
    if isinstance(params.star_arg, cst.Param):
        parts.append(f"*{params.star_arg.name.value}")
    parts += [f"{p.name.value}={p.name.value}" for p in params.kwonly_params]
    if params.star_kwarg is not None:
        parts.append(f"**{params.star_kwarg.name.value}")
    return ", ".join(parts)


def _decorator_names(node: cst.FunctionDef) -> list[str]:
    return [code_of(d.decorator).split("(")[0] for d in node.decorators]


class _Narrow(ScopedTransformer):
    """Put the shape guard into ``qualname`` and its buggy copy right after it."""

    def __init__(self, qualname: str, buggy: cst.FunctionDef, level: str, expected: str) -> None:
        super().__init__()
        self.qualname, self.buggy, self.level, self.expected = qualname, buggy, level, expected
        self.done = False

    def leave_function(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef
                       ) -> cst.FunctionDef | cst.FlattenSentinel[cst.BaseStatement]:
        if self.scopes.qualname() != self.qualname or self.done or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        owner = self.scopes.enclosing_class()  # the method's class, None for a plain function
        decorators = _decorator_names(updated_node)
        copy_name = PREFIX + updated_node.name.value
        params = updated_node.params
        positional = [p.name.value for p in (*params.posonly_params, *params.params)]
        if owner is not None and "staticmethod" not in decorators:
            if not positional:
                return updated_node
            callee, skip_first = f"{positional[0]}.{copy_name}", True
        elif owner is not None:
            callee, skip_first = f"{owner}.{copy_name}", False
        else:
            callee, skip_first = copy_name, False
        guard = cst.parse_statement(
            f"if not {shape_call(params, self.level, self.expected)}:\n"
            f"    return {callee}({_call_args(params, skip_first)})\n")
        body = list(updated_node.body.body)
        doc = 1 if body and code_of(body[0]).lstrip().startswith(('"', "'", 'r"', "r'")) else 0
        narrowed = updated_node.with_changes(body=updated_node.body.with_changes(
            body=[*body[:doc], guard, *body[doc:]]))
        kept = [d for d in self.buggy.decorators if not _PROPERTY.match(code_of(d.decorator).split("(")[0])]
        copy = self.buggy.with_changes(name=cst.Name(copy_name), decorators=kept,
                                       leading_lines=[cst.EmptyLine()])
        self.done = True
        return cst.FlattenSentinel([narrowed, copy])


def narrow(fixed: str, buggy: str, qualname: str, level: str, expected: str) -> str | None:
    """``fixed`` with ``qualname`` narrowed to argument shapes equal to ``expected`` at ``level``; None when
    the function is missing or cannot be narrowed (generator, async)."""
    buggy_def, fixed_def = find_function(buggy, qualname), find_function(fixed, qualname)
    if buggy_def is None or fixed_def is None:
        return None
    if fixed_def.asynchronous or re.search(r"\byield\b", code_of(fixed_def) + code_of(buggy_def)):
        return None
    transformer = _Narrow(qualname, buggy_def, level, expected)
    module = cst.parse_module(fixed).visit(transformer)
    if not transformer.done:
        return None
    return with_helpers(module.code)


def with_helpers(code: str) -> str:
    """``code`` with the shape function and ``_coh_narrow`` appended (module level, used at call time)."""
    return code + ("" if code.endswith("\n") else "\n") + "\n\n" + shape_source() + _HELPER


def generate(inputs: OperatorInputs) -> Iterator[RawMutant]:
    ctx: FixContext = inputs.ctx
    fixed = {c.path: c.new for c in ctx.files}
    by_path = {c.path: c for c in ctx.python_files if c.old}
    records = [r for r in (*inputs.revealing(), *inputs.revealing_shapes()) if r.get("shape") and r["path"] in by_path]
    if not records:
        inputs.skip(Operator.NARROWED_SCOPE, "no_revealing_input")
        return
    seen: set[tuple[str, str, str, str]] = set()
    conditions: dict[tuple[str, str], list[ConditionSite]] = {}
    templates: dict[Any, str | None] = {}  # one rewrite per function / condition site, filled per shape
    for record in records:
        change = by_path[record["path"]]
        levels = [("type", record["type_shape"])]
        if record["shape"] != record["type_shape"]:
            levels.append(("shape", record["shape"]))
        for level, expected in levels:
            ident = (record["path"], record["qualname"], level, expected)
            if ident in seen:
                continue
            seen.add(ident)
            code = shape_filled(templates, (change.path, record["qualname"]), (change.new, change.old),
                                functools.partial(narrow, change.new, change.old, record["qualname"]), level, expected)
            if code is None:
                inputs.skip(Operator.NARROWED_SCOPE, "function_not_narrowable")
            else:
                yield RawMutant(Operator.NARROWED_SCOPE,
                                f"{record['qualname']}: fixed only for arguments of {level} {expected[:80]}"[:160],
                                f"{change.path}:{record['qualname']}", {**fixed, change.path: code},
                                _meta(record, level, expected, "function"))
            key = (change.path, record["qualname"])
            if key not in conditions:
                conditions[key] = condition_sites(change, record["qualname"])
            for site in conditions[key]:
                narrowed = shape_filled(templates, (change.path, site), (change.new,),
                                        functools.partial(narrow_condition, change.new, site), level, expected)
                if narrowed is None:
                    inputs.skip(Operator.NARROWED_SCOPE, "condition_not_narrowable")
                    continue
                what = "widened" if site.buggy is not None else "added"
                yield RawMutant(Operator.NARROWED_SCOPE,
                                f"{what} condition `{site.fixed[:60]}` only for arguments of {level} "
                                f"{expected[:60]}"[:160], f"{change.path}:{site.line}",
                                {**fixed, change.path: with_helpers(narrowed)},
                                {**_meta(record, level, expected, "condition"), "condition": site.fixed[:200],
                                 "buggy_condition": (site.buggy or "")[:200]})


def _meta(record: dict[str, Any], level: str, expected: str, kind: str) -> dict[str, Any]:
    return {"kind": kind, "function": record["qualname"], "level": level, "shape": expected[:200],
            "from_test": record.get("from_test", "")}


@register
class NarrowedScope:
    """Imitates *partial generalisation*: the right mechanism with a narrower scope, the fixed behaviour only
    for inputs shaped like the issue's example, or the condition the fix adds or widens narrowed to that case
    (real cases: sympy-16597 fixes even/odd but not integer, 18698 univariate only, 23950 special-cases a class
    of inputs)."""

    name: ClassVar[Operator] = Operator.NARROWED_SCOPE
    needs: ClassVar[frozenset[str]] = frozenset({FIXED_RECORDS, BUGGY_RECORDS})

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        return generate(inputs)

    @classmethod
    def examples(cls) -> list[Example]:
        return [Example("def f(x):\n    return x\n", "def f(x):\n    return abs(x)\n",
                        "if not _coh_narrow((x, ), 'type', \"('tuple', ('int',))\"):\n        return _coh_buggy_f(x)",
                        (example_record("f", ["x"], (-2,), "return", 2),)),
                Example("def f(x):\n    if isinstance(x, int):\n        return -x\n    return x\n",
                        "def f(x):\n    if isinstance(x, (int, float)):\n        return -x\n    return x\n",
                        "if (isinstance(x, (int, float))) if _coh_case else (isinstance(x, int)):",
                        (example_record("f", ["x"], (2.5,), "return", -2.5),)),
                Example("def f(x):\n    return x\n", "def f(x):\n    if x < 0:\n        return 0\n    return x\n",
                        "    _coh_case = _coh_narrow((x, ), 'shape', \"('tuple', (('int', -1),))\")\n"
                        "    if (x < 0) and _coh_case:",
                        (example_record("f", ["x"], (-2,), "return", 0),))]
