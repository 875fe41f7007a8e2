"""The recorder's value encoding: only plain data, or a repository object's structural representation.

Values a test's run records (a touched function's arguments, receiver and outcome) end up inside mutants that
run against *other* tests, so they must never carry code: a pickle can run anything while it loads
(``__reduce__``). :func:`encoded` turns a value into JSON: plain literals and containers as they are, an
exception by its class and arguments, and an object of a class the repository defines by its structural
representation (sympy's ``srepr``, else ``repr``) when that is an expression of literals, names the
repository's package defines, and calls. A value is kept only when its encoding decodes (:func:`decode`, in
the same process) to a value of the same type that equals it; anything else raises :class:`Unencodable` with
the reason it is dropped for (counted per function by the recorder).

:func:`decode` reads an encoding with ``ast`` (never ``eval``), admits no callable but the repository's own
classes, and imports only the package's non-test modules; its source is copied verbatim into mutants
(:func:`decoder_source`). :func:`check_encoding` is what coharden applies to every encoding read back from a
recording (the records file lies in the worktree the test can rewrite): well formed, and naming only the
repository's packages. Runs in the test interpreter too (copied beside the recorder plugin): standard library
only, Python 3.7+ (as the plugin).
"""

from __future__ import annotations

import ast
import builtins
import json
import os
import sys
from collections.abc import Callable, Iterable

MAX_ENCODED = 20000  # characters of one encoded value
TEST_PARTS = ("tests", "test", "testing", "conftest")
DECODER = "_coh_decode"  # the decoder's name in a mutant's module


class Unencodable(Exception):
    """A value with no safe structural encoding; ``args[0]`` is the reason it is dropped for."""


def encoded(value, root, text=None):
    """(repr, encoding) of ``value``, or Unencodable with the reason; ``root``: the repository's directory.
    Kept only when the encoding decodes, in this process, to a value of the same type that equals ``value``."""
    text = repr(value) if text is None else text
    if " at 0x" in text:
        raise Unencodable("address_in_repr")
    if len(text) > 2000:
        raise Unencodable("repr_too_long")
    enc = json.dumps(_encode(value, root, 0), sort_keys=True)
    if len(enc) > MAX_ENCODED:
        raise Unencodable("too_large")
    back = decode(enc)
    try:
        if isinstance(value, BaseException):
            equal = type(back) is type(value) and same_args(back.args, value.args)
        else:
            equal = type(back) is type(value) and bool(back == value)
    except Exception:  # noqa: BLE001
        equal = False
    if not equal:
        raise Unencodable("not_equal_after_decoding")
    return text, enc


def same_args(one, other):
    try:
        return bool(one == other)
    except Exception:  # noqa: BLE001
        return False


def _encode(value, root, depth):
    """The JSON-able structural encoding of ``value`` (read by ``_coh_decode``), or Unencodable."""
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is bytes:
        return ["b", value.hex()]
    if depth > 12:
        raise Unencodable("too_deep")
    if kind in (tuple, list, set, frozenset):
        items = [_encode(item, root, depth + 1) for item in value]
        if kind in (set, frozenset):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return [{tuple: "t", list: "l", set: "s", frozenset: "f"}[kind], items]
    if kind is dict:
        return ["d", [[_encode(k, root, depth + 1), _encode(v, root, depth + 1)] for k, v in value.items()]]
    if isinstance(value, BaseException):
        module = kind.__module__
        package = "builtins" if module == "builtins" and getattr(builtins, kind.__name__, None) is kind \
            else _package(kind, root)
        if package is None:
            raise Unencodable("exception_outside_repository")
        return ["e", package, module, kind.__name__, _encode(tuple(value.args), root, depth + 1)]
    if isinstance(value, type):
        return _class_reference(value, root)
    return _structural(value, root)


def _class_reference(cls, root):
    """``["o", package, {name: module}, name]`` for a class of the repository (a ``cls`` receiver): by its
    name in its module, which must give back this very class."""
    package = _package(cls, root)
    module = getattr(cls, "__module__", None)
    name = getattr(cls, "__qualname__", "")
    if package is None or not isinstance(module, str) or not name.isidentifier() \
            or getattr(sys.modules.get(module), name, None) is not cls:
        raise Unencodable("type_outside_repository")
    return ["o", package, {name: module}, name]


def _package(cls, root):
    """The top-level package of ``cls`` (or, for a class made at run time such as sympy's ``Function('f')``,
    of its metaclass) when its module is a file of the repository under record (not a test module), else
    None."""
    for owner in (cls, type(cls)):
        name = getattr(owner, "__module__", None)
        module = sys.modules.get(name) if isinstance(name, str) else None
        path = getattr(module, "__file__", None)
        if not isinstance(name, str) or not path or not root \
                or not os.path.realpath(path).startswith(os.path.realpath(root) + os.sep):
            continue
        parts = name.split(".")
        if not any(p in TEST_PARTS or p.startswith("test_") for p in parts):
            return parts[0]
    return None


