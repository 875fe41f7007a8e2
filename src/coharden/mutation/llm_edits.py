"""LLM mutant operators, the edit format: SEARCH/REPLACE blocks against the fixed files (see
:mod:`coharden.mutation.llm_operators` for why this format), or a unified diff where a reply has no such block
(small local models write diffs best, with wrong hunk line numbers and shifted indentation: both tolerated),
parsed, applied, and turned into a raw mutant."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext, parses
from coharden.patches import is_test_path
from coharden.schema.mutant import Operator


class EditFormatError(ValueError):
    """A reply that cannot be turned into a mutant; ``reason`` is the short inadmissibility reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True)
class EditBlock:
    path: str | None
    """The file named on the line before the block (None when no name was found)."""
    search: tuple[str, ...]
    replace: tuple[str, ...]
    reply_line: int
    """1-based line of ``<<<<<<< SEARCH`` in the reply, for messages."""
    hunk: tuple[tuple[str, str], ...] = ()
    """A diff hunk's lines as (tag, text), tag one of `` ``, ``-``, ``+`` (empty for a SEARCH/REPLACE block): what
    :func:`apply_edit_blocks` anchors on when the hunk's context does not match (``fuzzy``)."""


_SEARCH = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER = re.compile(r"^\s*={5,9}\s*$")
_REPLACE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_SUMMARY = re.compile(r"^\s*\**summary\**\s*:\s*\**\s*(.+)$", re.IGNORECASE)


