"""Changed-line coverage of a test over a fix, measured with coverage.py on the old and on the new code.

Definition. The *changed lines* of a fix are, per Python source file it touches, the lines of the old (base)
file that the fix deletes or rewrites and the lines of the new (fixed) file that it adds or rewrites (difflib
line opcodes between the two whole files; a pure insertion deletes nothing, a pure deletion adds nothing). Only
*executable* changed lines count: a line counts when it belongs to a statement as coverage.py's parser sees
the file (its ``statements``, after mapping the line to the first line of its statement), and is not blank
or a comment. Docstrings, comments and blank lines therefore never count. A changed line is *covered* when
its statement ran: deleted lines in a run of the test on the old code, added lines in a run on the new code.

    changed-line coverage = (covered deleted + covered added) / (executable deleted + executable added)

It is ``None`` when the fix changes no executable line. Non-Python files and test files are not measured.

How lines are measured: :mod:`coharden.overfit.linecov_plugin`, a pytest plugin started in the test process
(see its docstring for why it is a plugin), with coverage.py (``backend="coverage"``; coverage.py must be
importable by the TEST interpreter, else :class:`CoverageError` says so) or with a stdlib ``sys.settrace``
line tracer (``backend="settrace"``). Raw line numbers are mapped to statements here, with coverage.py's
parser in this (the orchestrating) interpreter.

A run that timed out wrote no data: its side counts as "nothing ran" and the result is marked incomplete
(``complete=False``) - a lower bound, never a guess. A run that ended without data for any other reason is a
harness problem and raises :class:`CoverageError` (fail closed).
"""

from __future__ import annotations

import difflib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from coharden.errors import CoHardenError
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_runner import PLUGIN_PATH
from coharden.execution.readback import read_text
from coharden.patches import is_test_path, touched_files
from coharden.schema.testpatch import TestPatch

Backend = Literal["coverage", "settrace"]
BACKENDS: tuple[str, ...] = ("coverage", "settrace")
PLUGIN_MODULE = "coharden_linecov"
CACHE_KIND = "overfit-linecov"
_CACHE_VERSION = 1


class CoverageError(CoHardenError):
    """Coverage could not be measured (no coverage.py in the test interpreter, a run without data)."""


# --- executable changed lines -------------------------------------------------------------------------------

def _is_code_line(text: str) -> bool:
    stripped = text.strip()
    return bool(stripped) and not stripped.startswith("#")


def statement_of(source: str) -> Callable[[int], int | None]:
    """A function mapping a 1-based line of ``source`` to the first line of the executable statement holding
    it, or None when the line is not part of an executable statement (blank, comment, docstring, ...).

    Uses coverage.py's parser. A file that does not parse (a broken edit) falls back to "every non-blank,
    non-comment line is its own statement", so a syntax error cannot hide changed lines.
    """
    from coverage.exceptions import NotPython
    from coverage.parser import PythonParser

    lines = source.splitlines()
    parser = PythonParser(text=source)
    try:
        parser.parse_source()
    except (NotPython, SyntaxError, ValueError):
        return lambda n: n if 1 <= n <= len(lines) and _is_code_line(lines[n - 1]) else None
    statements = parser.statements

    def first(n: int) -> int | None:
        if not 1 <= n <= len(lines) or not _is_code_line(lines[n - 1]):
            return None
        head = parser.first_line(n)
        return head if head in statements else None

    return first


def _diff_lines(old: str, new: str) -> tuple[list[int], list[int]]:
    """(1-based old lines deleted or rewritten, 1-based new lines added or rewritten)."""
    a, b = old.splitlines(), new.splitlines()
    matcher = difflib.SequenceMatcher(a=a, b=b, autojunk=False)
    deleted: list[int] = []
    added: list[int] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag in ("replace", "delete"):
            deleted += range(i1 + 1, i2 + 1)
        if tag in ("replace", "insert"):
            added += range(j1 + 1, j2 + 1)
    return deleted, added


class FileLines(BaseModel):
    """The executable changed lines of one file (see the module docstring)."""

    path: str
    deleted: list[int] = Field(default_factory=list)
    """Executable lines of the OLD file that the fix deletes or rewrites."""
    added: list[int] = Field(default_factory=list)
    """Executable lines of the NEW file that the fix adds or rewrites."""


def changed_lines(path: str, old: str, new: str) -> FileLines:
    """The executable changed lines of one file, from its old and new content."""
    deleted, added = _diff_lines(old, new)
    old_stmt, new_stmt = statement_of(old), statement_of(new)
    return FileLines(path=path, deleted=[n for n in deleted if old_stmt(n) is not None],
                     added=[n for n in added if new_stmt(n) is not None])


def fix_files(executor: InstanceExecutor, fix: str) -> dict[str, tuple[str, str]]:
    """Old and new content of every Python source file (not a test file) the fix touches."""
    if not fix.strip():
        return {}
    post = executor.post_images(fix)
    patterns = executor.settings.tests.test_patterns
    return {path: (executor.base_file(path) or "", post.get(path) or "") for path in touched_files(fix)
            if path.endswith(".py") and not is_test_path(path, patterns)}


# --- measuring -----------------------------------------------------------------------------------------------

class SideRun(BaseModel):
    """Which lines ran in one run of a test on one code state (paths relative to the workspace)."""

    lines: dict[str, list[int]] = Field(default_factory=dict)
    timed_out: bool = False
    backend: str = ""
    version: str | None = None


