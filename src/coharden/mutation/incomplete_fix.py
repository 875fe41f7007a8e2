"""incomplete_fix: apply only part of the fix.

Hunks are the change blocks grouped as a unified diff with 3 lines of context would group them. For fixes
with several hunks: every leave-one-out subset and every single hunk. Within a hunk with several change
blocks: revert one block at a time. A single-block fix that adds several lines: drop one added line at a
time (kept only when the result parses).
"""

from __future__ import annotations

from collections.abc import Iterator

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.registry import Example, OperatorInputs, register
from coharden.schema.mutant import Operator

Block = tuple[int, int, int, int, int, int]  # (file index, opcode index, i1, i2, j1, j2)


def _hunks(change: FileChange, file_index: int, context: int = 3) -> list[list[Block]]:
    groups: list[list[Block]] = []
    for k, (_, i1, i2, j1, j2) in enumerate(change.opcodes()):
        block = (file_index, k, i1, i2, j1, j2)
        if groups and i1 - groups[-1][-1][3] <= 2 * context:
            groups[-1].append(block)
        else:
            groups.append([block])
    return groups


def _build(change: FileChange, keep: set[int]) -> str:
    """The buggy file with only the opcodes whose index is in ``keep`` applied."""
    old, new = change.old_lines, change.new_lines
    out: list[str] = []
    pos = 0
    for k, (_, i1, i2, j1, j2) in enumerate(change.opcodes()):
        out += old[pos:i1]
        out += new[j1:j2] if k in keep else old[i1:i2]
        pos = i2
    out += old[pos:]
    return "".join(out)


def _contents(ctx: FixContext, applied: set[tuple[int, int]]) -> dict[str, str]:
    files: dict[str, str] = {}
    for index, change in enumerate(ctx.files):
        keep = {k for f, k in applied if f == index}
        files[change.path] = _build(change, keep)
    return files


def _loc(ctx: FixContext, block: Block) -> str:
    return f"{ctx.files[block[0]].path}:{block[4] + 1}"


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    hunks: list[list[Block]] = []
    for index, change in enumerate(ctx.files):
        hunks += _hunks(change, index)
    every = {(b[0], b[1]) for hunk in hunks for b in hunk}
    if len(hunks) > 1:
        for h, hunk in enumerate(hunks):
            left_out = {(b[0], b[1]) for b in hunk}
            yield RawMutant(Operator.INCOMPLETE_FIX, f"fix without hunk {h + 1} of {len(hunks)}", _loc(ctx, hunk[0]),
                            _contents(ctx, every - left_out), {"kind": "leave_one_out", "hunk": h})
            if len(hunks) > 2:
                yield RawMutant(Operator.INCOMPLETE_FIX, f"only hunk {h + 1} of {len(hunks)}", _loc(ctx, hunk[0]),
                                _contents(ctx, left_out), {"kind": "single_hunk", "hunk": h})
    for h, hunk in enumerate(hunks):
        if len(hunk) > 1:
            for b, block in enumerate(hunk):
                yield RawMutant(Operator.INCOMPLETE_FIX, f"fix with change block {b + 1} of hunk {h + 1} reverted",
                                _loc(ctx, block), _contents(ctx, every - {(block[0], block[1])}),
                                {"kind": "revert_block", "hunk": h, "block": b})
    blocks = [b for hunk in hunks for b in hunk]
    if len(blocks) == 1:
        f, k, i1, i2, j1, j2 = blocks[0]
        change = ctx.files[f]
        new = change.new_lines
        for j in range(j1, j2):
            if not new[j].strip() or new[j].strip().startswith("#"):
                continue
            lines = new[:j] + new[j + 1 :]
            files = _contents(ctx, every)
            files[change.path] = "".join(lines)
            yield RawMutant(Operator.INCOMPLETE_FIX, f"fix without added line {j + 1}: {new[j].strip()[:60]}",
                            f"{change.path}:{j + 1}", files, {"kind": "drop_line", "line": j + 1})


@register
class IncompleteFix:
    """Imitates a wrong fix that is a *subset of the golden fix*: one hunk or change block missing (real cases:
    sympy-18199 without composite moduli, sympy-20438 without the comparison.py hunk)."""

    name = Operator.INCOMPLETE_FIX
    needs: frozenset[str] = frozenset()

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        return generate(inputs.ctx)

    @classmethod
    def examples(cls) -> list[Example]:
        return [Example("def f(x):\n    a = x\n    b = 1\n    return a + b\n",
                        "def f(x):\n    a = abs(x)\n    b = 1\n    return a * b\n",
                        "    a = x\n    b = 1\n    return a * b\n")]
