"""Guarded, add-only application of LLM-written tests to a suite.

A reply is split into top-level statements. Test functions (``test*``) and test classes (``Test*``) are the
*additions*; imports, helpers, fixtures and constant assignments are *support* appended with them. The
existing suite is never rewritten: accepted code is appended after it.

Rejections (counted per addition, by reason):

* ``no_code`` / ``syntax_error`` / ``no_tests``: the reply as a whole (one rejection each);
* ``edits_existing_test``: a test or test class whose name is already in the suite with different code;
  ``rebinds_existing_name``: the same for any other name (helper, fixture, import, constant) - rebinding it
  would change what existing tests do. A name repeated *unchanged* (a model that echoes the whole file) is
  ignored, not rejected;
* ``affects_existing_tests``: code that runs for every test (an ``autouse`` fixture, xunit ``setup_*`` /
  ``teardown_*`` hooks, ``pytestmark``) or that deletes a name;
* ``module_level_code``: other statements executed at import (calls, ``if``, attribute assignment such as
  monkeypatching the module under test);
* ``duplicate_name``: a name defined twice in the reply (pytest would only see the last one);
* ``collection_error``: the additions do not import or collect; ``fails_on_original``: the test fails on the
  original module; ``timeout_on_original``; ``not_collected``: pytest did not run it;
* ``suite_fails_on_original``: after appending the accepted tests the whole suite no longer passes on the
  original module (the round is then rejected as a whole: nothing is applied).
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from coharden import pysource
from coharden.errors import CoHardenError
from coharden.suite.runner import KillOracle, MutantStatus

XUNIT_HOOKS = frozenset({"setup_module", "teardown_module", "setup_function", "teardown_function", "setup",
                         "teardown", "setUpModule", "tearDownModule"})
_FENCE = re.compile(r"^(`{3,}|~{3,})[ \t]*([\w+-]*)[^\n]*\n(.*?)^\1[ \t]*$", re.DOTALL | re.MULTILINE)


def extract_code(reply: str) -> str:
    """The Python code of a reply: all ```python (or unlabelled) fenced blocks joined; the whole reply when it
    has no fence."""
    blocks = [m.group(3) for m in _FENCE.finditer(reply) if m.group(2).lower() in ("", "python", "py", "python3")]
    if blocks:
        return "\n\n".join(b.rstrip() + "\n" for b in blocks)
    return reply if "```" not in reply else ""


@dataclass
class Rejection:
    name: str
    reason: str
    detail: str = ""


@dataclass
class GuardResult:
    """What became of one reply."""

    suite: str
    """The suite after the round (unchanged when nothing was accepted)."""
    accepted: list[str] = field(default_factory=list)
    """Test ids as pytest names them in the suite file (``test_x`` or ``TestC``)."""
    rejections: list[Rejection] = field(default_factory=list)
    ignored_unchanged: int = 0
    round_rejected: str | None = None
    """Set when the reply as a whole was rejected (no code, syntax error, no tests, suite broken)."""

    @property
    def rejected(self) -> dict[str, int]:
        return dict(sorted(Counter(r.reason for r in self.rejections).items()))

    def to_json(self) -> dict[str, Any]:
        return {"accepted": self.accepted, "rejected": self.rejected, "ignored_unchanged": self.ignored_unchanged,
                "round_rejected": self.round_rejected,
                "rejections": [{"name": r.name, "reason": r.reason, "detail": r.detail[:300]} for r in self.rejections]}


def _dump(node: ast.AST) -> str:
    return ast.dump(node, include_attributes=False)


def _bindings(stmt: ast.stmt) -> list[str]:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return [stmt.name]
    if isinstance(stmt, ast.Import | ast.ImportFrom):
        return [(a.asname or a.name).split(".")[0] for a in stmt.names]
    if isinstance(stmt, ast.Assign):
        return [t.id for t in stmt.targets if isinstance(t, ast.Name)]
    if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
        return [stmt.target.id]
    return []


