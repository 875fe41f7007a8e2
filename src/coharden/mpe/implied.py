"""Runs whose outcome is implied: a test that never enters the code a mutant changes gives, on that mutant, the
outcome it gives on the fixed code, so that run is not made.

The claim holds when all of these do, and only then is a verdict implied (``Verdict.implied == "unreached"``):

* **the mutant changes function bodies only** (:func:`changed_functions`): per file, the mutant's syntax tree
  equals the fixed code's once every function body is left out (docstrings kept: ``__doc__`` is set when the
  ``def`` runs), so module-level statements, class bodies, signatures, defaults and decorators, which run at
  import, are the same; and the functions whose own bodies differ are named. Anything else - a syntax error, a
  change at module or class level, a function added or removed, a file that is not Python - implies nothing;
* **the test never entered any of them on the fixed code**: the reach pass (:func:`reach_pass`) runs the test on
  the fixed code once, in a fresh process (no warm imports: a server's import would hide the functions the
  import ran), with :mod:`coharden.mpe.reach_plugin`, which notes every code object of the repository entered
  from before any conftest or test module is imported until the session ends. A run that started another
  process, replaced the tracer, timed out or wrote no result says nothing: no verdict of that test is implied.
  Only the pytest runner is instrumented this way;
* **the test is stable on the fixed code**: the reach pass is the test's second run on the fixed code; when its
  outcome differs from the first (the F->P check's), the test is *flaky* there: it is reported as such and none
  of its verdicts is implied.

Then the mutant and the fixed code run the same code in that process up to the functions it never enters.
``MPEConfig.implied = False`` (``--no-implied``) runs everything: the check mode, whose matrices must equal.
The reach pass is stored (kind ``mpe-reach``, keyed by the fixed-code verdict's key and the plugin's source), so
the reference's pass is made once per instance and store.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coharden import pysource
from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_runner import PLUGIN_PATH
from coharden.execution.pytest_verdicts import verdict_for
from coharden.execution.readback import read_text
from coharden.execution.runners import runner_of
from coharden.execution.store import content_key, text_key
from coharden.patches import file_path, make_patch, parse
from coharden.schema.mutant import Mutant
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict

REACH_KIND = "mpe-reach"
"""Store record kind of a reach pass."""
REACH_VERSION = 1
PLUGIN = Path(__file__).with_name("reach_plugin.py")
PLUGIN_MODULE = "coharden_reach"
UNREACHED = "unreached"
"""``Verdict.implied`` of a verdict implied because the test never enters the code the mutant changes."""

FunctionRef = tuple[str, int, int, str, str]
"""A function of the fixed code: (path, line of its ``def``, line its code object starts on - the first
decorator's when decorated -, name, qualified name as the input recorder writes it: ``Class.method``,
``outer.inner``)."""


@dataclass
class Reach:
    """What one test entered on the fixed code, and that run's outcome."""

    complete: bool
    why: str = ""
    reached: set[tuple[str, int, str]] = field(default_factory=set)
    """(path, first line, name) of every code object of the repository the test process entered."""
    outcome: str = ""
    """The reach run's outcome (PASS / FAIL / ...): the test's second run on the fixed code."""
    cached: bool = False

    def to_json(self) -> dict:
        return {"complete": self.complete, "why": self.why, "outcome": self.outcome,
                "reached": sorted([list(r) for r in self.reached])}

    @classmethod
    def of(cls, data: dict, *, cached: bool = False) -> Reach:
        return cls(complete=bool(data["complete"]), why=str(data.get("why", "")), outcome=str(data["outcome"]),
                   reached={(str(p), int(line), str(n)) for p, line, n in data.get("reached", [])}, cached=cached)

    def enters(self, function: FunctionRef) -> bool:
        path, line, first, name, _ = function
        return (path, line, name) in self.reached or (path, first, name) in self.reached


