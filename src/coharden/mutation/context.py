"""What mechanical operators need to know about a fix: per file, the buggy and the fixed source."""

from __future__ import annotations

import ast
import difflib
from dataclasses import dataclass, field
from functools import cached_property

from coharden import pysource


@dataclass(frozen=True)
class FileChange:
    path: str
    old: str  # buggy content ("" for a new file)
    new: str  # fixed content

    # computed once per change (the operators ask for them per candidate; a diff of two 2,000-line files
    # costs tens of milliseconds); callers get copies of the lists, so nobody changes the cached ones
    @cached_property
    def _old_lines(self) -> tuple[str, ...]:
        return tuple(self.old.splitlines(keepends=True))

    @cached_property
    def _new_lines(self) -> tuple[str, ...]:
        return tuple(self.new.splitlines(keepends=True))

    @property
    def old_lines(self) -> list[str]:
        return list(self._old_lines)

    @property
    def new_lines(self) -> list[str]:
        return list(self._new_lines)

    @cached_property
    def _opcodes(self) -> tuple[tuple[str, int, int, int, int], ...]:
        matcher = difflib.SequenceMatcher(a=self._old_lines, b=self._new_lines, autojunk=False)
        return tuple(op for op in matcher.get_opcodes() if op[0] != "equal")

    def opcodes(self) -> list[tuple[str, int, int, int, int]]:
        """Non-equal difflib opcodes (tag, i1, i2, j1, j2) between old and new lines: the change blocks."""
        return list(self._opcodes)

    def added_lines(self) -> set[int]:
        """1-based line numbers in the fixed file that the fix adds or rewrites."""
        return {j + 1 for tag, _, _, j1, j2 in self.opcodes() if tag in ("replace", "insert") for j in range(j1, j2)}

    def changed_old_lines(self) -> set[int]:
        """1-based line numbers of the buggy file that the fix removes, or next to which it inserts."""
        lines: set[int] = set()
        for _, i1, i2, _, _ in self.opcodes():
            lines.update(range(i1 + 1, i2 + 1) if i2 > i1 else {max(i1, 1), i1 + 1})
        return lines


@dataclass
class FixContext:
    """The fix as whole files. Only Python files take part in mutation."""

    files: list[FileChange] = field(default_factory=list)

    @property
    def python_files(self) -> list[FileChange]:
        return [f for f in self.files if f.path.endswith(".py")]


def parses(source: str) -> bool:
    try:
        pysource.parse(source)
    except (SyntaxError, ValueError):  # ValueError: a null byte (Python < 3.12), e.g. in a model's reply
        return False
    return True


def normalized(source: str) -> str:
    """AST dump without positions: equal for sources that differ only in layout or comments."""
    try:
        return ast.dump(pysource.parse(source), include_attributes=False)
    except SyntaxError:
        return "<unparseable>" + source


def functions_touched(change: FileChange) -> list[str]:
    """Qualified names (Class.method / func / outer.inner) of functions in the fixed file whose body holds
    a changed line and that also exist in the buggy file. Innermost function wins. A pure insertion also
    touches the functions its neighbouring buggy lines belong to (see :func:`functions_changed` for the
    strict reading)."""
    return _touched(change, change.changed_old_lines(), function_spans(change.new))


def functions_changed(change: FileChange) -> list[str]:
    """:func:`functions_touched` in the strict reading: a function the fix rewrites itself (a line added
    inside it, decorators included, or one of its own buggy lines removed or replaced), never the neighbour
    of an insertion. A fix that only adds a method touches the method beside it, but changes no function."""
    removed = {i + 1 for _, i1, i2, _, _ in change.opcodes() for i in range(i1, i2)}
    return _touched(change, removed, function_spans(change.new, decorators=True))


def functions_added(change: FileChange) -> list[str]:
    """Qualified names of the functions of the fixed file that the buggy file does not have."""
    old = function_spans(change.old)
    return [name for name in function_spans(change.new) if name not in old]


def _touched(change: FileChange, removed_old: set[int], new_spans: dict[str, tuple[int, int]]) -> list[str]:
    added = change.added_lines()
    names: list[str] = []
    old_spans = function_spans(change.old)
    for qualname, (start, end) in new_spans.items():
        hit = any(start <= line <= end for line in added)
        if not hit and qualname in old_spans:
            o_start, o_end = old_spans[qualname]
            hit = any(o_start <= line <= o_end for line in removed_old)
        if hit and qualname in old_spans:
            names.append(qualname)
    # keep the innermost: drop a name when one of its nested functions is also listed
    return [n for n in names if not any(other.startswith(n + ".") for other in names)]


def record_targets(ctx: FixContext) -> list[dict[str, str]]:
    """Functions the input recorder watches: those the fix touches that also exist in the buggy code."""
    return [{"path": c.path, "qualname": q} for c in ctx.python_files if c.old for q in functions_touched(c)]


def function_spans(source: str, decorators: bool = False) -> dict[str, tuple[int, int]]:
    """Qualified name -> (first line, last line) of every function in ``source`` ({} when it does not parse);
    the first line is the ``def`` line, or with ``decorators`` the first decorator's."""
    try:
        tree = pysource.parse(source)
    except SyntaxError:
        return {}
    spans: dict[str, tuple[int, int]] = {}

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{node.name}"
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)]) if decorators else node.lineno
                spans[name] = (first, node.end_lineno or node.lineno)
                walk(node.body, name + ".")
            elif isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(tree.body, "")
    return spans