def _import_targets(stmt: ast.Import | ast.ImportFrom) -> dict[str, str]:
    """name bound -> what it is bound to (``module:name``)."""
    if isinstance(stmt, ast.Import):
        return {(a.asname or a.name).split(".")[0]: (a.name if a.asname else a.name.split(".")[0])
                for a in stmt.names}
    module = "." * stmt.level + (stmt.module or "")
    return {a.asname or a.name: f"{module}:{a.name}" for a in stmt.names}


@dataclass
class _Existing:
    stmts: dict[str, str] = field(default_factory=dict)  # name -> ast dump of the binding statement
    imports: dict[str, str] = field(default_factory=dict)  # name -> import target


def _existing(suite: str) -> _Existing:
    found = _Existing()
    for stmt in pysource.parse(suite).body:
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            found.imports.update(_import_targets(stmt))
        for name in _bindings(stmt):
            found.stmts[name] = _dump(stmt)
    return found


def _is_test(stmt: ast.stmt) -> bool:
    if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
        return stmt.name.startswith("test")
    return isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test")


def _autouse(stmt: ast.stmt) -> bool:
    for node in ast.walk(stmt):
        if isinstance(node, ast.keyword) and node.arg == "autouse":
            return True
    return False


def _segment(code_lines: list[str], stmt: ast.stmt) -> str:
    decorators = getattr(stmt, "decorator_list", [])
    start = min([stmt.lineno, *(d.lineno for d in decorators)])
    end = stmt.end_lineno or stmt.lineno
    return "".join(code_lines[start - 1:end]).rstrip() + "\n"


def _classify(stmts: list[ast.stmt], existing: _Existing,
              code: str) -> tuple[list[tuple[str, str]], list[str], list[Rejection], int]:
    """-> (candidate tests (name, code), support code, rejections, ignored unchanged)."""
    lines = code.splitlines(keepends=True)
    tests: list[tuple[str, str]] = []
    support: list[str] = []
    rejections: list[Rejection] = []
    ignored = 0
    counts = Counter(n for s in stmts for n in _bindings(s) if _is_test(s) or isinstance(
        s, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef))
    seen_dupes: set[str] = set()
    for stmt in stmts:
        names = _bindings(stmt)
        label = names[0] if names else type(stmt).__name__
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            continue  # a docstring / bare string
        if isinstance(stmt, ast.Import | ast.ImportFrom):
            targets = _import_targets(stmt)
            clash = [n for n, t in targets.items() if n in existing.stmts and existing.imports.get(n) != t]
            if clash:
                rejections.append(Rejection(", ".join(clash), "rebinds_existing_name", _segment(lines, stmt)))
            elif all(n in existing.imports for n in targets):
                ignored += 1
            else:
                support.append(_segment(lines, stmt))
            continue
        if isinstance(stmt, ast.Delete):
            rejections.append(Rejection(label, "affects_existing_tests", "deletes a name"))
            continue
        if isinstance(stmt, ast.Assign | ast.AnnAssign):
            count = len(stmt.targets) if isinstance(stmt, ast.Assign) else 1
            if len(names) != count:  # attribute / subscript / unpacking targets change other objects
                rejections.append(Rejection(label, "module_level_code", _segment(lines, stmt)[:200]))
                continue
            if "pytestmark" in names:
                rejections.append(Rejection("pytestmark", "affects_existing_tests", _segment(lines, stmt)))
                continue
        elif not isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            rejections.append(Rejection(label, "module_level_code", _segment(lines, stmt)[:200]))
            continue
        name = names[0]
        clash = [n for n in names if n in existing.stmts]
        if clash:
            if all(existing.stmts[n] == _dump(stmt) for n in clash) and len(clash) == len(names):
                ignored += 1
            else:
                reason = "edits_existing_test" if _is_test(stmt) else "rebinds_existing_name"
                rejections.append(Rejection(", ".join(clash), reason,
                                            "already defined in the suite with different code"))
            continue
        if counts[name] > 1:
            if name not in seen_dupes:
                seen_dupes.add(name)
                rejections.append(Rejection(name, "duplicate_name", f"defined {counts[name]} times in the reply"))
            continue
        if name in XUNIT_HOOKS or _autouse(stmt):
            rejections.append(Rejection(name, "affects_existing_tests", "autouse fixture or setup/teardown hook"))
            continue
        if _is_test(stmt):
            tests.append((name, _segment(lines, stmt)))
        else:
            support.append(_segment(lines, stmt))
    return tests, support, rejections, ignored


