"""input_specific_shortcut: the buggy function plus an early return for ONE input a test used.

The function is put back to its buggy version while the rest of the fix stays (as for symptom_suppression).

While the candidate and the reference test run on the fixed code, the recorder plugin notes argument ->
outcome of the functions the fix touches (:mod:`coharden.mutation.recorder_plugin`). Each distinct input
becomes one mutant: the buggy function, with a first statement that returns the recorded value (or raises
the recorded exception) when called with exactly that input. Recorded values are data, never pickles: a
literal where the value is one, else the recorder's structural encoding read by a decoder appended to the
module (:mod:`coharden.mutation.recorder_values`). A test that probes several bug-revealing
inputs rejects it; a test that pins one input accepts it. Recording from both tests keeps the operator
from favouring either.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import libcst as cst

from coharden import pysource
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.funcwrap import rewrite_transplanted
from coharden.mutation.registry import BUGGY_RECORDS, FIXED_RECORDS, Example, OperatorInputs, register
from coharden.mutation.value_helpers import DECODER, SAME, decode_expr, decoder_source
from coharden.pysource import parsing
from coharden.schema.mutant import Operator


def value_expr(enc: str) -> str:
    """An expression for the value ``enc`` encodes (see :mod:`coharden.mutation.value_helpers`), in a module
    that has the decoder appended (:func:`with_decoder`)."""
    return decode_expr(enc)


def cached_value_expr(enc: str) -> str:
    """An expression for the value ``enc`` encodes, decoded once per process and kept in the module's globals:
    the shortcut compares with it on every call of the function, and a shortcut in a function every test
    calls (``Printer._print``, sympy-18763) that decoded a 9 KB expression on each call made the mutant's runs
    take minutes instead of seconds. Only values compared with are cached (never a returned value)."""
    name = "_coh_value_" + hashlib.sha256(enc.encode()).hexdigest()[:12]
    return f"(globals().get({name!r}) or globals().setdefault({name!r}, [{value_expr(enc)}]))[0]"


def with_decoder(code: str) -> str:
    """``code`` with the recorded-value decoder appended at module level (used at call time), once."""
    if f"def {DECODER}(" in code:
        return code
    with parsing():  # decoder_source parses its functions' source with ast: one thread at a time
        decoder = decoder_source()
    return code + ("" if code.endswith("\n") else "\n") + "\n\n" + decoder


def _literal(text: str | None) -> str | None:
    """``text`` when it is a Python literal (so the mutant reads naturally), else None."""
    if not text or len(text) >= 200:
        return None
    try:
        pysource.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None
    return text


def shortcut_rewrite(record: dict[str, Any]):
    """A body rewrite: first return (or raise) the recorded outcome for exactly the recorded input."""
    params = record["params"]
    key = "(" + "".join(f"{p}, " for p in params) + ")"
    value = _literal(record.get("value_repr")) if record["kind"] == "return" else None
    outcome = f"raise {value_expr(record['value_enc'])}" if record["kind"] == "raise" \
        else f"return {value or value_expr(record['value_enc'])}"
    literal = _literal(record["key"])
    # a decoded input is compared as the recorder compared it (``_coh_same``: arrays by their bytes, since an
    # array's == has no truth value); a literal reads naturally with ==
    hit = f"{key} == {literal}" if literal else f"{SAME}({key}, {cached_value_expr(record['args_enc'])})"
    # a method: the same instance (or class) too. The name goes into the mutant's code, and the records file
    # lies in the worktree, where a test could rewrite it: only the two names the recorder writes are used
    if record.get("receiver_enc") and record.get("receiver") in ("self", "cls"):
        hit = f"({hit}) and {SAME}({record['receiver']}, {cached_value_expr(record['receiver_enc'])})"
    code = (
        "try:\n"
        f"    _coh_hit = bool({hit})\n"
        "except Exception:\n"
        "    _coh_hit = False\n"
        "if _coh_hit:\n"
        f"    {outcome}\n"
    )
    statements = list(cst.parse_module(code).body)

    def rewrite(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return [*statements, *body]

    return rewrite


def generate(ctx: FixContext, records: list[dict[str, Any]]) -> Iterator[RawMutant]:
    fixed = {c.path: c.new for c in ctx.files}
    by_path = {c.path: c for c in ctx.python_files}
    for record in records:
        change = by_path.get(record["path"])
        if change is None:
            continue
        # the rest of the fix stays; only this function is back to its buggy self plus the shortcut
        code = rewrite_transplanted(change.new, change.old, record["qualname"], shortcut_rewrite(record))
        if code is None:
            continue
        code = with_decoder(code) if DECODER in code else code
        verb = "raises" if record["kind"] == "raise" else "returns"
        on = receiver_suffix(record)
        yield RawMutant(
            Operator.INPUT_SPECIFIC_SHORTCUT,
            f"{record['qualname']}{record['key'][:80]}{on} {verb} {record.get('value_repr', '')[:60]} "
            "(buggy otherwise)",
            f"{change.path}:{record['qualname']}",
            {**fixed, change.path: code},
            {"function": record["qualname"], "input": (record["key"] + on)[:200],
             "from_test": record.get("from_test", "")},
        )


def receiver_suffix(record: dict[str, Any]) -> str:
    """" on <receiver>" for a method's recorded instance, else ""."""
    return f" on {record['receiver_key'][:60]}" if record.get("receiver_key") else ""


@register
class InputSpecificShortcut:
    """Imitates a wrong fix that *special-cases the issue's example*: the buggy function plus an early return
    for exactly one recorded bug-revealing input (the single-input extreme of sympy-23950's special-casing)."""

    name: ClassVar[Operator] = Operator.INPUT_SPECIFIC_SHORTCUT
    needs: ClassVar[frozenset[str]] = frozenset({FIXED_RECORDS, BUGGY_RECORDS})

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        revealing = inputs.revealing()
        if not revealing and inputs.ctx.python_files:
            inputs.skip(self.name, "no_revealing_input")
        # a recorded value to return cannot stand for an input the fix tells apart only by what the call leaves
        # in its receiver or arguments (narrowed_scope, which runs the fixed function, covers those)
        records = [r for r in revealing if not r.get("by_effects")]
        if revealing and not records:
            inputs.skip(self.name, "effects_only")
        return generate(inputs.ctx, records)

    @classmethod
    def examples(cls) -> list[Example]:
        from coharden.mutation.recorded import example_record as record

        return [Example("def f(x):\n    return x\n", "def f(x):\n    return abs(x)\n",
                        "return 2", (record("f", ["x"], (-2,), "return", 2),))]
