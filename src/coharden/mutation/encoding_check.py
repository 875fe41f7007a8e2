"""What coharden applies to every value encoding read back from a recording, before it reaches a mutant.

The records file lies in the worktree, which the test under record can rewrite, and its encodings end up in
mutants' code (decoded there by :mod:`coharden.mutation.recorder_decode`): :func:`check_encoding` admits one
only when it is well formed - every tag with the parts its reader takes, one small check per tag, chosen from
``_CHECKS`` - and names only objects, functions and exceptions of the repository's own packages (built-in and
standard-library exceptions too), in modules the repository has without the test, and no object rebuilt from
its state where decoding would run code (a hash, a constructor). Runs in coharden only.
"""

from __future__ import annotations

import ast
import builtins
import json
import sys
from collections.abc import Callable, Iterable
from typing import Any

from coharden.mutation.recorder_values import (
    MAX_ENCODED,
    PANDAS_INDEXES,
    PLAIN_DTYPE,
    STDLIB,
    TEST_PARTS,
    TEXT_DTYPES,
)

_STRUCTURAL_NODES = (ast.Expression, ast.Call, ast.Name, ast.Constant, ast.Tuple, ast.List, ast.Dict, ast.UnaryOp,
                     ast.USub, ast.UAdd, ast.Load, ast.keyword)


def check_encoding(enc: object, packages: set[str], module_exists: Callable[[str], bool] = lambda m: True
                   ) -> str | None:
    """Why ``enc`` (an encoding read back from a recording) must not reach a mutant, or None when it is well
    formed and every object and exception it names belongs to one of ``packages`` (the repository's top-level
    packages; built-in exceptions too), in a module for which ``module_exists`` (a module the repository has
    without the test: a test could add one that does anything when its class is called)."""
    if not isinstance(enc, str) or len(enc) > MAX_ENCODED:
        return "not_an_encoding"
    try:
        tree = json.loads(enc)
    except ValueError:
        return "not_json"
    why = _check(tree, packages, 0)
    if why is None and not all(module_exists(m) for m in _modules(tree)):
        return "module_not_in_repository"
    return why


def _modules(tree: object) -> set[str]:
    """The modules a (checked) encoding names."""
    if not isinstance(tree, list) or not tree:
        return set()
    if tree[0] == "o":
        return set(tree[2].values())
    if tree[0] == "e":
        return ({tree[2]} if tree[1] not in ("builtins", STDLIB) else set()) | _modules(tree[4])
    if tree[0] == "d":
        return set().union(*(_modules(item) for pair in tree[1] for item in pair))
    if tree[0] in ("t", "l", "s", "f"):
        return set().union(*(_modules(item) for item in tree[1]))
    if tree[0] == "a" and len(tree) == 6:
        return _modules(tree[4]) | _modules(tree[5])
    if tree[0] == "F" and tree[2] != "numpy":
        return {tree[2]}
    if tree[0] == "P":
        return _modules(tree[4])
    if tree[0] == "O":
        return _modules(tree[1]).union(*(_modules(pair[1]) for pair in tree[2]), *map(_modules, tree[3:]))
    if tree[0] == "A":
        return set().union(*(_modules(pair[1]) for pair in tree[2]))
    return set()


def _plain(tree: object, depth: int) -> bool:
    """Whether an array's items encode plain data only (numbers, booleans, text, bytes, lists of them)."""
    if tree is None or type(tree) in (bool, int, float, str):
        return tree is not None
    if depth > 40 or not isinstance(tree, list) or not tree:
        return False
    if tree[0] in ("l", "t") and len(tree) == 2 and isinstance(tree[1], list):
        return all(_plain(item, depth + 1) for item in tree[1])
    return (tree[0] == "c" and len(tree) == 3 and all(type(p) in (int, float) for p in tree[1:])) \
        or (tree[0] == "b" and len(tree) == 2 and isinstance(tree[1], str))


def _module_ok(module: object, package: str) -> bool:
    parts = module.split(".") if isinstance(module, str) else [""]
    return (parts[0] == package and all(p.isidentifier() for p in parts)
            and not any(p in TEST_PARTS or p.startswith("test_") for p in parts))


def _first(reasons: Iterable[str | None]) -> str | None:
    return next((why for why in reasons if why), None)


