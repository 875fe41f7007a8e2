"""higher_order: two first-order mutants of *different* operators applied together.

The first-order mutants are those of the built-in operators that read only the fix (a class without
``needs``: its ``from_context(ctx)``). Every raw mutant is taken as full file contents and diffed, per file,
against the fixed content (difflib line opcodes): its edit is the list of fixed-line ranges it rewrites and
the lines it puts there. That holds whatever the operator started from (``incomplete_fix`` rebuilds files
from the buggy code, the others rewrite the fixed code). Two mutants combine when they come from different
operators and, in every file, each range of one lies at least one unchanged line away from each range of the
other (disjoint and not adjacent: no edit changes what the other one rewrote, and the two never merge into one
hunk); the combination applies both edits to the fixed file.

Deterministic and bounded: the pairs are grouped by operator pair, each group is shuffled with a seed made
from the two operator names, and the groups are taken in turn (registry order) until :data:`MAX_PAIRS`.
"""

from __future__ import annotations

import difflib
import random
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext, parses
from coharden.mutation.registry import ContextOperator, Example, OperatorInputs, register
from coharden.schema.mutant import MECHANICAL_DEFAULT, Operator

MAX_PAIRS = 64
"""Combinations made per fix. The pool samples a few per operator (3 by default, at most 40 mutants in all under
sequential MPE), so more would only cost admission time (a parse of every file of the fix per candidate); 64
leaves every operator pair of a fix a few draws of its own."""
MAX_FIRST_ORDER = 40
"""First-order mutants taken per operator (in its generation order): the pairs to check grow with the square of
the candidates, and a large fix gives some operators hundreds."""

Edit = tuple[int, int, tuple[str, ...]]
"""A change of one file: fixed lines ``[j1, j2)`` replaced by the given lines (``j1 == j2``: an insertion)."""


@dataclass(frozen=True)
class FirstOrder:
    """One first-order mutant as edits of the fixed files."""

    mutant: RawMutant
    edits: dict[str, tuple[Edit, ...]]  # path -> the edits of that file, in order (files it leaves unchanged absent)


def edits_of(ctx: FixContext, mutant: RawMutant) -> dict[str, tuple[Edit, ...]]:
    """Per file of the fix, the edits that turn the fixed content into the mutant's (a file the mutant does not
    list keeps its buggy content, as in admission)."""
    edits: dict[str, tuple[Edit, ...]] = {}
    for change in ctx.files:
        content = mutant.files.get(change.path, change.old)
        if content == change.new:
            continue
        lines = content.splitlines(keepends=True)
        matcher = difflib.SequenceMatcher(a=change.new_lines, b=lines, autojunk=False)
        edits[change.path] = tuple((i1, i2, tuple(lines[j1:j2])) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
                                   if tag != "equal")
    return edits


def apart(a: dict[str, tuple[Edit, ...]], b: dict[str, tuple[Edit, ...]]) -> bool:
    """True when no edit of ``a`` overlaps or touches an edit of ``b`` in the same file: at least one unchanged
    fixed line lies between any two of them."""
    for path in a.keys() & b.keys():
        for i1, i2, _ in a[path]:
            for k1, k2, _ in b[path]:
                if not (k1 > i2 or i1 > k2):
                    return False
    return True


def combined(ctx: FixContext, a: dict[str, tuple[Edit, ...]], b: dict[str, tuple[Edit, ...]]) -> dict[str, str]:
    """Every file of the fix with the (apart) edits of ``a`` and ``b`` applied to its fixed content."""
    files: dict[str, str] = {}
    for change in ctx.files:
        edits = sorted((*a.get(change.path, ()), *b.get(change.path, ())), key=lambda e: (e[0], e[1]))
        new = change.new_lines
        out: list[str] = []
        pos = 0
        for i1, i2, lines in edits:
            out += new[pos:i1]
            out += lines
            pos = i2
        out += new[pos:]
        files[change.path] = "".join(out)
    return files