def reach_pass(executor: InstanceExecutor, fix: str, test: TestPatch, *, backend: str | None = None) -> Reach:
    """The reach pass of ``test`` on base + ``fix`` (stored in the executor's store when complete); ``backend``:
    ``settrace`` forces the tracer of interpreters before 3.12 (the store is then neither read nor written)."""
    if not runner_of(executor.settings.tests.runner).reach_pass or executor.image is not None:
        return Reach(complete=False, why=f"no reach pass with the {executor.settings.tests.runner} runner"
                     + (" in Docker" if executor.image else ""))
    key = content_key(REACH_KIND, REACH_VERSION, executor.key(fix, test), text_key(PLUGIN.read_text()))
    store = executor.store if backend is None else None
    if store is not None:
        cached = store.get_record(REACH_KIND, key)
        if cached is not None:
            return Reach.of(cached, cached=True)
    # outside the fork server's shared directory: the run is a fresh process, so nothing is imported before
    # the plugin starts noting
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-reach-"))
    try:
        shutil.copy(PLUGIN, plugin_dir / f"{PLUGIN_MODULE}.py")
        root = executor.workspace_root().resolve()
        out = root / ".coharden-reach.json"  # the worktree: writable in the test sandbox
        env = {PLUGIN_PATH: str(plugin_dir), "COHARDEN_REACH_ROOT": str(root), "COHARDEN_REACH_OUT": str(out),
               **({"COHARDEN_REACH_BACKEND": backend} if backend else {})}
        run = executor.run_raw(fix, test, extra_args=["-p", PLUGIN_MODULE], extra_env=env, readable=[plugin_dir])
        verdict = verdict_for(list(test.ids), run)
        outcome = verdict.outcome.value
        if not verdict.admissible:  # no second outcome to compare (not "flaky": the run said nothing)
            return Reach(complete=False, why=f"the reach run ended {verdict.short()[:200]}")
        if not os.path.lexists(out):
            return Reach(complete=False, why="the reach run wrote no result", outcome=outcome)
        try:  # the test may have swapped it for a link to a host file or a fifo
            data = json.loads(read_text(out, anchor=root))
        except (OSError, ValueError) as exc:
            return Reach(complete=False, why=f"the reach result could not be read safely: {getattr(exc, 'why', exc)}",
                         outcome=outcome)
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)
    reach = Reach(complete=bool(data.get("complete")), why=str(data.get("why", "")), outcome=outcome,
                  reached={(str(path), int(line), str(name)) for path, pairs in (data.get("reached") or {}).items()
                           for line, name in pairs})
    if store is not None and reach.complete:
        store.put_record(REACH_KIND, key, reach.to_json())
    return reach


# --- what a mutant changes -------------------------------------------------------------------------------------