def run_lines(executor: InstanceExecutor, source_patch: str, test: TestPatch, paths: list[str], *,
              backend: Backend = "coverage") -> SideRun:
    """Run ``test`` on base + ``source_patch`` with the line-coverage plugin; the lines of ``paths`` that ran.

    Cached in the executor's store, when it has one (kind ``overfit-linecov``) under the verdict key of the
    same run plus the backend and the measured paths; timed-out runs are not cached.
    """
    if backend not in BACKENDS:
        raise CoverageError(f"unknown coverage backend {backend!r} (choose {', '.join(BACKENDS)})")
    if not paths:
        return SideRun(backend=backend)
    key = hashlib.sha256(json.dumps([_CACHE_VERSION, executor.key(source_patch, test), backend,
                                     sorted(paths)]).encode()).hexdigest()
    store = executor.store
    if store is not None:
        cached = store.get_record(CACHE_KIND, key)
        if cached is not None:
            return SideRun.model_validate(cached)
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-linecov-", dir=executor.shared_dir()))
    try:
        shutil.copy(Path(__file__).with_name("linecov_plugin.py"), plugin_dir / f"{PLUGIN_MODULE}.py")
        root = executor.workspace_root().resolve()
        out = root / ".coharden-linecov.json"  # the worktree: writable in the test sandbox
        env = {
            PLUGIN_PATH: str(plugin_dir),
            "COHARDEN_LINECOV_FILES": json.dumps([str(root / p) for p in paths]),
            "COHARDEN_LINECOV_OUT": str(out),
            "COHARDEN_LINECOV_BACKEND": backend,
        }
        run = executor.run_raw(source_patch, test, extra_args=["-p", PLUGIN_MODULE], extra_env=env,
                               readable=[plugin_dir])
        if not os.path.lexists(out):
            if run.timed_out:
                return SideRun(timed_out=True, backend=backend)
            tail = "\n".join(run.output.strip().splitlines()[-15:])
            raise CoverageError(f"the coverage run wrote no data (exit code {run.returncode}); output tail:\n{tail}")
        try:  # the test may have swapped it for a link to a host file or a fifo
            data = json.loads(read_text(out, anchor=root))
        except (OSError, ValueError) as exc:
            raise CoverageError(f"the coverage data could not be read safely: {getattr(exc, 'why', exc)}") from exc
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)
    if "error" in data:
        raise CoverageError(data["error"])
    wanted = {str((root / p).resolve()): p for p in paths}
    lines = {wanted[f]: sorted(ls) for f, ls in data.get("lines", {}).items() if f in wanted and ls}
    side = SideRun(lines=lines, backend=backend, version=data.get("version"))
    if store is not None:
        store.put_record(CACHE_KIND, key, side.model_dump(mode="json"))
    return side


class FileCoverage(BaseModel):
    path: str
    deleted: list[int] = Field(default_factory=list)
    deleted_covered: list[int] = Field(default_factory=list)
    added: list[int] = Field(default_factory=list)
    added_covered: list[int] = Field(default_factory=list)


class ChangedLineCoverage(BaseModel):
    """The changed-line coverage of one test over one fix (see the module docstring)."""

    covered: int = 0
    total: int = 0
    files: list[FileCoverage] = Field(default_factory=list)
    backend: str = "coverage"
    complete: bool = True
    """False when a run timed out (its lines count as not covered: a lower bound)."""
    note: str = ""

    @property
    def value(self) -> float | None:
        return self.covered / self.total if self.total else None

    def missed(self) -> dict[str, dict[str, list[int]]]:
        """Per file, the executable changed lines the test did not run (old: deleted, new: added)."""
        return {f.path: {"old": sorted(set(f.deleted) - set(f.deleted_covered)),
                         "new": sorted(set(f.added) - set(f.added_covered))} for f in self.files}


def _ran(lines: list[int], source: str, ran: list[int]) -> list[int]:
    stmt = statement_of(source)
    executed = {s for s in (stmt(n) for n in ran) if s is not None}
    return [n for n in lines if stmt(n) in executed]


def changed_line_coverage(executor: InstanceExecutor, fix: str, test: TestPatch, *,
                          backend: Backend = "coverage") -> ChangedLineCoverage:
    """Changed-line coverage of ``test`` (ids already resolved) over ``fix`` (a source patch); its runs are
    cached in the executor's store."""
    files = fix_files(executor, fix)
    changes = [changed_lines(path, old, new) for path, (old, new) in sorted(files.items())]
    old_paths = [c.path for c in changes if c.deleted]
    new_paths = [c.path for c in changes if c.added]
    old_run = run_lines(executor, "", test, old_paths, backend=backend)
    new_run = run_lines(executor, fix, test, new_paths, backend=backend)
    result = ChangedLineCoverage(backend=backend, complete=not (old_run.timed_out or new_run.timed_out))
    if not result.complete:
        result.note = "a run timed out: its lines count as not covered"
    for change in changes:
        old, new = files[change.path]
        fc = FileCoverage(path=change.path, deleted=change.deleted, added=change.added,
                          deleted_covered=_ran(change.deleted, old, old_run.lines.get(change.path, [])),
                          added_covered=_ran(change.added, new, new_run.lines.get(change.path, [])))
        result.files.append(fc)
        result.covered += len(fc.deleted_covered) + len(fc.added_covered)
        result.total += len(fc.deleted) + len(fc.added)
    if not result.total:
        result.note = "the fix changes no executable Python line"
    return result
