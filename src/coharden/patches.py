"""Unified diffs: parse (unidiff), split into source and test parts, hunks and change blocks, build diffs.

Patches are always against the instance's base commit. Building a patch from two file contents goes through
:func:`make_diff` so every patch coharden writes has the same shape (``diff --git`` headers, 3 lines of
context, ``\\ No newline at end of file`` markers) and applies with plain ``git apply``.
"""

from __future__ import annotations

import difflib
import fnmatch
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from unidiff import PatchSet
from unidiff.errors import UnidiffParseError

from coharden.config import DEFAULT_TEST_PATTERNS
from coharden.errors import PatchError, TestIdError


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def parse(text: str) -> PatchSet:
    """Parse a unified diff; an unparseable diff raises :class:`PatchError` with unidiff's reason."""
    try:
        return PatchSet(text)
    except UnidiffParseError as exc:
        raise PatchError(f"cannot parse patch: {exc}") from exc


def file_path(patched_file) -> str:
    """Repository-relative path of a patched file (the new path, or the old one for deletions)."""
    path = patched_file.target_file if not patched_file.is_removed_file else patched_file.source_file
    for prefix in ("a/", "b/"):
        if path.startswith(prefix):
            return path[len(prefix) :]
    return path


def _names(patched_file) -> list[str]:
    """The repository-relative paths a file diff names (old and new, ``a/`` / ``b/`` prefixes removed, /dev/null
    left out)."""
    names = []
    for raw in (patched_file.source_file, patched_file.target_file):
        if raw is None or raw == "/dev/null":
            continue
        names.append(raw[2:] if raw.startswith(("a/", "b/")) else raw)
    return names


def safe_paths(text: str) -> list[str]:
    """Every path ``text`` names (old and new names of each file diff), checked to stay inside the worktree: no
    absolute path, no ``..`` or ``.git`` component, no empty component, no control character or backslash. A tool
    other than ``git apply`` (GNU ``patch``, which the SWE-bench harness falls back to) would otherwise write
    wherever an untrusted patch points. Raises :class:`PatchError` naming the first unsafe path."""
    paths: list[str] = []
    for patched in parse(text):
        for name in _names(patched):
            parts = name.split("/")
            if (not name or name.startswith("/") or any(p in ("", ".", "..") or p.lower() == ".git" for p in parts)
                    or any(ord(c) < 32 or c in "\\\x7f" for c in name)):
                raise PatchError(f"unsafe path in patch: {name!r} (a patch may only name files inside the repository)")
            if name not in paths:
                paths.append(name)
    return paths


def is_test_path(path: str, patterns: Sequence[str] = DEFAULT_TEST_PATTERNS) -> bool:
    """True when ``path`` is a test file: a pattern ending in '/' names a directory anywhere in the path,
    any other pattern is matched against the file name."""
    parts = path.split("/")
    name = parts[-1]
    for pattern in patterns:
        if pattern.endswith("/"):
            if pattern[:-1] in parts[:-1]:
                return True
        elif fnmatch.fnmatch(name, pattern):
            return True
    return False


def touched_files(text: str) -> list[str]:
    return [file_path(pf) for pf in parse(text)] if text.strip() else []


def split_patch(text: str, patterns: Sequence[str] = DEFAULT_TEST_PATTERNS) -> tuple[str, str]:
    """Split a patch into (source part, test part), each a valid patch (possibly empty)."""
    if not text.strip():
        return "", ""
    source: list[str] = []
    tests: list[str] = []
    for patched in parse(text):
        (tests if is_test_path(file_path(patched), patterns) else source).append(str(patched))
    return "".join(source), "".join(tests)


def prediction_tests(prediction: str | None, patterns: Sequence[str]) -> tuple[str, list[str]]:
    """The test part of a test prediction and the source files it also touched (dropped: only its tests are
    the test). Raises :class:`TestIdError` for a prediction that is empty, not a diff, or touches no test file:
    such a prediction is ``Invalid`` in every command that grades predictions (batch ``mpe``, ``eval``)."""
    if not (prediction or "").strip():
        raise TestIdError("the test patch is empty")
    if not touched_files(prediction or ""):
        raise TestIdError("the test patch is not a unified diff (no file changes in it)")
    source, tests = split_patch(prediction or "", patterns)
    if not tests.strip():
        raise TestIdError("the test patch touches no test file")
    return tests, touched_files(source)


