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
A value is kept only when its encoding decodes (:func:`decode`, in the same process) to a value of the same type
that is the same; anything else raises :class:`Unencodable` with the reason it is dropped for (counted per
function by the recorder). :func:`same` is what "the same" means here (and in mutants, which compare a call with a
recorded input): the same type, arrays by dtype, shape and bytes (their ``==`` is elementwise), and an object
whose ``==`` gives no truth value, or is identity, by its attributes.

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
import hashlib
import json
import os
import re
import sys
from collections.abc import Callable, Iterable
from typing import Any

STDLIB = "<stdlib>"  # the package an exception of the standard library is encoded with (no package has the name)
MAX_ENCODED = 20000  # characters of one encoded value
MAX_NODES = 4000  # values one encoding may walk (its attributes', items' and so on)
TEST_PARTS = ("tests", "test", "testing", "conftest")
DECODER = "_coh_decode"  # the decoder's name in a mutant's module
SAME = "_coh_same"  # the comparison's name in a mutant's module
ATTRS = "_coh_attrs"  # the name, in a mutant's module, of the state reader ``same`` compares objects by
_TEXT_DTYPES = ("|O", "str", "string")  # the dtypes pandas keeps text in: items checked plain
PANDAS_INDEXES = ("Index", "RangeIndex", "Int64Index", "UInt64Index", "Float64Index")  # by their items
MAX_ARRAY = 1000  # elements of an array: numpy prints no more in full, and the repr is the input's key
_DTYPE = re.compile(r"[<>|=][biufcSU][0-9]{1,3}\Z")  # numbers, booleans and text; never objects or records


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


def same(one, other):
    """Whether two recorded values are the same: the same type, and then containers item by item, an exception
    by its arguments, a numpy array or scalar by its dtype, shape and bytes (``==`` is elementwise for arrays,
    and an array has no truth value), a pandas index by its items, dtype and name; an object of a class
    written in Python all through (no built-in base) is the same when its attributes are (``_coh_attrs``, read
    before any ``==``, which may fill a cache: xarray's ``Variable.encoding``), else by ``==`` when that gives a
    truth value (an xarray ``DataArray``'s is elementwise) and the class does not compare by identity. Copied
    verbatim into mutants, as ``_coh_same``, to compare a call's arguments with a recorded input."""
    if type(one) is not type(other):
        return False
    if one is other:
        return True
    try:
        # by the real type (issubclass, never isinstance: that reads ``__class__``, which a class may compute from
        # its state); containers through the built-in's own methods: a subclass's overrides do not run
        kind = type(one)
        if issubclass(kind, (tuple, list)):
            mine = list.copy(one) if issubclass(kind, list) else tuple.__getitem__(one, slice(None))
            theirs = list.copy(other) if issubclass(kind, list) else tuple.__getitem__(other, slice(None))
            return len(mine) == len(theirs) and all(_coh_same(a, b) for a, b in zip(mine, theirs))  # noqa: B905
        if issubclass(kind, dict):  # an ordered mapping (OrderedDict) in its own order too: its built-in's methods
            builtin: Any = next(c for c in kind.__mro__ if not c.__flags__ & (1 << 9))
            keys, other_keys = list(builtin.keys(one)), list(builtin.keys(other))
            return (set(keys) == set(other_keys) and (kind is dict or keys == other_keys)
                    and all(_coh_same(v, dict.__getitem__(other, k)) for k, v in builtin.items(one)))
        if issubclass(kind, BaseException):
            return _coh_same(one.args, other.args)
        base = [c for c in type(one).__mro__ if c.__module__ == "numpy" and c.__name__ in ("ndarray", "generic")]
        if base:  # numpy's own tobytes: an array class may refuse its own (astropy's Quantity does)
            return (one.dtype == other.dtype and one.shape == other.shape
                    and base[0].tobytes(one) == base[0].tobytes(other)  # type: ignore[attr-defined]
                    and _coh_same(getattr(one, "__dict__", {}), getattr(other, "__dict__", {})))
        kind = type(one)
        if kind.__module__.split(".")[0] == "pandas" and kind.__name__.endswith("Index"):
            return bool(one.equals(other)) and one.dtype == other.dtype and _coh_same(one.name, other.name)
        # written in Python all through (a subclass of str or int keeps its value where no attribute shows it):
        # the same attributes first, as ``==`` may fill a cache
        if all(c is object or c.__flags__ & (1 << 9) for c in kind.__mro__):
            state = _coh_attrs(one)
            if state is not None and _coh_same(state, _coh_attrs(other)):
                return True
        if kind.__eq__ is object.__eq__:  # by identity (a function, an object that is not ``one``)
            return False
        equal = one == other
        return (type(equal) is bool or type(equal).__name__ == "bool_") and bool(equal)
    except Exception:  # noqa: BLE001 - what cannot be compared is not the same
        return False


