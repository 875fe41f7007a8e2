"""caller_patch: the fix reverted, the symptom repaired one or two frames up the failing call path.

The recorder notes, for each outermost call of a function the fix touches, up to two calling frames (passing
through comprehension and lambda frames) and each caller's own argument -> outcome, on the fixed and on the
buggy code. A caller whose outcome differs between the two is on the failing path. For each such caller, with
every file of the fix back to its buggy content:

* ``shortcut``: the caller returns its fixed-code result (or raises its fixed-code exception) when called with
  exactly the recorded arguments, the buggy code otherwise: the input-specific shortcut moved to the caller;
* ``catch``: when the caller let an exception out on the buggy code and returned on the fixed code, the
  caller catches exceptions of that type and returns its fixed-code result: a guard where the crash surfaces.

Only frames inside the repository and outside test files are patched. Skipped (counted in the pool's
``skipped``): no recorded caller whose outcome the fix changes (the reason from
:func:`~coharden.mutation.revealing.caller_diagnosis`: ``callers_outcomes_equal``, ``callers_not_encodable``,
``no_caller_recorded``), a frame outside the
repository (``frame_outside_repository``), in a test file (``frame_in_test``), above a test's frame (the
test runner, ``frame_above_test``), whose source is missing
(``frame_source_missing``), does not parse (``unparseable_frame``), or holds no such function
(``caller_not_found``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar

import libcst as cst

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import parses
from coharden.mutation.funcwrap import rewrite_function
from coharden.mutation.input_specific_shortcut import shortcut_rewrite, value_expr, with_decoder
from coharden.mutation.recorded import example_caller
from coharden.mutation.registry import BUGGY_RECORDS, FIXED_RECORDS, Example, OperatorInputs, register
from coharden.mutation.revealing import caller_diagnosis, revealing_callers
from coharden.mutation.value_helpers import DECODER
from coharden.schema.mutant import Operator

OP = Operator.CALLER_PATCH


def _catch(exc_type: str, record: dict[str, Any]):
    def rewrite(body: Sequence[cst.BaseStatement]) -> list[cst.BaseStatement]:
        handler = cst.parse_statement(
            "try:\n    pass\nexcept Exception as _coh_exc:\n"
            f"    if type(_coh_exc).__name__ != {exc_type!r}:\n        raise\n"
            f"    return {value_expr(record['value_enc'])}\n")
        assert isinstance(handler, cst.Try)
        return [handler.with_changes(body=cst.IndentedBlock(body=list(body)))]

    return rewrite


def _source(inputs: OperatorInputs, path: str) -> str | None:
    for change in inputs.ctx.files:
        if change.path == path:
            return change.old
    return inputs.base_file(path)


def generate(inputs: OperatorInputs) -> Iterator[RawMutant]:
    callers = revealing_callers(inputs.fixed_records, inputs.buggy_records)
    why = caller_diagnosis(inputs.fixed_records, inputs.buggy_records, inputs.is_test_path)
    if not callers:
        inputs.skip(OP, why)
        return
    yielded = 0
    for mutant in _generate(inputs, callers):
        yielded += 1
        yield mutant
    if not yielded and why == "callers_not_encodable":
        # the callers it could use (a test's own frame never is one) were dropped unrecorded: say so too
        inputs.skip(OP, "callers_not_encodable")


def _generate(inputs: OperatorInputs, callers: list[dict[str, Any]]) -> Iterator[RawMutant]:
    fix_paths = {c.path for c in inputs.ctx.files}
    for record in callers:
        path = record.get("path")
        reason = None
        if path is None:
            reason = "frame_outside_repository"
        elif inputs.is_test_path(path):
            reason = "frame_in_test"
        elif record.get("via") is not None and inputs.is_test_path(record["via"]):
            reason = "frame_above_test"  # the test runner that called the test (sympy's runtests.py)
        if reason is not None or path is None:
            inputs.skip(OP, reason or "frame_outside_repository")
            continue
        source = _source(inputs, path)
        if source is None:
            inputs.skip(OP, "frame_source_missing")
            continue
        if not parses(source):
            inputs.skip(OP, "unparseable_frame")
            continue
        variants = [("shortcut", shortcut_rewrite({**record, "kind": record["outcome"]}))]
        if record["outcome"] == "return" and record.get("buggy_outcome") == "raise" and record.get("buggy_exc_type"):
            variants.append(("catch", _catch(record["buggy_exc_type"], record)))
        originals = {} if path in fix_paths else {path: source}
        where = f"{record['qualname']} (caller {record.get('depth', '?')} up from {record.get('callee', '?')})"
        for kind, rewrite in variants:
            code = rewrite_function(source, record["qualname"], rewrite)
            if code is None:
                inputs.skip(OP, "caller_not_found")
                break
            code = with_decoder(code) if DECODER in code else code
            given = record["key"]  # a caller's receiver is not recorded (its frame may have changed it)
            text = (f"fix reverted; {where} returns its fixed result for {given[:60]}" if kind == "shortcut"
                    else f"fix reverted; {where} catches {record['buggy_exc_type']}")
            yield RawMutant(OP, text[:160], f"{path}:{record['qualname']}", {path: code},
                            {"kind": kind, "function": record["qualname"], "callee": record.get("callee", ""),
                             "depth": record.get("depth"), "input": given[:200],
                             "from_test": record.get("from_test", "")}, originals=originals)


@register
class CallerPatch:
    """Imitates a *fix at another location*: the root cause left in place and the symptom repaired at a caller
    on the failing path, for the issue's input (real cases: sympy-17630 patches ``BlockMatrix._blockmul``
    instead of the Add postprocessor, 20428 strips zeros downstream, 17318 guards the crash site)."""

    name: ClassVar[Operator] = OP
    needs: ClassVar[frozenset[str]] = frozenset({FIXED_RECORDS, BUGGY_RECORDS})

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        return generate(inputs)

    @classmethod
    def examples(cls) -> list[Example]:
        return [Example("def f(x):\n    return 1 / x\n\n\ndef g(x):\n    return f(x) + 1\n",
                        "def f(x):\n    return 1 / x if x else 0\n\n\ndef g(x):\n    return f(x) + 1\n",
                        "if _coh_hit:\n        return 1\n    return f(x) + 1",
                        (example_caller("g", ["x"], (0,), "return", 1, callee="f"),))]
