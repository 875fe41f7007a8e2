"""The recorder's value encoding: only plain data, or a repository object's structural representation.

Values a test's run records (a touched function's arguments, receiver and outcome) end up inside mutants that
run against *other* tests, so they must never carry code: a pickle can run anything while it loads
(``__reduce__``). :func:`encoded` turns a value into JSON: plain literals and containers as they are, a
``range`` by its bounds, a numpy array or scalar of a plain dtype (numbers, booleans, text) by its dtype, shape
and items, an exception by its class and arguments, a built-in or numpy type and a numpy dtype by name, a
function of the repository or of numpy by reference, a pandas index of a plain dtype by its class, items and name,
and an object of a class the repository defines by its structural representation (sympy's ``srepr``, else
``repr``) when that is an expression of literals, names the repository's package defines, and calls; else by its
*state*: its class and its attributes (slots and ``__dict__``), each encoded alike, rebuilt without running its
constructor (an xarray ``DataArray``, a sphinx documenter; a subclass of ``dict`` or ``list`` with its items too).
A value is kept only when its encoding decodes (:mod:`coharden.mutation.recorder_decode`, in the same process)
to a value of the same type that is the same (:mod:`coharden.mutation.recorder_same`: the same type, arrays by
dtype, shape and bytes, an object whose ``==`` gives no truth value, or is identity, by its attributes); else
:class:`Unencodable` is raised with the reason it is dropped for (counted per function by the recorder).

The decoder and the comparison are modules of their own (the code copied into mutants), as is the check of an
encoding read back from a recording (:mod:`coharden.mutation.encoding_check`). Runs in the test interpreter
too, beside the recorder plugin: standard library only, Python 3.7+.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import json
import os
import re
import sys

try:  # beside the recorder plugin in the test interpreter (recording.py copies them there)
    from coharden_recorder_decode import decode  # type: ignore[import-not-found]
    from coharden_recorder_same import attributes, same  # type: ignore[import-not-found]
except ImportError:  # imported from coharden itself
    from coharden.mutation.recorder_decode import decode
    from coharden.mutation.recorder_same import attributes, same

STDLIB = "<stdlib>"  # the package an exception of the standard library is encoded with (no package has the name)
MAX_ENCODED = 20000  # characters of one encoded value
MAX_NODES = 4000  # values one encoding may walk (its attributes', items' and so on)
TEST_PARTS = ("tests", "test", "testing", "conftest")
TEXT_DTYPES = ("|O", "str", "string")  # the dtypes pandas keeps text in: items checked plain
PANDAS_INDEXES = ("Index", "RangeIndex", "Int64Index", "UInt64Index", "Float64Index")  # by their items
MAX_ARRAY = 1000  # elements of an array: numpy prints no more in full, and the repr is the input's key
PLAIN_DTYPE = re.compile(r"[<>|=][biufcSU][0-9]{1,3}\Z")  # numbers, booleans and text; never objects or records


class Unencodable(Exception):
    """A value with no safe structural encoding; ``args[0]`` is the reason it is dropped for. Raised out of
    :func:`encoded`, ``args[1]`` says where: the attributes leading to the value that has none and its type
    (``.handler.lock: _thread.RLock``)."""

    def where(self):
        """``(path, type)`` of the innermost value without an encoding (empty strings when not known)."""
        path, kind = (self.args[1:3] + ("", ""))[:2] if len(self.args) > 1 else ("", "")
        return path, kind


def encoded(value, root, text=None):
    """(key, encoding) of ``value``, or Unencodable with the reason; ``root``: the repository's directory.
    Kept only when the encoding decodes, in this process, to a value of the same type that is the same
    (:func:`same`). The key names the input in a recording: the value's repr (``text``, when known), or, when
    that holds a memory address or is long, or the value is an object compared by identity (never printed:
    printing some has side effects, a Django QuerySet fetches its rows), ``<type state digest>`` of its
    encoding."""
    if text is None and _printable(value, 0):
        text = repr(value)
    enc = json.dumps(_encode(value, root, 0, [MAX_NODES]), sort_keys=True)
    if len(enc) > MAX_ENCODED:
        raise Unencodable("too_large")
    try:
        back = decode(enc)
    except (ValueError, TypeError):  # an attribute that would hide a method, an object where a hash would run its
        # code, a constructor that does not take back its arguments (json's JSONDecodeError)
        raise Unencodable("refused_by_decoder") from None
    if not same(back, value):
        raise Unencodable("not_equal_after_decoding")
    if text is None or " at 0x" in text or len(text) > 2000:  # the repr cannot name the input
        text = f"<{type(value).__qualname__} state {hashlib.sha256(enc.encode()).hexdigest()[:20]}>"
    return text, enc


def _printable(value, depth):
    """Whether ``repr(value)`` prints no object compared by identity (looked for in containers, three levels)."""
    if _by_state(value):
        return False
    if depth < 3 and type(value) in (tuple, list, set, frozenset):
        return all(_printable(item, depth + 1) for item in value)
    if depth < 3 and type(value) is dict:
        return all(_printable(k, depth + 1) and _printable(v, depth + 1) for k, v in value.items())
    return True


def _by_state(value):
    """Whether ``value`` is an object of a class (written in Python) that compares by identity: such an object
    is encoded by its state, never by its repr."""
    kind = type(value)
    return bool(kind.__flags__ & _HEAP_TYPE) and kind.__eq__ is object.__eq__ and not isinstance(value, type)


_HEAP_TYPE = 1 << 9  # Py_TPFLAGS_HEAPTYPE: a class made by a class statement (not a function, not a built-in)


def _encode(value, root, depth, budget):
    """The JSON-able structural encoding of ``value`` (read by ``_coh_decode``), or Unencodable. ``budget``: the
    containers and objects left to encode (a one-item list shared by the whole walk), so that an object whose
    attributes reach a whole application (a Sphinx documenter's environment) is given up early. An Unencodable
    names the type of the innermost value that has no encoding (a fixture is dropped for the lock its handler
    holds, not for itself)."""
    try:
        return _encode_value(value, root, depth, budget)
    except Unencodable as exc:
        if len(exc.args) > 1:
            raise
        kind = type(value)
        raise Unencodable(exc.args[0], "", f"{getattr(kind, '__module__', '?')}.{kind.__qualname__}"[:120]) from None


def _encode_value(value, root, depth, budget):
    kind = type(value)
    if value is None or kind in (bool, int, float, str):
        return value
    if kind is complex:
        return ["c", value.real, value.imag]
    if kind is bytes:
        return ["b", value.hex()]
    if kind is range:
        return ["r", value.start, value.stop, value.step]
    budget[0] -= 1  # a container, an array, an object: plain items are bounded by MAX_ENCODED
    if budget[0] < 0:
        raise Unencodable("too_large")
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(value, (numpy.ndarray, numpy.generic, numpy.ufunc)):
        return _numpy(value, root, depth, budget, numpy)
    if numpy is not None and isinstance(value, numpy.dtype):  # the object dtype too: a dtype holds no object
        if not (PLAIN_DTYPE.match(value.str) or value.str == "|O") or type(value) is not type(numpy.dtype(value.str)):
            raise Unencodable("array_dtype")
        return ["D", value.str]
    if kind.__module__.split(".")[0] == "pandas" and kind.__name__ in PANDAS_INDEXES:
        return _pandas_index(value, root, depth, budget)
    if depth > 12:
        raise Unencodable("too_deep")
    if kind in (tuple, list, set, frozenset):
        items = [_encode(item, root, depth + 1, budget) for item in value]
        if kind in (set, frozenset):
            items.sort(key=lambda item: json.dumps(item, sort_keys=True))
        return [{tuple: "t", list: "l", set: "s", frozenset: "f"}[kind], items]
    if kind is dict:
        return ["d", [[_encode(k, root, depth + 1, budget), _encode(v, root, depth + 1, budget)]
                      for k, v in value.items()]]
    if isinstance(value, BaseException):
        module = kind.__module__
        package = "builtins" if module == "builtins" and getattr(builtins, kind.__name__, None) is kind \
            else _package(kind, root) or (STDLIB if _stdlib_class(kind) else None)
        if package is None:
            raise Unencodable("exception_outside_repository")
        return ["e", package, module, kind.__name__, _encode(tuple(value.args), root, depth + 1, budget)]
    if isinstance(value, type):
        home, name = value.__module__, getattr(value, "__name__", "")
        if home in ("builtins", "numpy") and getattr(sys.modules.get(home), name, None) is value:
            return ["y", home, name]
        return _class_reference(value, root)
    if isinstance(value, ast.AST) and kind.__module__ in ("ast", "_ast") and vars(ast).get(kind.__name__) is kind:
        return _ast_node(value, root, depth, budget)
    if isinstance(value, _FUNCTIONS) or (kind.__module__.split(".")[0] == "numpy" and callable(value)):
        return _function_reference(value, root)  # numpy's functions are dispatcher objects since numpy 1.25
    if _by_state(value) or (kind.__flags__ & _HEAP_TYPE and _container_base(kind) is not None):
        return _state(value, root, depth, budget)
    try:
        return _structural(value, root)
    except Unencodable as exc:
        if exc.args[0] != "no_structural_repr":
            raise
    return _state(value, root, depth, budget)


_FUNCTIONS = (type(len), type(_encode))  # built-in functions (numpy's own in C) and Python functions


def _stdlib_class(kind):
    """Whether ``kind`` is a class of the standard library (``argparse.ArgumentTypeError``), found by its name in
    its module."""
    module = sys.modules.get(kind.__module__) if isinstance(kind.__module__, str) else None
    return module is not None and kind.__name__.isidentifier() and vars(module).get(kind.__name__) is kind \
        and _stdlib(kind.__module__)


def _stdlib(module):
    """Whether the module named ``module`` belongs to the standard library (before Python 3.10, which lists its
    names: a file under the directory of ``os``, outside site-packages)."""
    top = module.split(".")[0]
    names = getattr(sys, "stdlib_module_names", None)
    if names is not None:
        return top in names
    path = getattr(sys.modules.get(top), "__file__", None) or ""
    home = os.path.realpath(os.path.dirname(os.__file__)) + os.sep  # noqa: PTH120 - strings, as the decoder
    return os.path.realpath(path).startswith(home) and "site-packages" not in path


def _function_reference(func, root):
    """``["F", package, module, qualname]``: a function of the repository, or of numpy's namespace, by the name
    that gives back this very function (a method by ``Class.name``)."""
    module = getattr(func, "__module__", None)
    name, short = getattr(func, "__qualname__", ""), getattr(func, "__name__", "")
    numpy = sys.modules.get("numpy")
    if numpy is not None and vars(numpy).get(short) is func and short.isidentifier() and not short.startswith("_"):
        return ["F", "numpy", "numpy", short]
    package = _package(func, root) if isinstance(module, str) else None
    parts = name.split(".")
    if package is None or not isinstance(module, str) \
            or not all(p.isidentifier() and not p.startswith("__") for p in parts):
        raise Unencodable("function_outside_repository")
    found: object = sys.modules.get(module)
    for part in parts:
        found = vars(found).get(part) if isinstance(found, (type(sys), type)) else None
        found = found.__func__ if isinstance(found, staticmethod) else found
    if found is not func:
        raise Unencodable("function_outside_repository")
    return ["F", package, module, name]


def _ast_node(value, root, depth, budget):
    """``["A", class, [[field, value], ...]]``: a node of Python's ``ast`` (a project that reads source passes
    them around: sphinx's ``pycode``) by its fields and positions, rebuilt by its class alone."""
    names = [*type(value)._fields, *type(value)._attributes]
    own = vars(value)
    return ["A", type(value).__name__, [[name, _encode(own[name], root, depth + 1, budget)]
                                        for name in names if name in own]]


def _pandas_index(value, root, depth, budget):
    """``["P", class, dtype, items, name]`` for a pandas index of a plain dtype (``RangeIndex``: its bounds)."""
    name = type(value).__name__
    if name == "RangeIndex":
        bounds = _encode([value.start, value.stop, value.step], root, depth + 1, budget)
        return ["P", name, "", bounds, _encode(value.name, root, depth + 1, budget)]
    if len(value) > MAX_ARRAY:
        raise Unencodable("too_large")
    items = value.tolist()
    # text, as pandas keeps it (the object dtype; pandas 3's "str"): only when every item is plain
    dtype = getattr(value.dtype, "str", None) or str(value.dtype)
    text = dtype in TEXT_DTYPES and all(type(i) in (str, int, float, bool) for i in items)
    if not text and (value.dtype.kind not in "biufc" or not PLAIN_DTYPE.match(dtype)):
        raise Unencodable("array_dtype")
    return ["P", name, dtype, _encode(items, root, depth + 1, budget),
            _encode(value.name, root, depth + 1, budget)]


def _state(value, root, depth, budget):
    """``["O", class, [[name, value], ...]]``: an object of a repository class by its attributes (slots and
    ``__dict__``), for a class whose instances ``object.__new__`` makes (no built-in base, no ``__new__`` of its
    own: the decoder runs no code of the class). A subclass of ``dict`` or ``list`` (requests'
    ``CaseInsensitiveDict``) has its items last, ``["O", class, attributes, ["d" | "l", items]]``, read through
    the built-in's own methods (never an override of the class) and put back by them."""
    kind = type(value)
    ref = _class_reference(kind, root)
    base = _container_base(kind)
    if kind.__new__ is not (base or object).__new__ or not kind.__flags__ & _HEAP_TYPE:
        raise Unencodable("no_state")
    state = attributes(value)
    if state is None and base is not None:
        state = {}
    if state is None or not all(isinstance(n, str) and n.isidentifier() and not n.startswith("__")
                                for n in state):
        raise Unencodable("no_state")
    enc = ["O", ref, [[name, _attribute(name, item, root, depth, budget)] for name, item in sorted(state.items())]]
    if base is not None:
        enc.append(_encode(base.copy(value), root, depth + 1, budget))  # a plain dict or list of the items
    return enc


def _attribute(name, item, root, depth, budget):
    """The encoding of attribute ``name``; an Unencodable says the attribute's path (``.handler.lock``)."""
    try:
        return _encode(item, root, depth + 1, budget)
    except Unencodable as exc:
        path, kind = exc.where()
        raise Unencodable(exc.args[0], f".{name}{path}", kind) from None


def _container_base(kind):
    """``dict`` or ``list`` when it is the one built-in class (besides ``object``) in ``kind``'s bases, else None."""
    builtin = [c for c in kind.__mro__ if not c.__flags__ & _HEAP_TYPE and c is not object]
    return builtin[0] if builtin in ([dict], [list]) else None


def _numpy(value, root, depth, budget, numpy):
    """A numpy array, scalar or ufunc, or an array of the repository's own array class (astropy's Quantity: its
    array, its class and its attributes)."""
    kind = type(value)
    if kind is numpy.ndarray or (isinstance(value, numpy.generic) and kind.__module__ == "numpy"):
        return _array(value, root, depth, budget, numpy)
    if kind is numpy.ufunc:
        name = getattr(value, "__name__", "")
        if getattr(numpy, name, None) is value:
            return ["u", name]
        raise Unencodable("type_outside_repository")
    if not isinstance(value, numpy.ndarray) or _package(kind, root) is None:
        raise Unencodable("type_outside_repository")
    state = getattr(value, "__dict__", {})
    if not all(isinstance(k, str) and k.isidentifier() for k in state):
        raise Unencodable("no_structural_repr")
    return [*_array(value.view(numpy.ndarray), root, depth, budget, numpy), _class_reference(kind, root),
            _encode(dict(state), root, depth + 1, budget)]


def _array(value, root, depth, budget, numpy):
    """``["a", dtype, shape, items]`` for a numpy array (items as nested lists), ``["n", dtype, item]`` for a
    numpy scalar; only plain dtypes (no objects, records or dates), at most ``MAX_ARRAY`` elements."""
    dtype = value.dtype.str
    if not PLAIN_DTYPE.match(dtype):
        raise Unencodable("array_dtype")
    if value.size > MAX_ARRAY:
        raise Unencodable("too_large")
    if isinstance(value, numpy.generic):
        return ["n", dtype, _encode(value.item(), root, depth + 1, budget)]
    return ["a", dtype, list(value.shape), _encode(value.tolist(), root, depth + 1, budget)]


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
    printer = vars(sys.modules[package]).get("srepr") if package in sys.modules else None  # no __getattr__
    text = printer(value) if callable(printer) else repr(value)
    if not isinstance(text, str):
        raise Unencodable("no_structural_repr")
    if len(text) > MAX_ENCODED:
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