_HOMES: dict = {}


def _home(name, package):
    """The module of ``package`` that defines ``name`` (the package itself first), or None."""
    if (package, name) not in _HOMES:
        found = None
        top = sys.modules.get(package)
        modules = [package] + sorted(m for m in list(sys.modules) if m.startswith(package + "."))
        for module_name in modules:
            parts = module_name.split(".")
            if any(p in TEST_PARTS or p.startswith("test_") for p in parts):
                continue
            module = top if module_name == package else sys.modules.get(module_name)
            obj = getattr(module, name, None) if module is not None else None
            homes = (getattr(obj, "__module__", None), getattr(type(obj), "__module__", None))
            if obj is not None and any(isinstance(h, str) and h.split(".")[0] == package for h in homes):
                found = module_name
                break
        _HOMES[(package, name)] = found
    return _HOMES[(package, name)]


def _structural(value, root):
    """``["o", package, names, text]`` for an object of a repository class: ``text`` its structural
    representation (the package's ``srepr``, as sympy has, else ``repr``), which must be an expression of
    literals, names the package defines, and calls."""
    package = _package(type(value), root)
    if package is None:
        raise Unencodable("type_outside_repository")
    printer = getattr(sys.modules.get(package), "srepr", None)
    text = printer(value) if callable(printer) else repr(value)
    if not isinstance(text, str) or len(text) > MAX_ENCODED:
        raise Unencodable("too_large")
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        raise Unencodable("no_structural_repr") from None
    names = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            home = _home(node.id, package)
            if home is None:
                raise Unencodable("no_structural_repr")
            names[node.id] = home
        elif isinstance(node, (ast.Attribute, ast.Subscript, ast.BinOp, ast.Lambda, ast.Starred)):
            raise Unencodable("no_structural_repr")
    return ["o", package, names, text]


def decode(text):
    """The value a recorded encoding stands for (see ``_encode`` in coharden's recorder plugin).

    Copied verbatim into mutants that return or compare with a recorded value, so no pickle (which can run any code
    while it loads) goes from a test's run into code that runs against other tests. The encoding is JSON: None,
    booleans, numbers and strings as they are; ``["t"|"l"|"s"|"f", items]`` a tuple, list, set or frozenset;
    ``["d", [[key, value], ...]]``; ``["b", hex]`` bytes; ``["c", real, imag]``; ``["e", package, module, name, args]``
    an exception (a built-in one, or the package's); ``["o", package, {name: module}, text]`` an object of the
    repository, ``text`` its structural representation (sympy's ``srepr``, else ``repr``): an expression of
    literals, names and calls, read here with ``ast`` (never ``eval``). A name is looked up in the module the
    encoding names for it, which must lie in ``package`` and not be a test module, and must be defined there (its
    own or its class's ``__module__`` in the package); only classes are called. Anything else raises ValueError."""
    import ast
    import builtins
    import importlib
    import json

    def allowed(module, package):
        parts = module.split(".") if isinstance(module, str) else [""]
        return (parts[0] == package and all(p.isidentifier() for p in parts)
                and not any(p in ("tests", "test", "testing", "conftest") or p.startswith("test_") for p in parts))

    def own(obj, package):
        homes = (getattr(obj, "__module__", None), getattr(type(obj), "__module__", None))
        return any(isinstance(h, str) and allowed(h, package) for h in homes)

    def node(tree, package, names):
        if not any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(tree)):
            return ast.literal_eval(tree)  # literals only (every Python version's literal nodes)
        if isinstance(tree, (ast.Tuple, ast.List)):
            items = [node(e, package, names) for e in tree.elts]
            return tuple(items) if isinstance(tree, ast.Tuple) else items
        if isinstance(tree, ast.Dict) and None not in tree.keys:
            return {node(k, package, names): node(tree.values[i], package, names) for i, k in enumerate(tree.keys)}
        if isinstance(tree, ast.Name):
            module = names.get(tree.id)
            if tree.id.startswith("__") or not allowed(module, package):
                raise ValueError(f"name {tree.id!r} outside the package")
            obj = getattr(importlib.import_module(module), tree.id)
            if not own(obj, package):
                raise ValueError(f"{tree.id!r} is not the package's own")
            return obj
        if isinstance(tree, ast.Call) and isinstance(tree.func, (ast.Name, ast.Call)) \
                and not any(isinstance(a, ast.Starred) for a in tree.args) \
                and all(k.arg is not None for k in tree.keywords):
            func = node(tree.func, package, names)
            if not isinstance(func, type):
                raise ValueError("only classes are called")
            return func(*[node(a, package, names) for a in tree.args],
                        **{str(k.arg): node(k.value, package, names) for k in tree.keywords})
        raise ValueError(f"not a structural representation: {type(tree).__name__}")

    def value(enc):
        if enc is None or type(enc) in (bool, int, float, str):
            return enc
        if not isinstance(enc, list) or not enc or not isinstance(enc[0], str):
            raise ValueError("malformed encoding")
        tag, rest = enc[0], enc[1:]
        if tag in ("t", "l", "s", "f") and len(rest) == 1 and isinstance(rest[0], list):
            items = [value(e) for e in rest[0]]
            return {"t": tuple, "l": list, "s": set, "f": frozenset}[tag](items)
        if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
            return {value(k): value(v) for k, v in rest[0]}
        if tag == "b" and len(rest) == 1 and isinstance(rest[0], str):
            return bytes.fromhex(rest[0])
        if tag == "c" and len(rest) == 2 and all(type(p) in (int, float) for p in rest):
            return complex(rest[0], rest[1])
        if tag == "e" and len(rest) == 4 and all(isinstance(p, str) for p in rest[:3]):
            package, module, name, args = rest
            cls = getattr(builtins, name, None) if module == "builtins" else \
                getattr(importlib.import_module(module), name, None) if allowed(module, package) else None
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise ValueError("not an exception class")
            return cls(*value(args))
        if tag == "o" and len(rest) == 3 and isinstance(rest[0], str) and isinstance(rest[1], dict) \
                and isinstance(rest[2], str):
            return node(ast.parse(rest[2], mode="eval").body, rest[0], rest[1])
        raise ValueError(f"unknown encoding tag {tag!r}")

    return value(json.loads(text))