def first_order(ctx: FixContext, operators: Sequence[Operator] | None = None) -> dict[Operator, list[FirstOrder]]:
    """The first-order mutants of every built-in operator that reads only the fix, this one excepted, by operator
    (registry order): at most :data:`MAX_FIRST_ORDER` each, those that parse and change a fixed file, each
    content once. ``operators``: only these take part (the pool's selection; None: the default pool)."""
    from coharden.mutation.registry import registry  # the operators' classes, imported on first use

    ops = registry()
    out: dict[Operator, list[FirstOrder]] = {}
    seen: set[tuple[tuple[str, str], ...]] = set()
    allowed = set(MECHANICAL_DEFAULT if operators is None else operators)
    for op in MECHANICAL_DEFAULT:
        cls = ops.get(op)
        if op not in allowed:
            continue
        if op == Operator.HIGHER_ORDER or cls is None or cls.needs or not issubclass(cls, ContextOperator):
            continue
        mutants: list[FirstOrder] = []
        for mutant in cls.from_context(ctx):
            if len(mutants) == MAX_FIRST_ORDER:
                break
            edits = edits_of(ctx, mutant)
            key = tuple(sorted((p, mutant.files.get(p, "")) for p in edits))
            if not edits or key in seen or not all(parses(mutant.files.get(p, "")) for p in edits if p.endswith(".py")):
                continue
            seen.add(key)
            mutants.append(FirstOrder(mutant, edits))
        if mutants:
            out[op] = mutants
    return out


def _part(mutant: RawMutant) -> str:
    line = mutant.location.rpartition(":")[2]
    return f"{mutant.operator}: {mutant.description[:72]} (line {line})"


def generate(ctx: FixContext, operators: Sequence[Operator] | None = None) -> Iterator[RawMutant]:
    by_op = first_order(ctx, operators)
    names = list(by_op)
    groups: list[list[tuple[FirstOrder, FirstOrder]]] = []
    for i, first in enumerate(names):
        for second in names[i + 1:]:
            pairs = [(a, b) for a in by_op[first] for b in by_op[second] if apart(a.edits, b.edits)]
            random.Random(f"higher_order:{first}:{second}").shuffle(pairs)
            if pairs:
                groups.append(pairs)
    made = 0
    while made < MAX_PAIRS and any(groups):
        for pairs in groups:
            if pairs and made < MAX_PAIRS:
                a, b = pairs.pop(0)
                made += 1
                yield RawMutant(Operator.HIGHER_ORDER, f"{_part(a.mutant)} + {_part(b.mutant)}", a.mutant.location,
                                combined(ctx, a.edits, b.edits),
                                {"first": {"operator": str(a.mutant.operator), "description": a.mutant.description,
                                           "location": a.mutant.location},
                                 "second": {"operator": str(b.mutant.operator), "description": b.mutant.description,
                                            "location": b.mutant.location}})


@register
class HigherOrder(ContextOperator):
    """Imitates a wrong fix that is wrong in *two places at once*, as real wrong fixes often are (astropy-7606's
    fixed one of the two ``__eq__`` methods and returned ``False`` where ``NotImplemented`` was needed;
    pytest-7205's applied ``saferepr`` to bytes only and without ``maxsize``): two first-order mutants of
    different operators, at separate places of the fix, together."""

    name = Operator.HIGHER_ORDER
    from_context = staticmethod(generate)

    def generate(self, inputs: OperatorInputs) -> Iterable[RawMutant]:
        """Combines only the operators the pool was asked for (``--operators IF,HO`` pairs nothing)."""
        return generate(inputs.ctx, inputs.operators)
    EXAMPLES = (Example("def f(x, lo):\n    if x > 9:\n        return 9\n    return x\n",
                        "def f(x, lo):\n    if x > 9:\n        return 9\n    if x < lo:\n        return lo\n\n"
                        "    return clip(x, 0)\n",
                        "    if x <= lo:\n        return lo\n\n    return clip(0, x)\n"),)
