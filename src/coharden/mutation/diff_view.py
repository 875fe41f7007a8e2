"""A mutant's diff as people read it: the value helpers an input-based mutant carries are folded to one line.

The input-based operators (``input_specific_shortcut``, ``caller_patch``, ...) append coharden's decoder of
recorded values (``_coh_decode`` with its readers, ``_coh_same``, ``_coh_attrs``: about 430 lines) to the module
they mutate, so their shortcut can compare a call's arguments with the recorded ones. Those lines are the same
in every such mutant and say nothing about the wrong fix; printed whole they bury the few lines that do. The
folded text is for reading only (its hunk headers no longer count its lines): the applicable patch stays the
mutant's ``patch`` (``coharden mutants show ID --against-buggy``).
"""

from __future__ import annotations

from coharden.mutation.value_helpers import ATTRS, DECODER, PREFIX, SAME

HELPERS = (DECODER, SAME, ATTRS)


def _starts_helper(line: str) -> bool:
    """An added line that opens one of the helpers: a function or the readers' table, all named ``_coh_...``."""
    return line.startswith((f"+def {PREFIX}", f"+{PREFIX}"))


def _top_level(line: str) -> bool:
    """An added line at column 0 that is code (not blank, not a continuation of a body)."""
    return len(line) > 1 and line[0] == "+" and not line[1].isspace()


def folded(patch: str) -> str:
    """``patch`` with every run of added lines that defines the value helpers (and the blank lines before it)
    replaced by one added comment line naming them and counting the lines."""
    lines = patch.splitlines(keepends=True)
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _starts_helper(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        while out and out[-1].strip() == "+":  # the blank lines that separate the helpers from the module
            out.pop()
        start = i
        names: list[str] = []
        while i < len(lines) and lines[i].startswith("+") and not lines[i].startswith("+++"):
            if _top_level(lines[i]) and not _starts_helper(lines[i]):
                break  # code of the mutant's own after the helpers
            names += [name for name in HELPERS if lines[i].startswith(f"+def {name}(")]
            i += 1
        out.append(f"+# ... {i - start} lines of coharden's value helpers ({', '.join(names)}) folded: "
                   "`coharden mutants show ID --against-buggy` prints them\n")
    return "".join(out)
