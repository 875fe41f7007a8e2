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

Hook for the fork server (``forkserver_main``): with ``--warm=ROOT:mod1,mod2`` the server calls
``warm_import`` after its warm-up; a child calls ``prepare_child(snapshot, request["cwd"])`` before
``pytest.main``.
"""

from __future__ import annotations

import hashlib
import importlib
import os
import sys
from dataclasses import dataclass, field


@dataclass
class Snapshot:
    root: str
    files: dict[str, str] = field(default_factory=dict)  # module file -> sha256 of its content
    listings: dict[str, list[str]] = field(default_factory=dict)  # directory -> sorted entries
    errors: list[str] = field(default_factory=list)  # modules that did not import (the child imports them)


def _digest(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:  # noqa: PTH123 - stdlib-only module
            return hashlib.sha256(handle.read()).hexdigest()
    except OSError:
        return None


def _listing(directory: str) -> list[str]:
    """The entries that can change what an import finds (a bytecode cache written by a run cannot)."""
    try:
        return sorted(e for e in os.listdir(directory) if e != "__pycache__")  # noqa: PTH208
    except OSError:
        return []


def _under(path: str | None, root: str) -> bool:
    return bool(path) and os.path.abspath(path).startswith(root + os.sep)  # type: ignore[arg-type]  # noqa: PTH100


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
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except BaseException as exc:  # noqa: BLE001 - a broken import is the child's to report
                snap.errors.append(f"{name}: {exc!r}"[:300])
    finally:
        sys.path.remove(root)
    if snap.errors:  # a half-imported project is not a state a cold process would start from
        purge(root)
        return Snapshot(root, errors=snap.errors)
    for module in project_modules(root).values():
        file = getattr(module, "__file__", None)
        if file and _under(file, root):
            digest = _digest(file)
            if digest is not None:
                snap.files[file] = digest
                directory = os.path.dirname(file)  # noqa: PTH120
                snap.listings.setdefault(directory, _listing(directory))
    return snap


def is_fresh(snapshot: Snapshot, cwd: str) -> bool:
    """True when every module file of the snapshot is unchanged, no directory they came from gained or lost
    an entry, and the child runs in the snapshot's root."""
    if not snapshot.files or os.path.abspath(cwd) != snapshot.root:  # noqa: PTH100
        return False
    if any(_listing(d) != entries for d, entries in snapshot.listings.items()):
        return False
    return all(_digest(path) == digest for path, digest in snapshot.files.items())


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
