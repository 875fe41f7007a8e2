"""Swapping function bodies into a forked child's warm modules (``warm.swap_changed``; stdlib only, loaded by
path beside ``warm.py``: the fork server loads it first, ``warm.py`` finds it in ``sys.modules``).

A changed file whose module would come out of a fresh import *exactly* as the warm one is, except for the code
of some functions, gets those functions' code objects replaced (``function.__code__``): :func:`version` parses
and compiles a source once, :func:`plan` decides whether the new version differs only inside function bodies
that did not run during the import (or raises :class:`NotSwappable`), :func:`apply` swaps the code into every
live function compiled from the file. The conditions are in ``warm.py``'s docstring.
"""

from __future__ import annotations

import ast
import gc
import sys
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass


class NotSwappable(Exception):
    pass


@dataclass
class Version:
    """One version of a module file, as far as swapping needs it."""

    tree: ast.Module
    code: types.CodeType  # the module's code object
    defs: list  # (name, code object, source text) of every function of the module and its classes, in order


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


def version(path: str, source: bytes) -> Version:
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
    return Version(tree, code, defs)


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


def plan(path: str, old: Version, new: Version, called: set) -> tuple:
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


def _dead_namespaces(paths: set) -> Callable[[types.FunctionType], bool]:
    """A test for functions of an earlier import of one of ``paths``: defined in a module namespace of that file
    which is not the namespace of the module now loaded from it. A zygote re-imports the project under its own
    profiler after the server's warm copy was purged; objects of that copy that something outside the project
    still holds stay alive, and their functions keep the code they were imported with. No run reaches them
    through the project's modules, the zygote's own first run had them as they are, and a fresh import would
    make none: they are left as they are, never swapped, and do not make a file unswappable."""
    live: dict = {}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file in paths:
            live.setdefault(file, set()).add(id(vars(module)))

    def dead(function: types.FunctionType) -> bool:
        names = function.__globals__
        file = names.get("__file__")
        return file == function.__code__.co_filename and id(names) not in live.get(file, ())

    return dead


def function_index(paths: set) -> dict:
    """file -> weak references to the live function objects compiled from it, for the files in ``paths``,
    after a collection (a function left in a garbage cycle is not alive; one of an earlier import of the file
    is left out: :func:`_dead_namespaces`). Made once in a zygote before it forks its runs: a run then finds the
    functions of its changed files here instead of walking the whole heap (``gc.get_objects()`` touches every
    object, and in a forked run each touched page is copied)."""
    gc.collect()
    index: dict = {}
    dead = _dead_namespaces(paths)
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and obj.__code__.co_filename in paths and not dead(obj):
            # a weak reference: the index must not keep a function alive that a test drops, nor show in its
            # reference count
            index.setdefault(obj.__code__.co_filename, []).append(weakref.ref(obj))
    return index


def apply(plans: list, functions: dict | None = None) -> None:
    """Swap the planned code into every live function compiled from the planned files. Every changed function
    must still be alive as itself: a decorator that replaced it by something made from its source or code (a
    code generator) would keep the old body where no function object shows it. ``functions``: the live functions
    per file (:func:`function_index`, made in this process's parent with nothing run since); else the heap is
    walked."""
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
    if functions is not None:
        found = [f for f in (ref() for path in by_file for ref in functions.get(path, [])) if f is not None]
    else:
        # gc.get_objects() leaves out the permanent generation, where a zygote moves its heap (gc.freeze):
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
    dead = _dead_namespaces(set(by_file))
    for obj in found:
        if type(obj) is not types.FunctionType:
            continue
        plan = by_file.get(obj.__code__.co_filename)
        if plan is None or dead(obj):
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