def attributes(value):
    """An object's state, read without running any of its code: its slots' values and its ``__dict__`` (both
    through their own descriptors, never a property), by name (a private slot by its mangled name); None when it
    has neither. Copied verbatim into mutants, as
    ``_coh_attrs``, for ``_coh_same``."""
    import types

    state = {}
    slotted = False
    for cls in type(value).__mro__:
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            if name.startswith("__") and not name.endswith("__"):
                name = "_" + cls.__name__.lstrip("_") + name
            slot = cls.__dict__.get(name)
            if type(slot) is not types.MemberDescriptorType:
                continue
            slotted = True
            try:
                state[name] = slot.__get__(value, cls)
            except AttributeError:  # an empty slot
                continue
    holder = next((k.__dict__["__dict__"] for k in type(value).__mro__ if "__dict__" in k.__dict__), None)
    own = holder.__get__(value) if type(holder) is types.GetSetDescriptorType else None  # never a property
    if isinstance(own, dict):
        state.update(own)
    elif not slotted:
        return None
    return state


_coh_same = same  # their names inside mutants, where they call each other by those names
_coh_attrs = attributes


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
        if not (_DTYPE.match(value.str) or value.str == "|O") or type(value) is not type(numpy.dtype(value.str)):
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
    text = dtype in _TEXT_DTYPES and all(type(i) in (str, int, float, bool) for i in items)
    if not text and (value.dtype.kind not in "biufc" or not _DTYPE.match(dtype)):
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
    if not _DTYPE.match(dtype):
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


