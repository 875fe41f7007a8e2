"""Warm project imports for forked test runs, never served stale (stdlib only: the fork server's interpreter
loads this file by path, coharden need not be installed there).

A fork server that has imported the project under test (sympy: about a third of a test run's CPU time)
forks children that need not import it again - but only while the files those modules came from are unchanged.
A fix or a mutant rewrites a module; a child that kept the parent's copy would test the wrong code. So:

* :func:`warm_import` (in the server, before it forks) imports ``modules`` from ``root`` and returns a
  :class:`Snapshot`: the content hash of every module file loaded from under ``root`` and the listing of every
  directory they came from (a new ``mod/__init__.py`` or extension module next to ``mod.py`` would change
  what ``import mod`` finds);
* :func:`prepare_child` (in each child, first thing, with its working directory) checks the snapshot against
  the files now on disk - contents by hash, not by mtime, so a same-size rewrite within one clock tick is
  seen - and, if anything differs or the child runs elsewhere, drops every module loaded from under ``root``
  so that the test run imports the project afresh from the files on disk, exactly as a cold process would.

A partial purge (only the changed module) is never done: other modules hold references to its objects
(``from .numbers import Integer``), so a mixture of old and new objects would be neither the old code nor the
new. What the purge cannot undo is state the project's import left *outside* its own modules (the recursion
limit, warnings filters, codecs, atexit hooks): warm imports are therefore opt-in per project, like
``Settings.preload``.

**Swapping function bodies** (:func:`swap_changed`): most runs that matter (the fix, its mutants) rewrite a
module the import loaded, so a purge would throw the warm import away exactly where it is needed. In a child,
a changed file whose module would come out of a fresh import *exactly* as the warm one is, except for the code
of some functions, gets those functions' code objects replaced (``function.__code__``) instead - every
reference to the function (aliases, decorators' ``__wrapped__``, dispatch tables) then runs the new code. This
holds only when, checked each time:

* the two sources differ only inside function bodies: their syntax trees are equal outside function bodies
  (docstrings compared), so module-level statements, class bodies, signatures, defaults and decorators, which
  an import evaluates, are unchanged;
* no changed function ran during the warm import (``cProfile`` records every Python function the import
  called): nothing the import computed - a constant, a cache entry, a registered object - can depend on a body
  that changed;
* every live function object compiled from that file has a code object that a compile of the snapshot's
  source produces (so a stale bytecode cache or an ``exec`` with that file name cannot hide an old body), and
  none is a closure made by a changed function.

Anything else (a syntax error, a new or removed function, a changed class attribute, a different number of
free variables) makes the child purge and import afresh, as before. Unchanged functions get the new file's
code too, so line numbers in tracebacks and ``inspect`` match the file on disk.

The swapping itself (comparing the versions, the plan, the swap) is ``warm_bodies.py``'s.

Hook for the fork server (``forkserver_main``): with ``--warm=ROOT:mod1,mod2`` the server calls
``warm_import`` after its warm-up; a child calls ``prepare_child(snapshot, request["cwd"])`` before
``pytest.main``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
import types
from dataclasses import dataclass, field
from typing import Any

# the body swapping (warm_bodies.py): the fork server loads it by path before this file (coharden is not installed
# in the test interpreter, and a module imported by name could come from the checkout under test); None where
# nothing loaded it (coharden's own process, which swaps nothing)
bodies: Any = sys.modules.get("_coharden_warm_bodies")


@dataclass
class Snapshot:
    root: str
    files: dict[str, str] = field(default_factory=dict)  # module file -> sha256 of its content
    listings: dict[str, list[str]] = field(default_factory=dict)  # directory -> sorted entries
    errors: list[str] = field(default_factory=list)  # modules that did not import (the child imports them)
    sources: dict[str, bytes] = field(default_factory=dict)  # module file -> its content when imported
    called: set | None = None  # code objects of the project's functions the import ran (None: not profiled)
    versions: dict = field(default_factory=dict)  # module file -> its analysed imported version (or why not)
    functions: dict | None = None  # module file -> its live functions (warm_bodies.function_index), in a zygote


def _digest(path: str) -> str | None:
    content = _read(path)
    return None if content is None else hashlib.sha256(content).hexdigest()


def _listing(directory: str) -> list[str]:
    """The entries that can change what an import finds: all but a bytecode cache and hidden entries, which
    no import names (``importlib`` loads ``extra-handler.py`` by name, so other non-identifiers count).
    pytest-benchmark's ``.benchmarks`` or hypothesis's ``.hypothesis`` in the root, created by the zygote's own
    session and removed by the workspace's reset, made every later run collect again (sympy-14976)."""
    try:
        return sorted(e for e in os.listdir(directory)  # noqa: PTH208
                      if e != "__pycache__" and not e.startswith("."))
    except OSError:
        return []


def _under(path: str | None, root: str) -> bool:
    return path is not None and bool(path) and os.path.abspath(path).startswith(root + os.sep)  # noqa: PTH100


def project_modules(root: str) -> dict[str, object]:
    """The loaded modules whose file (or package directory) lies under ``root``."""
    found: dict[str, object] = {}
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        paths = list(getattr(module, "__path__", None) or [])
        if _under(file, root) or any(_under(p, root) for p in paths):
            found[name] = module
    return found