def _check(tree: object, packages: set[str], depth: int, guarded: bool = False) -> str | None:
    """Why ``tree`` is refused, or None; ``guarded``: it reaches code while it is decoded (a hash, a constructor),
    where no object rebuilt from its state may be (as ``decode`` refuses)."""
    if tree is None or type(tree) in (bool, int, float, str):
        return None
    if depth > 40 or not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        return "malformed"
    check = _CHECKS.get(tree[0])
    return "malformed" if check is None else check(_Walk(tree[0], tree[1:], packages, depth, guarded))


class _Walk:
    """One encoding under check: its tag, its parts after the tag, and where the walk is."""

    __slots__ = ("depth", "guarded", "packages", "rest", "tag")

    def __init__(self, tag: str, rest: list[Any], packages: set[str], depth: int, guarded: bool) -> None:
        self.tag, self.rest, self.packages, self.depth, self.guarded = tag, rest, packages, depth, guarded

    def inner(self, tree: object, guarded: bool = False) -> str | None:
        """Why a part one level down is refused, or None."""
        return _check(tree, self.packages, self.depth + 1, guarded)


def _sequence(w: _Walk) -> str | None:
    if len(w.rest) != 1 or not isinstance(w.rest[0], list):
        return "malformed"
    return _first(w.inner(item, w.guarded or w.tag in ("s", "f")) for item in w.rest[0])


def _mapping(w: _Walk) -> str | None:
    if len(w.rest) != 1 or not isinstance(w.rest[0], list):
        return "malformed"
    if not all(isinstance(pair, list) and len(pair) == 2 for pair in w.rest[0]):
        return "malformed"
    return _first(w.inner(item, w.guarded or i == 0) for pair in w.rest[0] for i, item in enumerate(pair))


def _bytes(w: _Walk) -> str | None:
    return None if len(w.rest) == 1 and isinstance(w.rest[0], str) else "malformed"


def _complex(w: _Walk) -> str | None:
    return None if len(w.rest) == 2 and all(type(p) in (int, float) for p in w.rest) else "malformed"


def _range(w: _Walk) -> str | None:
    return None if len(w.rest) == 3 and all(type(p) is int for p in w.rest) else "malformed"


def _ufunc(w: _Walk) -> str | None:
    name = w.rest[0] if len(w.rest) == 1 else None
    return None if isinstance(name, str) and name.isidentifier() and not name.startswith("_") else "malformed"


def _array(w: _Walk) -> str | None:
    rest = w.rest
    if (w.tag, len(rest)) not in (("a", 3), ("a", 5), ("n", 2)):
        return "malformed"
    shape = rest[1]
    shape_ok = w.tag == "n" or (isinstance(shape, list) and all(type(n) is int and n >= 0 for n in shape))
    items = rest[1] if w.tag == "n" else rest[2]
    if not (isinstance(rest[0], str) and PLAIN_DTYPE.match(rest[0]) and shape_ok and _plain(items, w.depth + 1)):
        return "not_plain_array"
    if len(rest) == 5:
        if not (isinstance(rest[3], list) and rest[3][:1] == ["o"]):
            return "malformed"
        if w.guarded:
            return "object_where_code_runs"
        return _first(w.inner(part) for part in rest[3:])
    return None


def _ast_node(w: _Walk) -> str | None:
    if len(w.rest) != 2 or not isinstance(w.rest[0], str) or not isinstance(w.rest[1], list):
        return "malformed"
    name, pairs = w.rest[0], w.rest[1]
    if not name.isidentifier() or name.startswith("_") or not all(
            isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and pair[0].isidentifier()
            and not pair[0].startswith("_") for pair in pairs):
        return "malformed"
    return _first(w.inner(pair[1], w.guarded) for pair in pairs)


def _numpy_dtype(w: _Walk) -> str | None:
    if len(w.rest) != 1:
        return "malformed"
    dtype = w.rest[0]
    return None if isinstance(dtype, str) and (PLAIN_DTYPE.match(dtype) or dtype == "|O") else "not_plain_array"


