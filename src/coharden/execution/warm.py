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

Hook for the fork server (``forkserver_main``): with ``--warm=ROOT:mod1,mod2`` the server calls
``warm_import`` after its warm-up; a child calls ``prepare_child(snapshot, request["cwd"])`` before
``pytest.main``.
"""

from __future__ import annotations

import ast
import gc
import hashlib
import importlib
import os
import sys
import types
from dataclasses import dataclass, field


@dataclass
class Snapshot:
    root: str
    files: dict[str, str] = field(default_factory=dict)  # module file -> sha256 of its content
    listings: dict[str, list[str]] = field(default_factory=dict)  # directory -> sorted entries
    errors: list[str] = field(default_factory=list)  # modules that did not import (the child imports them)
    sources: dict[str, bytes] = field(default_factory=dict)  # module file -> its content when imported
    called: set | None = None  # code objects of the project's functions the import ran (None: not profiled)
    versions: dict = field(default_factory=dict)  # module file -> its analysed imported version (or why not)


def _digest(path: str) -> str | None:
    content = _read(path)
    return None if content is None else hashlib.sha256(content).hexdigest()


def _listing(directory: str) -> list[str]:
    """The entries that can change what an import finds (a bytecode cache written by a run cannot)."""
    try:
        return sorted(e for e in os.listdir(directory) if e != "__pycache__")  # noqa: PTH208
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


# --- swapping function bodies (see the module docstring) -------------------------------------------------------
class NotSwappable(Exception):
    pass


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


@dataclass
class _Version:
    """One version of a module file, as far as swapping needs it."""

    tree: ast.Module
    code: types.CodeType  # the module's code object
    defs: list  # (name, code object, source text) of every function of the module and its classes, in order


def analyse_snapshot(snapshot: Snapshot, paths: list[str]) -> None:
    """Analyse the imported version of ``paths`` (kept on the snapshot): done in the server, before it forks,
    so that every child of it need only analyse the new version."""
    for path in paths:
        if path not in snapshot.versions:
            try:
                snapshot.versions[path] = _version(path, snapshot.sources[path])
            except (NotSwappable, KeyError, SyntaxError, ValueError, RecursionError, MemoryError) as exc:
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
            if not isinstance(old, _Version):
                return no(f"{os.path.basename(path)}: {old}")  # noqa: PTH119
            plans.append(_plan(path, old, _version(path, content), snapshot.called))
        _apply(plans)
    except (NotSwappable, SyntaxError, ValueError, TypeError, RecursionError, MemoryError) as exc:
        return no(f"{type(exc).__name__}: {exc}")
    return True


def _scope_items(body: list) -> list:
    """The function and class definitions of a module or class body in source order, through compound
    statements (``if``, ``try``, ...) but not into functions or classes."""
    found = []
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.append(node)
            continue
        for name in ("body", "orelse", "finalbody"):
            inner = getattr(node, name, None)
            if isinstance(inner, list):
                found += _scope_items(inner)
        for holder in (getattr(node, "handlers", None) or []) + (getattr(node, "cases", None) or []):
            found += _scope_items(holder.body)
    return found


def _defs(body: list, code: types.CodeType) -> list:
    """(definition node, its code object) for every function of a module or class body, classes recursed:
    the code constants of a scope follow its definitions in source order (lambdas and comprehensions aside)."""
    items = _scope_items(body)
    codes = [c for c in code.co_consts if isinstance(c, types.CodeType) and not c.co_name.startswith("<")]
    if [n.name for n in items] != [c.co_name for c in codes]:
        raise NotSwappable("definitions and code objects do not line up")
    pairs: list[tuple[ast.AST, types.CodeType]] = []
    for node, co in zip(items, codes):  # noqa: B905 - Python 3.7 runs this file; lengths checked
        pairs += _defs(node.body, co) if isinstance(node, ast.ClassDef) else [(node, co)]
    return pairs


def _version(path: str, source: bytes) -> _Version:
    """Parse and compile ``source`` once; each function's text (decorators to last line) tells whether it
    changed."""
    tree = ast.parse(source, path)
    code = compile(tree, path, "exec", dont_inherit=True)
    lines = source.splitlines(keepends=True)
    defs = []
    for node, co in _defs(tree.body, code):
        end = getattr(node, "end_lineno", None)
        if end is None:
            raise NotSwappable("this Python's ast has no end line numbers")
        start = min([node.lineno] + [d.lineno for d in node.decorator_list])
        defs.append((node.name, co, b"".join(lines[start - 1:end])))
    return _Version(tree, code, defs)


def _same_outside_bodies(a: object, b: object) -> bool:
    """The two trees are equal except inside function bodies (docstrings compared: they become ``__doc__``);
    line numbers aside. Leaves compare by type and repr (``1``, ``1.0``, ``True`` and ``-0.0`` all differ)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, list) and isinstance(b, list):  # b is one when a is (same type)
        return len(a) == len(b) and all(_same_outside_bodies(x, y) for x, y in zip(a, b))  # noqa: B905
    if not isinstance(a, ast.AST):
        return repr(a) == repr(b)
    function = isinstance(a, (ast.FunctionDef, ast.AsyncFunctionDef))
    for name in a._fields:
        if function and name == "body":
            x, y = ast.get_docstring(a, clean=False), ast.get_docstring(b, clean=False)  # type: ignore[arg-type]
        else:
            x, y = getattr(a, name, None), getattr(b, name, None)
        if not _same_outside_bodies(x, y):
            return False
    return True


