"""misplaced_guard: an early-exit guard the fix adds, kept as written but moved within its block.

Sites, on the fixed code (libcst, layout kept): an ``if c: ... return/raise/continue/break`` without ``else``
whose condition is on a line the fix adds, in an indented block (a function's body, a loop's, a branch's).
Moves:

* one statement later: the statement after it now runs first, also in the cases the guard excludes (not when
  that statement itself ends the block: the guard would be dead code, ``widened_scope`` drops guards);
* to just before the block's final ``return`` / ``raise`` when that is further down: the work between runs
  first;
* one statement earlier, when the condition uses no name the statement before it mentions (so the move does
  not merely raise a NameError) and that statement is no docstring: the guard now sees the state before
  that statement.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import libcst as cst
from libcst.metadata import PositionProvider

from coharden.mutation.behavior_substitution import Site, code_of, line_site_mutants
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
from coharden.mutation.cstedit import LineSites
from coharden.mutation.registry import ContextOperator, Example, register
from coharden.schema.mutant import Operator

_EXITS = (cst.Return, cst.Raise, cst.Continue, cst.Break)


def _ends(statement: cst.BaseStatement) -> bool:
    """A statement after which nothing in its block runs: a line ending in return / raise / continue / break."""
    return isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[-1], _EXITS)


def is_guard(statement: cst.BaseStatement) -> bool:
    """An ``if`` without ``else`` whose indented body ends by leaving the block."""
    return (isinstance(statement, cst.If) and statement.orelse is None and isinstance(statement.body, cst.IndentedBlock)
            and bool(statement.body.body) and _ends(statement.body.body[-1]))


class _Names(cst.CSTVisitor):
    def __init__(self) -> None:
        self.names: set[str] = set()

    def visit_Name(self, node: cst.Name) -> None:
        self.names.add(node.value)


def _is_docstring(statement: cst.BaseStatement) -> bool:
    return isinstance(statement, cst.SimpleStatementLine) and isinstance(statement.body[0], cst.Expr) \
        and isinstance(statement.body[0].value, cst.SimpleString | cst.ConcatenatedString)


def _names(node: cst.CSTNode) -> set[str]:
    finder = _Names()
    node.visit(finder)
    return finder.names


def _first_line(statement: cst.BaseStatement) -> str:
    return code_of(statement).strip().splitlines()[0][:60]


def _moved(body: Sequence[cst.BaseStatement], k: int, to: int) -> list[cst.BaseStatement]:
    """``body`` with statement ``k`` taken out and put back at index ``to`` of what is left."""
    rest = [s for i, s in enumerate(body) if i != k]
    return [*rest[:to], body[k], *rest[to:]]


class GuardSites(LineSites):
    """The guard moves of a module, for the 1-based fixed-file lines ``added``."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, added: set[int]) -> None:
        self.added = self.lines = added
        self.sites: list[Site] = []

    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        body = list(node.body)
        for k, statement in enumerate(body):
            if not is_guard(statement):
                continue
            assert isinstance(statement, cst.If)
            line = self.get_metadata(PositionProvider, statement.test).start.line
            if line not in self.added:
                continue
            guard = f"guard `if {code_of(statement.test)}`"
            if k + 1 < len(body) and not _ends(body[k + 1]):
                self._add(node, _moved(body, k, k + 1), f"{guard} moved after `{_first_line(body[k + 1])}`", line)
                last = len(body) - 1
                if last > k + 2 and _ends(body[last]):  # not where the move above put it
                    self._add(node, _moved(body, k, last - 1),
                              f"{guard} moved to just before `{_first_line(body[last])}`", line)
            if k > 0 and not is_guard(body[k - 1]) and not _is_docstring(body[k - 1]) \
                    and not (_names(statement.test) & _names(body[k - 1])):
                self._add(node, _moved(body, k, k - 1), f"{guard} moved before `{_first_line(body[k - 1])}`", line)

    def _add(self, block: cst.IndentedBlock, body: list[cst.BaseStatement], description: str, line: int) -> None:
        self.sites.append(Site(block, block.with_changes(body=body), description, line))


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    return line_site_mutants(ctx, Operator.MISPLACED_GUARD, GuardSites)


@register
class MisplacedGuard(ContextOperator):
    """Imitates the right check *in the wrong place*: the guard the fix needs, placed after work it should have
    prevented or before the state it should have seen (pylint-4970's wrong fix returned early from
    ``_compute_sims`` where the golden fix returns before the results are displayed; sympy-17139's checked the
    exponent in ``TR6`` instead of inside the helper that needs it)."""

    name = Operator.MISPLACED_GUARD
    from_context = staticmethod(generate)
    EXAMPLES = (Example("def run(s):\n    s.compute()\n    s.show()\n",
                        "def run(s):\n    if s.min_lines == 0:\n        return\n    s.compute()\n    s.show()\n",
                        "    s.compute()\n    if s.min_lines == 0:\n        return\n    s.show()\n"),)