def decoder_source() -> str:
    """The source of :func:`decode`, named ``_coh_decode``, to append to a mutant's module (with a one-line
    docstring: the mutant's diff is read by people)."""
    import inspect

    source = inspect.getsource(decode).replace("def decode(", f"def {DECODER}(", 1)
    function = ast.parse(source).body[0]
    doc = (ast.get_docstring(function, clean=False) if isinstance(function, ast.FunctionDef) else None) or ""
    short = '"""A value coharden recorded: plain data, or objects of this repository\'s own classes."""'
    return source.replace(f'"""{doc}"""', short, 1)


def decode_expr(enc: str) -> str:
    """An expression (in a module that has :func:`decoder_source` appended) for the value ``enc`` encodes."""
    return f"{DECODER}({enc!r})"


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
        return ({tree[2]} if tree[2] != "builtins" else set()) | _modules(tree[4])
    if tree[0] == "d":
        return set().union(*(_modules(item) for pair in tree[1] for item in pair))
    if tree[0] in ("t", "l", "s", "f"):
        return set().union(*(_modules(item) for item in tree[1]))
    return set()


def _module_ok(module: object, package: str) -> bool:
    parts = module.split(".") if isinstance(module, str) else [""]
    return (parts[0] == package and all(p.isidentifier() for p in parts)
            and not any(p in TEST_PARTS or p.startswith("test_") for p in parts))


def _first(reasons: Iterable[str | None]) -> str | None:
    return next((why for why in reasons if why), None)


def _check(tree: object, packages: set[str], depth: int) -> str | None:
    if tree is None or type(tree) in (bool, int, float, str):
        return None
    if depth > 40 or not isinstance(tree, list) or not tree or not isinstance(tree[0], str):
        return "malformed"
    tag, rest = tree[0], tree[1:]
    if tag in ("t", "l", "s", "f") and len(rest) == 1 and isinstance(rest[0], list):
        return _first(_check(item, packages, depth + 1) for item in rest[0])
    if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in rest[0]):
            return "malformed"
        return _first(_check(item, packages, depth + 1) for pair in rest[0] for item in pair)
    if tag == "b" and len(rest) == 1 and isinstance(rest[0], str):
        return None
    if tag == "c" and len(rest) == 2 and all(type(p) in (int, float) for p in rest):
        return None
    if tag == "e" and len(rest) == 4 and all(isinstance(p, str) for p in rest[:3]):
        package, module, name, args = rest
        builtin = package == module == "builtins" and isinstance(getattr(builtins, name, None), type) \
            and issubclass(getattr(builtins, name), BaseException)
        if not builtin and not (package in packages and _module_ok(module, package) and name.isidentifier()
                                and not name.startswith("__")):
            return "outside_repository"
        return _check(args, packages, depth + 1)
    if tag == "o" and len(rest) == 3 and isinstance(rest[0], str) and isinstance(rest[1], dict) \
            and isinstance(rest[2], str):
        package, names, text = rest
        if package not in packages or not all(isinstance(n, str) and n.isidentifier() and not n.startswith("__")
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
    return "malformed"