def _nested(code: types.CodeType) -> list:
    found = []
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found += [const, *_nested(const)]
    return found


_INTROSPECTION = {"globals", "locals", "vars", "dir"}


def _identifiers(tree: ast.AST) -> set:
    found: set = set()
    for node in ast.walk(tree):
        for attribute in ("id", "name", "attr", "arg", "asname"):
            value = getattr(node, attribute, None)
            if isinstance(value, str):
                found.add(value)
    return found


def _module_level_calls(body: list) -> set:
    """Names called by a module's own code (outside function bodies, class bodies included)."""
    found: set = set()
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for part in [*node.decorator_list, node.args, *([node.returns] if node.returns else [])]:
                found |= {n.func.id for n in ast.walk(part) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            continue
        if isinstance(node, ast.ClassDef):
            found |= _module_level_calls(node.body)
            for part in [*node.decorator_list, *node.bases, *node.keywords]:
                found |= {n.func.id for n in ast.walk(part) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
            continue
        found |= {n.func.id for n in ast.walk(node) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return found


def _added_functions(old: ast.Module, new: ast.Module) -> list:
    """The plain functions ``new`` defines at module level that ``old`` has no trace of: a def statement whose
    evaluation is its code and constants alone (no decorator, no annotation, constant defaults), named nothing
    the old module names anywhere. Adding such a function to a module object is what a fresh import does."""
    known = _identifiers(old)
    added = []
    for node in new.body:
        if not isinstance(node, ast.FunctionDef) or node.name in known or node.decorator_list or node.returns:
            continue
        args = node.args
        every = [*getattr(args, "posonlyargs", []), *args.args, *args.kwonlyargs,
                 *([args.vararg] if args.vararg else []), *([args.kwarg] if args.kwarg else [])]
        if any(a.annotation is not None for a in every):
            continue
        if not all(isinstance(d, ast.Constant) for d in [*args.defaults, *(k for k in args.kw_defaults if k)]):
            continue
        added.append(node)
    return added


def _plan(path: str, old: _Version, new: _Version, called: set) -> tuple:
    """What to swap in ``path``: (path, old code -> new code, codes that may stay, changed codes, functions to
    add), or NotSwappable. A function the new version adds (``_added_functions``; an input-specific shortcut's
    decoder) is defined in the module after the swap, where the old module's own code never looks at its
    namespace as a whole (``globals()``, ``dir()``: a fresh import would see one more name there)."""
    added = _added_functions(old.tree, new.tree)
    new_pairs = _defs(new.tree.body, new.code)
    if added:
        if _module_level_calls(old.tree.body) & _INTROSPECTION:
            raise NotSwappable("the module adds a function and looks at its own namespace")
        ids = {id(n) for n in added}
        kept = ast.Module(body=[n for n in new.tree.body if id(n) not in ids], type_ignores=[])
        new_defs = [d for d, (node, _) in zip(new.defs, new_pairs) if id(node) not in ids]  # noqa: B905
        extra = [(node.name, co, tuple(ast.literal_eval(d) for d in node.args.defaults),
                  {a.arg: ast.literal_eval(d) for a, d in zip(node.args.kwonlyargs, node.args.kw_defaults)  # noqa: B905
                   if d is not None}, ast.get_docstring(node, clean=False))
                 for node, co in new_pairs if id(node) in ids]
    else:
        kept, new_defs, extra = new.tree, new.defs, []
    if not _same_outside_bodies(old.tree, kept):
        raise NotSwappable("the module changes outside function bodies")
    if [d[0] for d in old.defs] != [d[0] for d in new_defs]:
        raise NotSwappable("the functions differ")
    mapping, stay, changed = {}, set(), set()
    for (name, old_co, old_text), (_, new_co, new_text) in zip(old.defs, new_defs):  # noqa: B905
        inner = _nested(old_co)
        if old_text != new_text:
            if old_co in called or any(c in called for c in inner):
                raise NotSwappable(f"{name} changed and ran during the import")
            changed.add(old_co)
        else:
            stay.update(inner)  # closures of an unchanged function keep behaving as before
        mapping[old_co] = new_co
    in_defs = {c for co in mapping for c in _nested(co)}
    stay.update(c for c in _nested(old.code) if c not in mapping and c not in in_defs)  # module-level lambdas
    return path, mapping, stay, changed, extra


def _apply(plans: list) -> None:
    """Swap the planned code into every live function compiled from the planned files. Every changed function
    must still be alive as itself: a decorator that replaced it by something made from its source or code (a
    code generator) would keep the old body where no function object shows it."""
    by_file = {path: (mapping, stay) for path, mapping, stay, _, _ in plans}
    unseen = set().union(*(changed for _, _, _, changed, _ in plans))
    additions = []
    for path, _, _, _, extra in plans:
        if not extra:
            continue
        homes = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None) == path]
        if len(homes) != 1:
            raise NotSwappable("a function is added to a module loaded more than once, or not at all")
        for name, *_ in extra:
            if name in vars(homes[0]):
                raise NotSwappable(f"the added function {name} is a name the module has")
        additions += [(homes[0], *item) for item in extra]
    swaps = []
    # gc.get_objects() leaves out the permanent generation, where a fork server moves its heap (gc.freeze):
    # every function must be looked at
    frozen = bool(getattr(gc, "get_freeze_count", lambda: 0)())
    if frozen:
        gc.unfreeze()
    try:
        gc.collect()  # a replaced function left in a garbage cycle must not count as alive
        found = gc.get_objects()
    finally:
        if frozen:
            gc.freeze()
    for obj in found:
        if type(obj) is not types.FunctionType:
            continue
        plan = by_file.get(obj.__code__.co_filename)
        if plan is None:
            continue
        mapping, stay = plan
        new = mapping.get(obj.__code__)
        if new is not None:
            swaps.append((obj, new))
            unseen.discard(obj.__code__)
        elif obj.__code__ not in stay:
            raise NotSwappable(f"a live function {obj.__qualname__} has code no compile of its source gives")
    if unseen:
        raise NotSwappable("a changed function has no live function object of its own (replaced by a decorator?)")
    for function, code in swaps:
        function.__code__ = code  # ValueError when the free variables differ: the caller purges
    for module, name, code, defaults, kwdefaults, doc in additions:
        added = types.FunctionType(code, vars(module), name, defaults or None)
        added.__kwdefaults__ = kwdefaults or None
        added.__doc__ = doc
        setattr(module, name, added)
    import linecache

    for path in by_file:
        linecache.checkcache(path)