def decode(text):
    """The value a recorded encoding stands for (see ``_encode`` in coharden's recorder plugin).

    Copied verbatim into mutants that return or compare with a recorded value, so no pickle (which can run any code
    while it loads) goes from a test's run into code that runs against other tests. The encoding is JSON: None,
    booleans, numbers and strings as they are; ``["t"|"l"|"s"|"f", items]`` a tuple, list, set or frozenset; ``["d",
    [[key, value], ...]]``; ``["b", hex]`` bytes; ``["c", real, imag]``; ``["r", start, stop, step]`` a range;
    ``["a", dtype, shape, items]`` a numpy array and ``["n", dtype, item]`` a numpy scalar, of a plain dtype and
    plain items (read by numpy, which runs no code of theirs), and ``["a", dtype, shape, items, class, attributes]``
    an array of the repository's own array class (a view of the array as that class, then its attributes); ``["A",
    class, [[field, value], ...]]`` a node of Python's ``ast``; ``["u", name]`` a numpy ufunc; ``["D", dtype]`` a
    numpy dtype; ``["y", "builtins"|"numpy", name]`` a type of either; ``["F", package, module, qualname]`` a
    function of the package (or of numpy's namespace), not called; ``["P", class, dtype, items, name]`` a pandas
    index of plain items; ``["e", package, module, name, args]`` an exception (a built-in one, or the package's);
    ``["e", "<stdlib>", module, name, args]`` one of the standard library's (its module imported already: decoding
    imports nothing for it); ``["o", package, {name: module}, text]`` an object of the repository, ``text`` its
    structural representation
    (sympy's ``srepr``, else ``repr``): an expression of literals, names and calls, read here with ``ast`` (never
    ``eval``). A name is looked up in the module the encoding names for it, which must lie in ``package`` and not be
    a test module, and must be defined there (its own or its class's ``__module__`` in the package); only classes
    are called. ``["O", class, [[name, value], ...]]`` an object of a package class by its state: made by
    ``object.__new__`` (never its constructor; a class with a ``__new__`` of its own is refused), then each slot set
    through its slot and each other attribute written into its ``__dict__`` (no ``__setattr__``, no property runs);
    ``["O", class, [[name, value], ...], ["d" | "l", items]]`` a subclass of ``dict`` or ``list`` alike, made by
    the built-in's ``__new__`` and filled by its own ``update`` or ``extend`` (no method of the class runs).
    Anything else raises ValueError."""
    import ast
    import builtins
    import importlib
    import json
    import os
    import re
    import sys
    import types

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

    def plain(item):
        if isinstance(item, (list, tuple)):
            return all(plain(i) for i in item)
        return type(item) in (bool, int, float, complex, str, bytes)

    def dtype(text):
        # _DTYPE's pattern, written out: this function is copied alone into mutants
        if not isinstance(text, str) or not re.match(r"[<>|=][biufcSU][0-9]{1,3}\Z", text):
            raise ValueError("not a plain dtype")
        return text

    def array(tag, rest):
        dtype(rest[0])
        import numpy

        items = value(rest[1] if tag == "n" else rest[2])
        if not plain(items):
            raise ValueError("an array of plain items only")
        if tag == "n":
            return numpy.dtype(rest[0]).type(items)
        if not isinstance(rest[1], list) or not all(type(n) is int and n >= 0 for n in rest[1]):
            raise ValueError("malformed shape")
        base = numpy.array(items, dtype=numpy.dtype(rest[0])).reshape(rest[1])
        if len(rest) == 3:
            return base
        cls, state = value(rest[3]), value(rest[4])
        if not (isinstance(cls, type) and issubclass(cls, numpy.ndarray) and isinstance(state, dict)
                and all(isinstance(k, str) and k.isidentifier() for k in state)):
            raise ValueError("not an array class of the package")
        made = base.view(cls)
        made.__dict__.update(state)
        return made

    def value(enc, guarded=False):
        # guarded: the value reaches code while it is decoded (a set's or a mapping's hash, an exception's
        # constructor, a pandas index's name), so no object rebuilt from its state may be in it
        if enc is None or type(enc) in (bool, int, float, str):
            return enc
        if not isinstance(enc, list) or not enc or not isinstance(enc[0], str):
            raise ValueError("malformed encoding")
        tag, rest = enc[0], enc[1:]
        if tag in ("t", "l", "s", "f") and len(rest) == 1 and isinstance(rest[0], list):
            items = [value(e, guarded or tag in ("s", "f")) for e in rest[0]]
            return {"t": tuple, "l": list, "s": set, "f": frozenset}[tag](items)
        if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
            return {value(k, True): value(v, guarded) for k, v in rest[0]}
        if tag == "b" and len(rest) == 1 and isinstance(rest[0], str):
            return bytes.fromhex(rest[0])
        if tag == "c" and len(rest) == 2 and all(type(p) in (int, float) for p in rest):
            return complex(rest[0], rest[1])
        if tag == "r" and len(rest) == 3 and all(type(p) is int for p in rest):
            return range(*rest)
        if (tag, len(rest)) in (("a", 3), ("a", 5), ("n", 2)):
            if guarded and len(rest) == 5:  # an array of the package's class: its hash reads its attributes
                raise ValueError("an array with attributes where decoding would run its code")
            return array(tag, rest)
        if tag == "u" and len(rest) == 1 and isinstance(rest[0], str) and rest[0].isidentifier() \
                and not rest[0].startswith("_"):
            import numpy

            func = getattr(numpy, rest[0], None)
            if not isinstance(func, numpy.ufunc):
                raise ValueError("not a numpy ufunc")
            return func
        if tag == "D" and len(rest) == 1:
            import numpy

            return numpy.dtype("O" if rest[0] == "|O" else dtype(rest[0]))
        if tag == "y" and len(rest) == 2 and rest[0] in ("builtins", "numpy") and isinstance(rest[1], str) \
                and rest[1].isidentifier() and not rest[1].startswith("_"):
            found = getattr(builtins if rest[0] == "builtins" else importlib.import_module("numpy"), rest[1], None)
            if not isinstance(found, type):
                raise ValueError("not a type")
            return found
        if tag == "F" and len(rest) == 3 and all(isinstance(p, str) for p in rest):
            package, module, name = rest
            parts = name.split(".")
            if not all(p.isidentifier() and not p.startswith("__") for p in parts):
                raise ValueError("not a function's name")
            # looked up in namespaces (a module's, a class's), never by getattr: no descriptor, class property or
            # module __getattr__ runs
            if package == module == "numpy" and len(parts) == 1 and not name.startswith("_"):
                found = vars(importlib.import_module("numpy")).get(name)
                ok = callable(found) and not isinstance(found, type)
            elif allowed(module, package):
                found = importlib.import_module(module)
                for part in parts:
                    found = vars(found).get(part) if isinstance(found, (types.ModuleType, type)) else None
                    found = found.__func__ if isinstance(found, staticmethod) else found
                ok = isinstance(found, (types.FunctionType, types.BuiltinFunctionType)) and own(found, package)
            else:
                raise ValueError(f"function {name!r} outside the package")
            if not ok:
                raise ValueError(f"{name!r} is not a function of {package!r}")
            return found
        if tag == "P" and len(rest) == 4 and rest[0] in ("Index", "RangeIndex", "Int64Index", "UInt64Index",
                                                         "Float64Index"):
            pandas = importlib.import_module("pandas")
            items, name = value(rest[2]), value(rest[3], True)
            if not isinstance(items, list):
                raise ValueError("not a pandas index")
            if rest[0] == "RangeIndex":
                if len(items) != 3 or not all(type(i) is int for i in items):
                    raise ValueError("malformed range")
                return pandas.RangeIndex(*items, name=name)
            if not plain(items):
                raise ValueError("an index of plain items only")
            # text (objects, pandas 3's "str"): the plain items checked above
            kind = object if rest[1] == "|O" else rest[1] if rest[1] in ("str", "string") else dtype(rest[1])
            made = pandas.Index(items, dtype=kind, name=name)  # Int64Index before pandas 2, no warning
            if type(made).__name__ != rest[0]:
                raise ValueError(f"not a pandas {rest[0]}")
            return made
        if tag == "A" and len(rest) == 2 and isinstance(rest[0], str) and isinstance(rest[1], list):
            cls = vars(ast).get(rest[0]) if rest[0].isidentifier() and not rest[0].startswith("_") else None
            if not (isinstance(cls, type) and issubclass(cls, ast.AST)):
                raise ValueError("not a node class of ast")
            fields = {}
            for pair in rest[1]:  # only the class's own fields and positions
                if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in (*cls._fields, *cls._attributes)):
                    raise ValueError("not a field of the node")
                fields[pair[0]] = value(pair[1], guarded)
            return cls(**fields)  # the C constructor: it stores the fields, runs no other code
        if tag == "O" and len(rest) in (2, 3) and isinstance(rest[0], list) and len(rest[0]) == 4 \
                and rest[0][0] == "o" and isinstance(rest[0][3], str) and rest[0][3].isidentifier() \
                and isinstance(rest[1], list):  # a class by its name, never a call
            if guarded:
                raise ValueError("an object rebuilt from its state where decoding would run its code")
            cls = value(rest[0])
            # a subclass of dict or list: its items follow, and only the built-in's code fills them in
            container = {"d": dict, "l": list}.get(rest[2][0]) if len(rest) == 3 and isinstance(rest[2], list) \
                and rest[2] and isinstance(rest[2][0], str) else None
            if len(rest) == 3 and (container is None or not isinstance(cls, type) or not issubclass(cls, container)
                                   or any(not k.__flags__ & (1 << 9) and k not in (container, object)
                                          for k in cls.__mro__)):
                raise ValueError("not a subclass of dict or list of the package")
            base = container or object
            if not isinstance(cls, type) or cls.__new__ is not base.__new__:
                raise ValueError(f"not a class of the package that {base.__name__}.__new__ makes")
            made = base.__new__(cls)  # type: ignore[call-overload]  # mypy reads base as a metaclass
            holder = next((k.__dict__["__dict__"] for k in cls.__mro__ if "__dict__" in k.__dict__), None)
            own_dict = holder.__get__(made) if type(holder) is types.GetSetDescriptorType else None
            for pair in rest[1]:
                if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                        and pair[0].isidentifier() and not pair[0].startswith("__")):
                    raise ValueError("malformed attribute")
                name = pair[0]
                found = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
                if type(found) is types.MemberDescriptorType:
                    found.__set__(made, value(pair[1]))
                elif callable(found) or hasattr(type(found), "__get__") or not isinstance(own_dict, dict):
                    # it would hide a method or a descriptor of the class (``__eq__`` calling ``self._key()``
                    # would call what the encoding chose), or there is no instance dict to write into
                    raise ValueError(f"attribute {name!r} would hide what the class defines")
                else:
                    own_dict[name] = value(pair[1])
            # by the container named above, never isinstance(made, ...): that reads made.__class__, which a class
            # may compute from the state just written (werkzeug's LocalProxy)
            if container is dict:
                dict.update(made, value(rest[2]))  # keys hashed while decoded
            elif container is list:
                list.extend(made, value(rest[2]))
            return made
        if tag == "e" and len(rest) == 4 and all(isinstance(p, str) for p in rest[:3]):
            package, module, name, args = rest
            if package == "<stdlib>":  # only a module already imported; ``_stdlib``'s test, written out
                top = module.split(".")[0]
                path = getattr(sys.modules.get(top), "__file__", None) or ""
                home = os.path.realpath(os.path.dirname(os.__file__)) + os.sep  # noqa: PTH120 - strings, as the decoder
                names = getattr(sys, "stdlib_module_names", None)
                stdlib = top in names if names is not None else \
                    os.path.realpath(path).startswith(home) and "site-packages" not in path
                found = sys.modules.get(module) if stdlib and name.isidentifier() else None
                cls = vars(found).get(name) if found is not None else None
            else:
                cls = getattr(builtins, name, None) if module == "builtins" else \
                    getattr(importlib.import_module(module), name, None) if allowed(module, package) else None
            if not (isinstance(cls, type) and issubclass(cls, BaseException)):
                raise ValueError("not an exception class")
            return cls(*value(args, True))
        if tag == "o" and len(rest) == 3 and isinstance(rest[0], str) and isinstance(rest[1], dict) \
                and isinstance(rest[2], str):
            return node(ast.parse(rest[2], mode="eval").body, rest[0], rest[1])
        raise ValueError(f"unknown encoding tag {tag!r}")

    return value(json.loads(text))