def _join(suite: str, header: str, parts: list[str]) -> str:
    base = suite.rstrip()
    block = "\n\n".join(p.rstrip() for p in parts)
    return (base + "\n\n\n" if base else "") + f"# --- {header} ---\n" + block + "\n"


def apply_reply(reply: str, suite: str, oracle: KillOracle, *, header: str) -> GuardResult:
    """Add the tests of ``reply`` to ``suite`` under the guard (see module docs). Runs pytest on the original
    module: once for the candidates, once for the whole resulting suite."""
    code = extract_code(reply)
    if not code.strip():
        return GuardResult(suite, rejections=[Rejection("<reply>", "no_code")], round_rejected="no_code")
    try:
        stmts = pysource.parse(code).body
    except SyntaxError as exc:
        return GuardResult(suite, rejections=[Rejection("<reply>", "syntax_error", f"line {exc.lineno}: {exc.msg}")],
                           round_rejected="syntax_error")
    try:
        existing = _existing(suite)
    except SyntaxError as exc:
        raise CoHardenError(f"the existing suite does not parse (line {exc.lineno}: {exc.msg})") from exc
    tests, support, rejections, ignored = _classify(stmts, existing, code)
    if not tests:
        if not rejections:
            rejections.append(Rejection("<reply>", "no_tests", "the reply adds no new test"))
        return GuardResult(suite, rejections=rejections, ignored_unchanged=ignored, round_rejected="no_tests")

    candidate = _join(suite, header, [*support, *(c for _, c in tests)])
    names = [n for n, _ in tests]
    result = oracle.run(oracle.original, candidate, names)
    if result.status is MutantStatus.TIMEOUT or result.status is MutantStatus.ERROR or "<collection>" in result.failed:
        reason = {MutantStatus.TIMEOUT: "timeout_on_original"}.get(result.status, "collection_error")
        detail = result.reason or "the additions do not import or collect"
        rejections += [Rejection(n, reason, detail) for n in names]
        return GuardResult(suite, rejections=rejections, ignored_unchanged=ignored, round_rejected=reason)
    accepted: list[tuple[str, str]] = []
    for name, segment in tests:
        ran = [t for t in [*result.failed, *result.passed] if t == name or t.startswith(name + "::")
               or t.startswith(name + "[")]
        if not ran:
            rejections.append(Rejection(name, "not_collected", "pytest did not run it"))
        elif any(t in result.failed for t in ran):
            rejections.append(Rejection(name, "fails_on_original", "fails on the original module"))
        else:
            accepted.append((name, segment))
    if not accepted:
        return GuardResult(suite, rejections=rejections, ignored_unchanged=ignored, round_rejected="no_tests")
    new_suite = _join(suite, header, [*support, *(c for _, c in accepted)])
    check = oracle.run(oracle.original, new_suite)
    if check.status is not MutantStatus.SURVIVED:
        detail = check.reason or f"failing: {', '.join(check.failed[:5])}"
        rejections += [Rejection(n, "suite_fails_on_original", detail) for n, _ in accepted]
        return GuardResult(suite, rejections=rejections, ignored_unchanged=ignored,
                           round_rejected="suite_fails_on_original")
    return GuardResult(new_suite, [n for n, _ in accepted], rejections, ignored)