def _path_from(line: str) -> str | None:
    """A file path from the line above a block: ``path``, ``# File: path``, ```` ```python path ````, ..."""
    text = line.strip()
    if text.startswith("```"):
        tokens = text.strip("`").split()
        text = next((t for t in tokens if "/" in t or "." in t), "")
    text = re.sub(r"^(#+\s*)?(file(name)?\s*:\s*)?", "", text, flags=re.IGNORECASE).strip()
    text = text.strip("*`'\"").rstrip(":").strip().strip("*`'\"")
    for prefix in ("./", "a/", "b/"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return text or None


def parse_edit_blocks(reply: str) -> tuple[list[EditBlock], str | None]:
    """The SEARCH/REPLACE blocks of a reply and its ``Summary:`` line (if any).

    Raises :class:`EditFormatError` (``no_edit_blocks`` / ``malformed_block``).
    """
    lines = reply.splitlines()
    blocks: list[EditBlock] = []
    summary: str | None = None
    i = 0
    while i < len(lines):
        match = _SUMMARY.match(lines[i])
        if match and summary is None:
            summary = match.group(1).strip().strip("*").strip()
        if not _SEARCH.match(lines[i]):
            i += 1
            continue
        start = i
        path: str | None = None
        for j in range(i - 1, max(-1, i - 4), -1):  # the file name: the nearest non-empty line above
            above = lines[j].strip()
            if not above or (above.startswith("```") and _path_from(above) is None):
                continue
            if _REPLACE.match(above):
                break
            path = _path_from(above)
            break
        i += 1
        search: list[str] = []
        while i < len(lines) and not _DIVIDER.match(lines[i]):
            if _SEARCH.match(lines[i]) or _REPLACE.match(lines[i]):
                raise EditFormatError("malformed_block", f"block at reply line {start + 1} has no ======= divider")
            search.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditFormatError("malformed_block", f"block at reply line {start + 1} has no ======= divider")
        i += 1
        replace: list[str] = []
        while i < len(lines) and not _REPLACE.match(lines[i]):
            if _SEARCH.match(lines[i]) or _DIVIDER.match(lines[i]):
                raise EditFormatError("malformed_block", f"block at reply line {start + 1} is not closed by "
                                                         ">>>>>>> REPLACE")
            replace.append(lines[i])
            i += 1
        if i >= len(lines):
            raise EditFormatError("malformed_block", f"block at reply line {start + 1} is not closed by "
                                                     ">>>>>>> REPLACE")
        i += 1
        if path is None and blocks:  # consecutive blocks without a file line: the same file as before
            path = blocks[-1].path
        blocks.append(EditBlock(path, tuple(search), tuple(replace), start + 1))
    if not blocks:
        raise EditFormatError("no_edit_blocks", "the reply holds no SEARCH/REPLACE block")
    return blocks, summary


_DIFF_FILE = re.compile(r"^\+\+\+\s+(?:b/)?(?P<path>\S+)")
_DIFF_OLD = re.compile(r"^---\s+(?:a/)?(?P<path>\S+)")
_HUNK = re.compile(r"^@@.*@@")


def parse_diff_blocks(reply: str) -> list[EditBlock]:
    """The hunks of a unified diff in a reply, as edit blocks: context and removed lines are what to find,
    context and added lines what to put there. Hunk line numbers are ignored (small models get them wrong),
    and a line inside a hunk without its one-character prefix counts as context. Empty when the reply holds
    no hunk."""
    lines = reply.splitlines()
    blocks: list[EditBlock] = []
    path: str | None = None
    i = 0
    while i < len(lines):
        line = lines[i]
        if (old := _DIFF_OLD.match(line)) and i + 1 < len(lines) and _DIFF_FILE.match(lines[i + 1]):
            new = _DIFF_FILE.match(lines[i + 1])
            assert new is not None
            path = new.group("path") if new.group("path") != "/dev/null" else old.group("path")
            i += 2
            continue
        if not _HUNK.match(line):
            i += 1
            continue
        start, i = i, i + 1
        search: list[str] = []
        replace: list[str] = []
        hunk: list[tuple[str, str]] = []
        while i < len(lines) and not _HUNK.match(lines[i]) and not lines[i].startswith(("```", "--- ", "diff ")):
            body = lines[i]
            if body.startswith("-"):
                search.append(body[1:])
                hunk.append(("-", body[1:]))
            elif body.startswith("+"):
                replace.append(body[1:])
                hunk.append(("+", body[1:]))
            elif body.startswith("\\"):  # "\ No newline at end of file"
                pass
            else:
                context = body[1:] if body.startswith(" ") else body
                search.append(context)
                replace.append(context)
                hunk.append((" ", context))
            i += 1
        while search and replace and not search[-1].strip() and not replace[-1].strip():
            search.pop()  # blank lines the reply trails after a hunk are no part of it
            replace.pop()
            hunk.pop()
        blocks.append(EditBlock(path, tuple(search), tuple(replace), start + 1, tuple(hunk)))
    return blocks


def parse_reply(reply: str) -> tuple[list[EditBlock], str | None, str]:
    """The edit blocks of a reply in either format: SEARCH/REPLACE blocks (asked for) or, failing those, a
    unified diff (what small models write best). Returns (blocks, summary, format)."""
    try:
        blocks, summary = parse_edit_blocks(reply)
        return blocks, summary, "search_replace"
    except EditFormatError as exc:
        if exc.reason != "no_edit_blocks":
            raise
        summary = next((m.group(1).strip() for line in reply.splitlines() if (m := _SUMMARY.match(line))), None)
        blocks = parse_diff_blocks(reply)
        if not blocks:
            raise EditFormatError("no_edit_blocks",
                                  "the reply holds no SEARCH/REPLACE block and no diff hunk") from None
        if all(block.search == block.replace for block in blocks):
            raise EditFormatError("no_change", "every hunk of the reply's diff leaves the code as it is") from None
        return blocks, summary, "diff"


def _find(lines: list[str], wanted: Sequence[str]) -> tuple[list[int], int | None]:
    """Where ``wanted`` matches whole lines: exact up to trailing whitespace, else (only then) up to
    indentation; returns (hits, indentation shift of the file against the block, None for exact hits)."""
    n = len(wanted)
    exact = [s.rstrip() for s in wanted]
    hits = [k for k in range(len(lines) - n + 1) if [x.rstrip() for x in lines[k:k + n]] == exact]
    if hits:
        return hits, None
    stripped = [s.strip() for s in wanted]
    loose = [k for k in range(len(lines) - n + 1) if [x.strip() for x in lines[k:k + n]] == stripped]
    if not loose:
        return [], None
    first = next(j for j, s in enumerate(wanted) if s.strip())
    shifts = {_indent(lines[k + first]) - _indent(wanted[first]) for k in loose}
    return loose, shifts.pop() if len(shifts) == 1 else 0


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _reindent(lines: Sequence[str], shift: int) -> list[str]:
    if shift > 0:
        return [" " * shift + line if line.strip() else line for line in lines]
    return [line[min(-shift, _indent(line)):] for line in lines]


def _resolve_path(block: EditBlock, files: dict[str, str], test_patterns: Sequence[str]) -> str:
    """The fix file a block edits; inadmissible when it names a test file or a file outside the fix."""
    path = block.path
    if path is not None and path in files:
        return path
    if path is not None and is_test_path(path, test_patterns):
        raise EditFormatError("touches_test_file", f"block at reply line {block.reply_line} edits test file {path}")
    if path is not None and ("/" in path or re.search(r"\.\w+$", path)):
        raise EditFormatError("unknown_file", f"block at reply line {block.reply_line} edits {path}, which the fix "
                                              f"does not touch (editable: {', '.join(sorted(files))})")
    if len(files) == 1:  # no recognizable file name, and only one file it can mean
        return next(iter(files))
    raise EditFormatError("missing_file_path", f"block at reply line {block.reply_line} names no file of the fix")


def apply_edit_blocks(blocks: Sequence[EditBlock], files: dict[str, str],
                      test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS, *,
                      fuzzy: bool = False) -> tuple[dict[str, str], str]:
    """Apply ``blocks`` in order to ``files`` (path -> FIXED content); return (new contents, location).

    Each SEARCH text must match whole lines of the current content exactly once (trailing whitespace is
    ignored: it is invisible in the prompt); where it matches nowhere exactly, it may match up to indentation
    (a small model indents the context by a few more spaces), and the replacement is shifted by the same
    amount. Every block's file is checked before any block is applied, so a
    reply touching a test file is rejected as such even if an earlier block fails to match. Raises
    :class:`EditFormatError` with ``touches_test_file``, ``unknown_file``, ``missing_file_path``,
    ``search_empty``, ``search_not_found`` or ``search_ambiguous``.

    ``fuzzy``: a diff hunk whose context matches nowhere is applied by its changed lines instead
    (:func:`_anchored`): a small model gets context lines wrong (drops blank lines, misquotes a neighbour) far
    more often than the lines it removes.
    """
    paths = [_resolve_path(block, files, test_patterns) for block in blocks]
    current = dict(files)
    location = ""
    for block, path in zip(blocks, paths, strict=True):
        if not any(line.strip() for line in block.search):
            raise EditFormatError("search_empty", f"block at reply line {block.reply_line} has an empty SEARCH part")
        content = current[path]
        newline = "\r\n" if "\r\n" in content else "\n"
        ends_with_newline = content.endswith("\n")
        # split on newlines only: str.splitlines would also split on form feeds and other separators
        lines = (content[:-1] if ends_with_newline else content).split("\n") if content else []
        if newline == "\r\n":
            lines = [line.removesuffix("\r") for line in lines]
        n = len(block.search)
        hits, shift = _find(lines, block.search)
        anchored = _anchored(lines, block.hunk) if fuzzy and block.hunk else None
        if anchored is not None:
            new_lines, k = anchored
        elif not hits:
            raise EditFormatError("search_not_found", f"block at reply line {block.reply_line}: SEARCH text not found "
                                                      f"in {path}")
        elif len(hits) > 1:
            raise EditFormatError("search_ambiguous", f"block at reply line {block.reply_line}: SEARCH text occurs "
                                                      f"{len(hits)} times in {path}")
        else:
            k = hits[0]
            replacement = list(block.replace) if shift is None else _reindent(block.replace, shift)
            new_lines = lines[:k] + replacement + lines[k + n:]
        current[path] = newline.join(new_lines) + (newline if ends_with_newline and new_lines else "")
        if not location:
            location = f"{path}:{k + 1}"
    return current, location


def _anchored(lines: list[str], hunk: Sequence[tuple[str, str]]) -> tuple[list[str], int] | None:
    """``lines`` with a diff hunk applied by its changed lines, its context ignored; (new lines, first changed
    index), or None where that is not unique. Each run of ``-``/``+`` lines is placed on its own, in order:
    by its removed lines (consecutive in the file, up to indentation, exactly once after the previous run), or,
    for a run that only adds, after the context line before it (or before the one after it), found alike. An
    added line keeps the indentation of the line it replaces where a run replaces line for line (a small model
    indents a changed line by one level too many), and otherwise shifts with its anchor."""
    runs: list[tuple[str | None, list[str], list[str], str | None]] = []  # (context before, -, +, context after)
    before: str | None = None  # the last non-blank context line
    current: tuple[str | None, list[str], list[str]] | None = None
    for tag, text in hunk:
        if tag != " ":
            current = current or (before, [], [])
            (current[1] if tag == "-" else current[2]).append(text)
            continue
        if current is not None:
            runs.append((*current, text if text.strip() else None))
            current = None
        before = text if text.strip() else before
    if current is not None:
        runs.append((*current, None))
    edits: list[tuple[int, int, list[str]]] = []  # (start, end, replacement), top down
    start = 0
    for ctx_before, removed, added, ctx_after in runs:
        if removed:
            hits = _find_from(lines, removed, start)
            if len(hits) != 1:
                return None
            k = hits[0]
            if len(added) == len(removed):
                new = [" " * _indent(lines[k + i]) + line.lstrip() if line.strip() else line
                       for i, line in enumerate(added)]
            else:
                new = _reindent(added, _indent(lines[k]) - _indent(removed[0]))
            edits.append((k, k + len(removed), new))
            start = k + len(removed)
            continue
        after = ctx_before is not None  # insert after the line before the run, else before the line after it
        anchor = ctx_before if after else ctx_after
        if anchor is None:
            return None
        hits = _find_from(lines, [anchor], start)
        if len(hits) != 1:
            return None
        k = hits[0] + (1 if after else 0)
        edits.append((k, k, _reindent(added, _indent(lines[hits[0]]) - _indent(anchor))))
        start = k
    if not edits:
        return None
    new_lines = list(lines)
    for begin, end, replacement in reversed(edits):
        new_lines[begin:end] = replacement
    return new_lines, edits[0][0]


def _find_from(lines: list[str], wanted: Sequence[str], start: int) -> list[int]:
    """Where ``wanted`` matches whole lines up to indentation at or after ``start``."""
    stripped = [s.strip() for s in wanted]
    n = len(wanted)
    return [k for k in range(start, len(lines) - n + 1) if [x.strip() for x in lines[k:k + n]] == stripped]


def reply_to_raw_mutant(reply: str, ctx: FixContext, operator: Operator, *,
                        test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS,
                        meta: dict[str, Any] | None = None) -> RawMutant:
    """A model reply -> a :class:`RawMutant` holding the full content of every file of the fix."""
    blocks, summary, form = parse_reply(reply)
    fixed = {c.path: c.new for c in ctx.files}
    if form == "diff":
        files, location, applied = _tolerant(blocks, ctx, test_patterns)
    else:  # asked-for blocks apply exactly or not at all (see coharden.mutation.llm_operators)
        files, location = apply_edit_blocks(blocks, fixed, test_patterns)
        applied = {"base": "fixed", "match": "exact"}
    description = (summary or f"LLM {operator} variant of the fix")[:300]
    return RawMutant(operator, description, location, files, {**(meta or {}), "blocks": len(blocks),
                                                              "format": form, **applied})


def _tolerant(blocks: Sequence[EditBlock], ctx: FixContext,
              test_patterns: Sequence[str]) -> tuple[dict[str, str], str, dict[str, str]]:
    """A diff reply applied as a small model means it: to the fixed code as written, else by its changed lines
    (``fuzzy``), else the same to the buggy code (shown the fix's diff, a small model often writes its wrong fix
    against the buggy lines it saw there; the result is then a wrong fix of the bug, checked like every mutant:
    it must parse and differ from the fix and from the buggy code). The first way whose Python files parse is
    taken (a changed line indented one level too deep parses only when anchored), else the first that applies;
    where none applies, the error of the first."""
    bases = {"fixed": {c.path: c.new for c in ctx.files},
             "buggy": {c.path: c.old for c in ctx.files if c.old is not None}}
    first_error: EditFormatError | None = None
    fallback: tuple[dict[str, str], str, dict[str, str]] | None = None
    for base, fuzzy in (("fixed", False), ("fixed", True), ("buggy", False), ("buggy", True)):
        if len(bases[base]) != len(ctx.files):
            continue  # the fix adds a file: there is no buggy version of it
        try:
            files, location = apply_edit_blocks(blocks, bases[base], test_patterns, fuzzy=fuzzy)
        except EditFormatError as exc:
            if exc.reason not in ("search_not_found", "search_ambiguous"):
                raise
            first_error = first_error or exc
            continue
        applied = (files, location, {"base": base, "match": "anchored" if fuzzy else "exact"})
        if all(parses(text) for path, text in files.items() if path.endswith(".py")):
            return applied
        fallback = fallback or applied
    if fallback is not None:
        return fallback
    assert first_error is not None
    raise first_error