_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _defs(tree: ast.AST) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function definition of ``tree`` in pre-order (a function before the ones nested in it), each with
    its qualified name (classes and functions around it, ``<locals>`` left out)."""
    found: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = prefix
            if isinstance(child, (*_DEFS, ast.ClassDef)):
                inner = f"{prefix}{child.name}."
                if isinstance(child, _DEFS):
                    found.append((child, inner[:-1]))
            walk(child, inner)

    walk(tree, "")
    return found


def _outline(source: str) -> tuple[str, list[tuple[int, int, str, str, str]]] | None:
    """(the syntax tree with every function body left out, and per function in pre-order: its ``def`` line, its
    first line, its name, its qualified name and its own body - nested functions' bodies left out), or None when
    it does not parse."""
    try:
        tree = pysource.parse(source)  # one thread at a time (CPython 3.11's AST constructor)
    except (SyntaxError, ValueError):
        return None
    named = _defs(tree)
    defs = [d for d, _ in named]
    places = [(d.lineno, min([d.lineno, *(dec.lineno for dec in d.decorator_list)]), d.name, qualname)
              for d, qualname in named]
    bodies: list[str] = [""] * len(defs)
    for index in range(len(defs) - 1, -1, -1):  # nested functions first: their bodies are gone from the outer
        node = defs[index]
        bodies[index] = ast.dump(ast.Module(body=node.body, type_ignores=[]))
        doc = node.body[:1] if node.body and isinstance(node.body[0], ast.Expr) and \
            isinstance(node.body[0].value, ast.Constant) and isinstance(node.body[0].value.value, str) else []
        node.body = [*doc, ast.Pass()]
    return ast.dump(tree), [(*place, body) for place, body in zip(places, bodies, strict=True)]


def changed_functions(fixed: dict[str, str], mutated: dict[str, str]) -> list[FunctionRef] | None:
    """The functions of the fixed code (``fixed``: path -> content) whose bodies ``mutated`` changes, or None
    when it changes anything else (see the module docstring). Files equal in both are skipped."""
    changed: list[FunctionRef] = []
    for path, after in sorted(mutated.items()):
        before = fixed.get(path)
        if before == after:
            continue
        if before is None or not path.endswith(".py"):
            return None
        old, new = _outline(before), _outline(after)
        if old is None or new is None or old[0] != new[0] or len(old[1]) != len(new[1]):
            return None
        changed += [(path, line, first, name, qualname) for (line, first, name, qualname, body), (*_, other)
                    in zip(old[1], new[1], strict=True) if body != other]
    return changed


def mutant_files(mutant: Mutant, base: Callable[[str], str | None]) -> dict[str, str] | None:
    """Every file ``mutant.patch`` writes, with its content (``base``: a file's content at the base commit), or
    None when the patch cannot be read back exactly (the content is checked by diffing it again: it must give
    the mutant's patch, byte for byte) or deletes a file."""
    try:
        patched = list(parse(mutant.patch))
    except Exception:  # noqa: BLE001 - an unreadable patch implies nothing
        return None
    files: dict[str, str] = {}
    triples: list[tuple[str, str | None, str | None]] = []
    for pf in patched:
        path = file_path(pf)
        if pf.is_removed_file:
            return None
        old = None if pf.is_added_file else base(path)
        if old is None and not pf.is_added_file:
            return None
        new = _apply(old or "", pf)
        if new is None:
            return None
        files[path] = new
        triples.append((path, old, new))
    return files if make_patch(triples) == mutant.patch else None


def _apply(old: str, patched: object) -> str | None:
    """``old`` with the hunks of one file's diff applied (None when a context or removed line does not match)."""
    lines = old.splitlines(keepends=True)
    out: list[str] = []
    at = 0
    for hunk in patched:  # type: ignore[attr-defined]
        start = max(hunk.source_start - 1, 0)
        if start < at or start > len(lines):
            return None
        out += lines[at:start]
        at = start
        for line in hunk:
            if line.line_type == "\\":
                if out and out[-1].endswith("\n"):
                    out[-1] = out[-1][:-1]
                continue
            if line.is_context or line.is_removed:
                if at >= len(lines) or lines[at].rstrip("\n") != line.value.rstrip("\n"):
                    return None
                at += 1
            if line.is_context or line.is_added:
                out.append(line.value if line.value.endswith("\n") else line.value + "\n")
    out += lines[at:]
    return "".join(out)


def implied_verdict(fixed: Verdict) -> Verdict:
    """The verdict a test gives on a mutant whose changed code it never enters: its fixed-code outcome."""
    return Verdict(outcome=fixed.outcome, reason=fixed.reason, tests=dict(fixed.tests), isolation=fixed.isolation,
                   implied=UNREACHED)


class Implied:
    """Decides, per mutant and test, whether the run is implied; one per MPE run (the tests' reach passes are
    made on first need, at most once each)."""

    def __init__(self, fix: str, fixed_files: dict[str, str], base: Callable[[str], str | None],
                 tests: dict[str, tuple[TestPatch, Verdict]]) -> None:
        """``fixed_files``: the fixed content of every file the fix touches; ``base``: other files' content;
        ``tests``: role -> (test, its verdict on the fixed code)."""
        self.fix, self.fixed_files, self.base, self.tests = fix, fixed_files, base, tests
        self.reach: dict[str, Reach] = {}
        self.flaky: dict[str, str] = {}
        """role -> the two fixed-code outcomes that differed."""
        self._changes: dict[str, list[FunctionRef] | None] = {}

    def changes(self, mutant: Mutant) -> list[FunctionRef] | None:
        """The functions ``mutant`` changes (bodies only), or None when it changes anything else."""
        key = mutant.patch
        if key not in self._changes:
            self._changes[key] = self._analyse(mutant)
        return self._changes[key]

    def _analyse(self, mutant: Mutant) -> list[FunctionRef] | None:
        files = mutant_files(mutant, self.base)
        if files is None:
            return None
        # a mutant's patch is a diff from the base commit: a file of the fix it leaves out is at its base content
        fixed = {**{path: self.base(path) or "" for path in files}, **self.fixed_files}
        mutated = {**{path: self.base(path) or "" for path in self.fixed_files}, **files}
        return changed_functions(fixed, mutated)

    def promising(self, mutants: Sequence[Mutant], called: set[tuple[str, str]] | None) -> int:
        """How many of ``mutants`` change function bodies only, none of them one the input recorder saw the test
        call (``called``: (path, qualname) of the recorded functions it called; None: unknown). Only these can
        get an implied verdict; the recorder sees the tests' calls only, so it can rule functions in, never out."""
        count = 0
        for mutant in mutants:
            changed = self.changes(mutant)
            if changed and not any((f[0], f[4]) in (called or set()) for f in changed):
                count += 1
        return count

    def measure(self, executor: InstanceExecutor, role: str) -> Reach:
        """The reach pass of ``role``'s test (made once), checked against its fixed-code verdict."""
        if role not in self.reach:
            test, fixed = self.tests[role]
            reach = reach_pass(executor, self.fix, test)
            if reach.outcome and reach.outcome != fixed.outcome.value:
                self.flaky[role] = f"{fixed.outcome.value}, then {reach.outcome}"
            self.reach[role] = reach
        return self.reach[role]

    def usable(self, role: str) -> bool:
        reach = self.reach.get(role)
        test_fixed = self.tests[role][1]
        return reach is not None and reach.complete and role not in self.flaky and \
            test_fixed.outcome in (Outcome.PASS, Outcome.FAIL) and reach.outcome == test_fixed.outcome.value

    def implied(self, mutant: Mutant, role: str) -> Verdict | None:
        """``role``'s implied verdict on ``mutant``, or None when the run must be made."""
        if not self.usable(role):
            return None
        changed = self.changes(mutant)
        if not changed:
            return None
        reach = self.reach[role]
        if any(reach.enters(function) for function in changed):
            return None
        return implied_verdict(self.tests[role][1])
