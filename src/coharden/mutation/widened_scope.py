"""widened_scope: the fix applied to more inputs than it should.

Sites, on the fixed code (libcst, layout kept):

* an ``if``/``elif`` whose condition the fix adds, or the innermost one enclosing a line the fix adds (the fix
  relies on it): the condition made always true, so the new branch also runs for the cases that must keep
  the old behaviour; one conjunct of an ``and`` condition dropped;
* a guard the fix adds that exits early (``if c: return/raise/continue/break`` without ``else``): dropped, so
  the code after it also runs for the cases it excluded;
* a conditional expression the fix adds: its first branch for every input;
* an ``except SomeError`` the fix adds: ``except Exception``, so the handler swallows every error.
"""

from __future__ import annotations

from collections.abc import Iterator

import libcst as cst
from libcst.metadata import PositionProvider

from coharden.mutation.behavior_substitution import Site, code_of, line_site_mutants
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.cstedit import LineSites
from coharden.mutation.registry import ContextOperator, Example, register
from coharden.schema.mutant import Operator

_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


def _exits_early(node: cst.If) -> bool:
    if node.orelse is not None or not isinstance(node.body, cst.IndentedBlock) or not node.body.body:
        return False
    last = node.body.body[-1]
    return isinstance(last, cst.SimpleStatementLine) and isinstance(last.body[-1], _EXITS)


class WideningSites(LineSites):
    """The widening sites of a module, for the 1-based fixed-file lines ``added``."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, added: set[int]) -> None:
        self.added = self.lines = added
        self.sites: list[Site] = []
        self._ifs: list[tuple[cst.If, int, int]] = []

    def _span(self, node: cst.CSTNode) -> tuple[int, int]:
        pos = self.get_metadata(PositionProvider, node)
        return pos.start.line, pos.end.line

    def visit_If(self, node: cst.If) -> None:
        start, end = self._span(node)
        test_line = self._span(node.test)[0]
        body_end = self._span(node.body)[1]
        if test_line in self.added:
            self._widen_if(node, test_line, added_guard=True)
        elif any(start < line <= body_end for line in self.added):
            self._ifs.append((node, start, body_end))

    def _widen_if(self, node: cst.If, line: int, *, added_guard: bool) -> None:
        always = node.with_changes(test=cst.Name("True"))
        self.sites.append(Site(node, always, f"if {code_of(node.test)} -> if True", line))
        if isinstance(node.test, cst.BooleanOperation) and isinstance(node.test.operator, cst.And):
            for keep, drop in ((node.test.right, node.test.left), (node.test.left, node.test.right)):
                self.sites.append(Site(node, node.with_changes(test=keep),
                                       f"condition {code_of(node.test)} without {code_of(drop)}", line))
        if added_guard and _exits_early(node):
            never = node.with_changes(test=cst.Name("False"))
            self.sites.append(Site(node, never, f"guard `if {code_of(node.test)}` dropped", line))

    def leave_Module(self, original_node: cst.Module) -> None:
        # the innermost enclosing if of each added line the fix relies on (its condition not added)
        chosen: dict[int, tuple[cst.If, int, int]] = {}
        for line in self.added:
            inside = [(end - start, id(node), (node, start, end)) for node, start, end in self._ifs
                      if start < line <= end]
            if inside:
                best = min(inside, key=lambda t: (t[0], t[1]))[2]
                chosen[id(best[0])] = best
        for node, start, _ in chosen.values():
            self._widen_if(node, start, added_guard=False)

    def visit_IfExp(self, node: cst.IfExp) -> None:
        line = self._span(node)[0]
        if line in self.added:
            self.sites.append(Site(node, node.body, f"{code_of(node)} -> {code_of(node.body)}", line))

    def visit_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        line = self._span(node)[0]
        if line in self.added and node.type is not None and code_of(node.type) not in ("Exception", "BaseException"):
            wide = node.with_changes(type=cst.Name("Exception"))
            self.sites.append(Site(node, wide, f"except {code_of(node.type)} -> except Exception", line))


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    return line_site_mutants(ctx, Operator.WIDENED_SCOPE, WideningSites)


@register
class WidenedScope(ContextOperator):
    """Imitates *overreach*: the new behaviour also hits cases that must keep the old one, because a guard or
    condition the fix adds or relies on is dropped or always true (real case: sympy-22080, whose
    ``_print_Mod`` parenthesises every Mod and breaks a PASS_TO_PASS test)."""

    name = Operator.WIDENED_SCOPE
    from_context = staticmethod(generate)
    EXAMPLES = (
        Example("def f(x):\n    return str(x)\n",
                "def f(x):\n    if isinstance(x, int) and x < 0:\n        return f'({x})'\n    return str(x)\n",
                "if True:"),
        Example("def f(x):\n    return int(x)\n",
                "def f(x):\n    try:\n        return int(x)\n    except ValueError:\n        return 0\n",
                "except Exception:"),
    )