def drop_binary_stubs(text: str) -> tuple[str, list[str]]:
    """(``text`` without file diffs that only say ``Binary files ... differ``, their paths). Such a diff carries
    no content, so no tool can apply it; the SWE-bench harness's fallback (GNU patch) skips it and applies the
    rest, and so must a grader that wants the harness's verdicts."""
    if "Binary files" not in text:
        return text, []
    kept: list[str] = []
    dropped: list[str] = []
    for patched in parse(text):
        if patched.is_binary_file and not patched and "GIT binary patch" not in str(patched):
            dropped.append(file_path(patched))
        else:
            kept.append(str(patched))
    return "".join(kept), dropped


@dataclass(frozen=True)
class ChangeBlock:
    """A run of consecutive removed/added lines inside a hunk."""

    path: str
    hunk: int  # index of the hunk within its file
    index: int  # index of the block within its hunk
    source_start: int  # first old line the block replaces (or the line after which it inserts)
    removed: tuple[str, ...]
    added: tuple[str, ...]


@dataclass(frozen=True)
class HunkInfo:
    path: str
    index: int
    header: str
    source_start: int
    source_length: int
    blocks: tuple[ChangeBlock, ...]


def _blocks(path: str, h_index: int, hunk) -> list[ChangeBlock]:
    """Runs of consecutive removed/added lines in a unidiff hunk."""
    blocks: list[ChangeBlock] = []
    removed: list[str] = []
    added: list[str] = []
    start = line_no = hunk.source_start
    for line in [*hunk, None]:
        if line is None or line.is_context:
            if removed or added:
                blocks.append(ChangeBlock(path, h_index, len(blocks), start, tuple(removed), tuple(added)))
                removed, added = [], []
            line_no += 1
            continue
        if not removed and not added:
            start = line_no
        if line.is_removed:
            removed.append(line.value)
            line_no += 1
        elif line.is_added:
            added.append(line.value)
    return blocks


def hunks(text: str) -> list[HunkInfo]:
    """All hunks of a patch with their change blocks, in file order."""
    result: list[HunkInfo] = []
    for patched in parse(text):
        path = file_path(patched)
        for h_index, hunk in enumerate(patched):
            header = f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
            blocks = tuple(_blocks(path, h_index, hunk))
            result.append(HunkInfo(path, h_index, header, hunk.source_start, hunk.source_length, blocks))
    return result


def added_lines(text: str) -> dict[str, list[int]]:
    """Target line numbers (1-based) of added lines, per file."""
    out: dict[str, list[int]] = {}
    for patched in parse(text):
        lines = [line.target_line_no for hunk in patched for line in hunk if line.is_added]
        if lines:
            out[file_path(patched)] = lines
    return out


def make_diff(path: str, old: str | None, new: str | None, context: int = 3) -> str:
    """A git-style unified diff of one file from its old and new contents (None: file absent)."""
    if old == new:
        return ""
    old_lines = (old or "").splitlines(keepends=True)
    new_lines = (new or "").splitlines(keepends=True)
    header = [f"diff --git a/{path} b/{path}\n"]
    if old is None:
        header.append("new file mode 100644\n")
    elif new is None:
        header.append("deleted file mode 100644\n")
    from_name = "/dev/null" if old is None else f"a/{path}"
    to_name = "/dev/null" if new is None else f"b/{path}"
    body: list[str] = []
    for line in difflib.unified_diff(old_lines, new_lines, from_name, to_name, n=context):
        if line.startswith(("---", "+++")):
            body.append(line if line.endswith("\n") else line + "\n")
            continue
        if line.endswith("\n"):
            body.append(line)
        else:
            body.append(line + "\n\\ No newline at end of file\n")
    return "".join(header + body)


def make_patch(files: Iterable[tuple[str, str | None, str | None]]) -> str:
    """Concatenate :func:`make_diff` over ``(path, old, new)`` triples, in path order."""
    return "".join(make_diff(path, old, new) for path, old, new in sorted(files, key=lambda f: f[0]))
