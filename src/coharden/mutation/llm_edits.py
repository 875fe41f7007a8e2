"""LLM mutant operators, the edit format: SEARCH/REPLACE blocks against the fixed files (see
:mod:`coharden.mutation.llm_operators` for why this format), parsed, applied, and turned into a raw mutant."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FixContext
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
                      test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS) -> tuple[dict[str, str], str]:
    """Apply ``blocks`` in order to ``files`` (path -> FIXED content); return (new contents, location).

    Each SEARCH text must match whole lines of the current content exactly once (trailing whitespace is
    ignored: it is invisible in the prompt). Every block's file is checked before any block is applied, so a
    reply touching a test file is rejected as such even if an earlier block fails to match. Raises
    :class:`EditFormatError` with ``touches_test_file``, ``unknown_file``, ``missing_file_path``,
    ``search_empty``, ``search_not_found`` or ``search_ambiguous``.
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
        wanted = [s.rstrip() for s in block.search]
        n = len(wanted)
        hits = [k for k in range(len(lines) - n + 1) if [x.rstrip() for x in lines[k:k + n]] == wanted]
        if not hits:
            raise EditFormatError("search_not_found", f"block at reply line {block.reply_line}: SEARCH text not found "
                                                      f"in {path}")
        if len(hits) > 1:
            raise EditFormatError("search_ambiguous", f"block at reply line {block.reply_line}: SEARCH text occurs "
                                                      f"{len(hits)} times in {path}")
        k = hits[0]
        new_lines = lines[:k] + list(block.replace) + lines[k + n:]
        current[path] = newline.join(new_lines) + (newline if ends_with_newline and new_lines else "")
        if not location:
            location = f"{path}:{k + 1}"
    return current, location


def reply_to_raw_mutant(reply: str, ctx: FixContext, operator: Operator, *,
                        test_patterns: Sequence[str] = DEFAULT_TEST_PATTERNS,
                        meta: dict[str, Any] | None = None) -> RawMutant:
    """A model reply -> a :class:`RawMutant` holding the full content of every file of the fix."""
    blocks, summary = parse_edit_blocks(reply)
    fixed = {c.path: c.new for c in ctx.files}
    files, location = apply_edit_blocks(blocks, fixed, test_patterns)
    description = (summary or f"LLM {operator.value} variant of the fix")[:300]
    return RawMutant(operator, description, location, files, {**(meta or {}), "blocks": len(blocks)})