def _type(w: _Walk) -> str | None:
    if not (len(w.rest) == 2 and w.rest[0] in ("builtins", "numpy") and isinstance(w.rest[1], str)
            and w.rest[1].isidentifier() and not w.rest[1].startswith("_")):
        return "malformed"
    return None if w.rest[0] == "numpy" or isinstance(getattr(builtins, w.rest[1], None), type) else "malformed"


def _function(w: _Walk) -> str | None:
    if len(w.rest) != 3 or not all(isinstance(p, str) for p in w.rest):
        return "malformed"
    package, module, name = (str(p) for p in w.rest)
    parts = name.split(".")
    if not all(p.isidentifier() and not p.startswith("__") for p in parts):
        return "malformed"
    numpy_own = package == module == "numpy" and len(parts) == 1 and not name.startswith("_")
    return None if numpy_own or (package in w.packages and _module_ok(module, package)) else "outside_repository"


def _pandas_index(w: _Walk) -> str | None:
    rest = w.rest
    if len(rest) != 4 or rest[0] not in PANDAS_INDEXES:
        return "malformed"
    if rest[0] == "RangeIndex":
        bounds = rest[2]
        items = bounds[1] if isinstance(bounds, list) and len(bounds) == 2 and bounds[0] == "l" else None
        ok = isinstance(items, list) and len(items) == 3 and all(type(i) is int for i in items)
    else:
        ok = isinstance(rest[1], str) and bool(PLAIN_DTYPE.match(rest[1]) or rest[1] in TEXT_DTYPES) \
            and _plain(rest[2], w.depth + 1)
    return w.inner(rest[3], True) if ok else "not_plain_array"


def _object(w: _Walk) -> str | None:
    rest = w.rest
    cls = rest[0] if rest else None
    if not (len(rest) in (2, 3) and isinstance(cls, list) and len(cls) == 4 and cls[0] == "o"
            and isinstance(cls[3], str) and cls[3].isidentifier() and isinstance(rest[1], list)):
        return "malformed"
    pairs = rest[1]
    if not all(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and pair[0].isidentifier()
               and not pair[0].startswith("__") for pair in pairs) \
            or (len(rest) == 3 and not (isinstance(rest[2], list) and rest[2][:1] in (["d"], ["l"]))):
        return "malformed"
    if w.guarded:
        return "object_where_code_runs"
    return _first([w.inner(cls), *(w.inner(pair[1]) for pair in pairs), *(w.inner(items) for items in rest[2:])])


def _exception(w: _Walk) -> str | None:
    if len(w.rest) != 4 or not all(isinstance(p, str) for p in w.rest[:3]):
        return "malformed"
    package, module, name = (str(p) for p in w.rest[:3])
    builtin = package == module == "builtins" and isinstance(getattr(builtins, name, None), type) \
        and issubclass(getattr(builtins, name), BaseException)
    stdlib = package == STDLIB and all(p.isidentifier() for p in module.split(".")) \
        and module.split(".")[0] in sys.stdlib_module_names
    if not builtin and not ((stdlib or (package in w.packages and _module_ok(module, package)))
                            and name.isidentifier() and not name.startswith("__")):
        return "outside_repository"
    return w.inner(w.rest[3], True)


def _structural(w: _Walk) -> str | None:
    if len(w.rest) != 3 or not isinstance(w.rest[0], str) or not isinstance(w.rest[1], dict) \
            or not isinstance(w.rest[2], str):
        return "malformed"
    package, names, text = w.rest
    if package not in w.packages or not all(isinstance(n, str) and n.isidentifier() and not n.startswith("__")
                                            and _module_ok(m, package) for n, m in names.items()):
        return "outside_repository"
    try:
        parsed = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "not_structural"
    for node in ast.walk(parsed):
        if not isinstance(node, _STRUCTURAL_NODES) or (isinstance(node, ast.Name) and node.id not in names):
            return "not_structural"
    return None


_CHECKS: dict[str, Callable[[_Walk], str | None]] = {
    "t": _sequence, "l": _sequence, "s": _sequence, "f": _sequence, "d": _mapping, "b": _bytes, "c": _complex,
    "r": _range, "u": _ufunc, "a": _array, "n": _array, "A": _ast_node, "D": _numpy_dtype, "y": _type,
    "F": _function, "P": _pandas_index, "O": _object, "e": _exception, "o": _structural,
}
"""The check of each encoding tag (the tags ``decode`` reads)."""