def decoder_source() -> str:
    """The source of :func:`decode`, :func:`same` and :func:`attributes`, named ``_coh_decode``, ``_coh_same`` and
    ``_coh_attrs``, to append to a
    mutant's module (each with a one-line docstring: the mutant's diff is read by people)."""
    return (_copied(decode, DECODER, "A value coharden recorded: plain data, or objects of this repository's own "
                    "classes.") + "\n\n"
            + _copied(same, SAME, "Whether a call's value is the recorded one: the same type, arrays by their bytes.")
            + "\n\n" + _copied(attributes, ATTRS, "An object's slots and __dict__, read without running its code."))


def _copied(function: Callable[..., object], name: str, doc: str) -> str:
    import inspect

    source = inspect.getsource(function).replace(f"def {function.__name__}(", f"def {name}(", 1)
    tree = ast.parse(source).body[0]
    old = (ast.get_docstring(tree, clean=False) if isinstance(tree, ast.FunctionDef) else None) or ""
    return source.replace(f'"""{old}"""', f'"""{doc}"""', 1)


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
    tag, rest = tree[0], tree[1:]
    if tag in ("t", "l", "s", "f") and len(rest) == 1 and isinstance(rest[0], list):
        return _first(_check(item, packages, depth + 1, guarded or tag in ("s", "f")) for item in rest[0])
    if tag == "d" and len(rest) == 1 and isinstance(rest[0], list):
        if not all(isinstance(pair, list) and len(pair) == 2 for pair in rest[0]):
            return "malformed"
        return _first(_check(item, packages, depth + 1, guarded or i == 0) for pair in rest[0]
                      for i, item in enumerate(pair))
    if tag == "b" and len(rest) == 1 and isinstance(rest[0], str):
        return None
    if tag == "c" and len(rest) == 2 and all(type(p) in (int, float) for p in rest):
        return None
    if tag == "r" and len(rest) == 3 and all(type(p) is int for p in rest):
        return None
    if tag == "u" and len(rest) == 1 and isinstance(rest[0], str) and rest[0].isidentifier() \
            and not rest[0].startswith("_"):
        return None
    if (tag, len(rest)) in (("a", 3), ("a", 5), ("n", 2)):
        shape_ok = tag == "n" or (isinstance(rest[1], list) and all(type(n) is int and n >= 0 for n in rest[1]))
        items = rest[1] if tag == "n" else rest[2]
        ok = isinstance(rest[0], str) and _DTYPE.match(rest[0]) and shape_ok and _plain(items, depth + 1)
        if not ok:
            return "not_plain_array"
        if len(rest) == 5:
            if not (isinstance(rest[3], list) and rest[3][:1] == ["o"]):
                return "malformed"
            if guarded:
                return "object_where_code_runs"
            return _first(_check(part, packages, depth + 1) for part in rest[3:])
        return None
    if tag == "A" and len(rest) == 2 and isinstance(rest[0], str) and isinstance(rest[1], list):
        if not rest[0].isidentifier() or rest[0].startswith("_") or not all(
                isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and pair[0].isidentifier()
                and not pair[0].startswith("_") for pair in rest[1]):
            return "malformed"
        return _first(_check(pair[1], packages, depth + 1, guarded) for pair in rest[1])
    if tag == "D" and len(rest) == 1:
        return None if isinstance(rest[0], str) and (_DTYPE.match(rest[0]) or rest[0] == "|O") else "not_plain_array"
    if tag == "y" and len(rest) == 2 and rest[0] in ("builtins", "numpy") and isinstance(rest[1], str) \
            and rest[1].isidentifier() and not rest[1].startswith("_"):
        return None if rest[0] == "numpy" or isinstance(getattr(builtins, rest[1], None), type) else "malformed"
    if tag == "F" and len(rest) == 3 and all(isinstance(p, str) for p in rest):
        package, module, name = rest
        parts = name.split(".")
        if not all(p.isidentifier() and not p.startswith("__") for p in parts):
            return "malformed"
        numpy_own = package == module == "numpy" and len(parts) == 1 and not name.startswith("_")
        return None if numpy_own or (package in packages and _module_ok(module, package)) else "outside_repository"
    if tag == "P" and len(rest) == 4 and rest[0] in PANDAS_INDEXES:
        if rest[0] == "RangeIndex":
            items = rest[2][1] if isinstance(rest[2], list) and len(rest[2]) == 2 and rest[2][0] == "l" else None
            ok = isinstance(items, list) and len(items) == 3 and all(type(i) is int for i in items)
        else:
            ok = isinstance(rest[1], str) and bool(_DTYPE.match(rest[1]) or rest[1] in _TEXT_DTYPES) \
                and _plain(rest[2], depth + 1)
        return _check(rest[3], packages, depth + 1, True) if ok else "not_plain_array"
    if tag == "O" and len(rest) in (2, 3) and isinstance(rest[0], list) and len(rest[0]) == 4 and rest[0][0] == "o" \
            and isinstance(rest[0][3], str) and rest[0][3].isidentifier() and isinstance(rest[1], list):
        if not all(isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str) and pair[0].isidentifier()
                   and not pair[0].startswith("__") for pair in rest[1]) \
                or (len(rest) == 3 and not (isinstance(rest[2], list) and rest[2][:1] in (["d"], ["l"]))):
            return "malformed"
        if guarded:
            return "object_where_code_runs"
        return _first([_check(rest[0], packages, depth + 1),
                       *(_check(pair[1], packages, depth + 1) for pair in rest[1]),
                       *(_check(items, packages, depth + 1) for items in rest[2:])])
    if tag == "e" and len(rest) == 4 and all(isinstance(p, str) for p in rest[:3]):
        package, module, name, args = rest
        builtin = package == module == "builtins" and isinstance(getattr(builtins, name, None), type) \
            and issubclass(getattr(builtins, name), BaseException)
        stdlib = package == STDLIB and all(p.isidentifier() for p in module.split(".")) \
            and module.split(".")[0] in sys.stdlib_module_names
        if not builtin and not ((stdlib or (package in packages and _module_ok(module, package)))
                                and name.isidentifier() and not name.startswith("__")):
            return "outside_repository"
        return _check(args, packages, depth + 1, True)
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
