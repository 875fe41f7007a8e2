"""token_revert: inside one changed line, one changed token or sub-expression put back to its buggy form.

The buggy and fixed lines of a change block are paired (most similar first). Each pair is split into tokens
(names, numbers, string literals, operators) and diffed; every differing run of tokens, reverted alone, is one
mutant. A string literal changed into another one (a regular expression, a format) is diffed once more by
its parts (escapes, character classes, words), so one of two generalisations inside a regex can be reverted.
Candidates that do not parse are dropped by admission.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator

from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.registry import Example, OperatorInputs, register
from coharden.schema.mutant import Operator

_TOKEN = re.compile(r"""[rbuRBUfF]{0,2}('''|\"\"\"|'|")(?:\\.|(?!\1).)*\1|\w+|\*\*=?|//=?|->|:=|[=!<>]=|<<|>>|\S""")
_STRING_PART = re.compile(r"\\.|\[(?:\\.|[^\]])*\]|\w+|\s+|.")
_MIN_PAIR_RATIO = 0.4


def _tokens(line: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(line)]


def _splice(new: str, new_spans: list[tuple[int, int]], old_text: str) -> str:
    """``new`` with the text covered by ``new_spans`` (a run of tokens) replaced by ``old_text``."""
    start, end = new_spans[0][0], new_spans[-1][1]
    return new[:start] + old_text + new[end:]


def reverts(old: str, new: str) -> Iterator[tuple[str, str]]:
    """(reverted line, description) for every differing token run of the line pair ``old`` -> ``new``."""
    old_tokens, new_tokens = _tokens(old), _tokens(new)
    matcher = difflib.SequenceMatcher(a=[t[0] for t in old_tokens], b=[t[0] for t in new_tokens], autojunk=False)
    opcodes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(opcodes) == 1 and opcodes[0][0] == "replace":
        tag, i1, i2, j1, j2 = opcodes[0]
        if i2 - i1 == 1 and j2 - j1 == 1 and old_tokens[i1][0][-1:] in "'\"" and new_tokens[j1][0][-1:] in "'\"":
            yield from _string_reverts(new, old_tokens[i1], new_tokens[j1])
            return
        if len(opcodes) == 1:
            return  # the only difference: reverting it is the buggy line (incomplete_fix covers that)
    for _tag, i1, i2, j1, j2 in opcodes:
        old_text = old[old_tokens[i1][1]:old_tokens[i2 - 1][2]] if i2 > i1 else ""
        if j2 > j1:
            spans = [(t[1], t[2]) for t in new_tokens[j1:j2]]
            if not old_text:  # a deletion takes the space before the run with it
                before = new_tokens[j1 - 1][2] if j1 > 0 else spans[0][0]
                spans = [(before, spans[-1][1])]
            line = _splice(new, spans, old_text)
            what = new[new_tokens[j1][1]:new_tokens[j2 - 1][2]]
        else:  # the fix dropped tokens: put them back before new token j1
            at = new_tokens[j1][1] if j1 < len(new_tokens) else len(new.rstrip("\n"))
            line = new[:at] + old_text + (" " if old_text[-1:].isalnum() else "") + new[at:]
            what = ""
        yield line, f"{what or '(nothing)'} -> {old_text or '(nothing)'}"


def _string_reverts(new: str, old_token: tuple[str, int, int], new_token: tuple[str, int, int]
                    ) -> Iterator[tuple[str, str]]:
    old_parts = _STRING_PART.findall(old_token[0])
    new_parts = _STRING_PART.findall(new_token[0])
    matcher = difflib.SequenceMatcher(a=old_parts, b=new_parts, autojunk=False)
    opcodes = [op for op in matcher.get_opcodes() if op[0] != "equal"]
    if len(opcodes) < 2:
        return  # one change inside the literal: reverting it is the buggy line
    for _tag, i1, i2, j1, j2 in opcodes:
        literal = "".join(new_parts[:j1] + old_parts[i1:i2] + new_parts[j2:])
        line = new[:new_token[1]] + literal + new[new_token[2]:]
        yield line, f"{''.join(new_parts[j1:j2]) or '(nothing)'} -> {''.join(old_parts[i1:i2]) or '(nothing)'}"


def _pairs(change: FileChange) -> Iterator[tuple[int, str, str]]:
    """(0-based fixed line index, buggy line, fixed line) for the most similar lines of each change block."""
    old, new = change.old_lines, change.new_lines
    for tag, i1, i2, j1, j2 in change.opcodes():
        if tag != "replace":
            continue
        used: set[int] = set()
        for j in range(j1, j2):
            if not new[j].strip() or new[j].strip().startswith("#"):
                continue
            scored = [(difflib.SequenceMatcher(a=old[i], b=new[j]).ratio(), i) for i in range(i1, i2) if i not in used]
            if not scored:
                break
            ratio, i = max(scored)
            if ratio >= _MIN_PAIR_RATIO:
                used.add(i)
                yield j, old[i], new[j]


def generate(ctx: FixContext) -> Iterator[RawMutant]:
    fixed = {c.path: c.new for c in ctx.files}
    for change in ctx.python_files:
        lines = change.new_lines
        for j, old, new in _pairs(change):
            for line, description in reverts(old, new):
                code = "".join(lines[:j] + [line] + lines[j + 1:])
                yield RawMutant(Operator.TOKEN_REVERT, f"line {j + 1}: {description}"[:160], f"{change.path}:{j + 1}",
                                {**fixed, change.path: code}, {"line": j + 1})


@register
class TokenRevert:
    """Imitates *sub-line incompleteness*: the fix is right in one token of a changed line and still buggy in
    another (real case: sympy-20916, whose regex made the letter class Unicode-aware but kept ``[0-9]``)."""

    name = Operator.TOKEN_REVERT
    needs: frozenset[str] = frozenset()

    def generate(self, inputs: OperatorInputs) -> Iterator[RawMutant]:
        return generate(inputs.ctx)

    @classmethod
    def examples(cls) -> list[Example]:
        return [
            Example("import re\nNAME = re.compile(r'^([a-zA-Z]+)([0-9]+)$')\n",
                    "import re\nNAME = re.compile(r'^([^\\W\\d_]+)(\\d+)$')\n",
                    "NAME = re.compile(r'^([^\\W\\d_]+)([0-9]+)$')"),
            Example("def f(x, y):\n    return g(x) + 1\n", "def f(x, y):\n    return g(x, y) + 2\n",
                    "return g(x) + 2"),
        ]