def warm_import(root: str, modules: list[str]) -> Snapshot:
    """Import ``modules`` from ``root`` (put first on ``sys.path`` while importing) and snapshot their files."""
    root = os.path.abspath(root)  # noqa: PTH100
    snap = Snapshot(root)
    sys.path.insert(0, root)
    profile = _profiler()
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - a broken import is the child's to report
                snap.errors.append(f"{name}: {exc!r}"[:300])
    finally:
        if profile is not None:
            profile.disable()
        sys.path.remove(root)
    if snap.errors:  # a half-imported project is not a state a cold process would start from
        purge(root)
        return Snapshot(root, errors=snap.errors)
    return loaded_snapshot(root, profile)


def loaded_snapshot(root: str, profile: object | None, called: set | None = None) -> Snapshot:
    """A :class:`Snapshot` of every module now loaded from under ``root`` (as imported: content, hash, the
    listing of its directory); ``profile``: the cProfile profiler that ran while they were loaded (None: none
    could, and no body may be swapped), ``called`` more code objects known to have run (an earlier import's).
    The fork server's zygote takes one after pytest's collection (test modules and conftests included)."""
    root = os.path.abspath(root)  # noqa: PTH100
    snap = Snapshot(root)
    for module in project_modules(root).values():
        file = getattr(module, "__file__", None)
        if file and _under(file, root):
            content = _read(file)
            if content is not None:
                snap.files[file] = hashlib.sha256(content).hexdigest()
                snap.sources[file] = content
                directory = os.path.dirname(file)  # noqa: PTH120
                snap.listings.setdefault(directory, _listing(directory))
    if profile is not None:
        snap.called = {e.code for e in profile.getstats()  # type: ignore[attr-defined]
                       if isinstance(e.code, types.CodeType) and e.code.co_filename in snap.files}
        if called:
            snap.called |= {c for c in called if c.co_filename in snap.files}
    return snap


def _profiler():
    """A running cProfile profiler (which functions the import runs), or None where one cannot run (another
    profiler or tracer is active): then no function body can be swapped (see :func:`swap_changed`)."""
    try:
        import cProfile

        profile = cProfile.Profile()
        profile.enable()
    except Exception:  # noqa: BLE001
        return None
    return profile


def _read(path: str) -> bytes | None:
    try:
        with open(path, "rb") as handle:  # noqa: PTH123 - stdlib-only module
            return handle.read()
    except OSError:
        return None


def is_fresh(snapshot: Snapshot, cwd: str) -> bool:
    """True when every module file of the snapshot is unchanged, no directory they came from gained or lost
    an entry, and the child runs in the snapshot's root."""
    return bool(snapshot.files) and changed_files(snapshot, cwd) == {}


def purge(root: str) -> int:
    """Drop every module loaded from under ``root`` (the next import reads the files on disk)."""
    names = list(project_modules(os.path.abspath(root)))  # noqa: PTH100
    for name in names:
        del sys.modules[name]
    importlib.invalidate_caches()
    return len(names)


def prepare_child(snapshot: Snapshot | None, cwd: str) -> bool:
    """In a forked child: keep the warm modules when they are current (True), else purge them (False)."""
    if snapshot is None:
        return False
    if is_fresh(snapshot, cwd):
        return True
    purge(snapshot.root)
    return False


# --- swapping function bodies (see the module docstring; the machinery is warm_bodies.py's) --------------------
def changed_files(snapshot: Snapshot, cwd: str) -> dict[str, str] | None:
    """The snapshot's module files whose content changed, with their new digests; None when the run is not in
    the snapshot's root, or a directory the modules came from gained or lost an entry, or a file is gone."""
    if os.path.abspath(cwd) != snapshot.root:  # noqa: PTH100
        return None
    if any(_listing(d) != entries for d, entries in snapshot.listings.items()):
        return None
    changed = {}
    for path, digest in snapshot.files.items():
        now = _digest(path)
        if now is None:
            return None
        if now != digest:
            changed[path] = now
    return changed


def analyse_snapshot(snapshot: Snapshot, paths: list[str]) -> None:
    """Analyse the imported version of ``paths`` (kept on the snapshot): done in the server, before it forks,
    so that every child of it need only analyse the new version."""
    for path in paths:
        if path not in snapshot.versions:
            try:
                snapshot.versions[path] = bodies.version(path, snapshot.sources[path])
            except (bodies.NotSwappable, KeyError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
                snapshot.versions[path] = repr(exc)


def swap_changed(snapshot: Snapshot, changed: dict[str, str], why: list | None = None) -> bool:
    """In a forked child: bring every changed module file (path -> digest of its new content) to the code on
    disk by swapping function bodies (True), or return False (the caller purges: whatever was swapped goes);
    ``why`` gets the reason then."""
    def no(reason: str) -> bool:
        if why is not None:
            why.append(reason)
        return False

    if snapshot.called is None or not changed:
        return no("no profile of the import" if changed else "nothing changed")
    plans = []
    try:
        analyse_snapshot(snapshot, list(changed))
        for path, digest in changed.items():
            content = _read(path)
            if content is None or hashlib.sha256(content).hexdigest() != digest:
                return no(f"{os.path.basename(path)} changed again")  # noqa: PTH119
            old = snapshot.versions[path]
            if not isinstance(old, bodies.Version):
                return no(f"{os.path.basename(path)}: {old}")  # noqa: PTH119
            plans.append(bodies.plan(path, old, bodies.version(path, content), snapshot.called))
        bodies.apply(plans, snapshot.functions)
    except (bodies.NotSwappable, SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        return no(f"{type(exc).__name__}: {exc}")
    return True
