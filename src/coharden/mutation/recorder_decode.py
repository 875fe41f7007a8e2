"""The decoder of recorded values: the code copied into mutants that return or compare with one.

:func:`decode` (``_coh_decode`` in a mutant) reads an encoding with ``json`` and ``ast`` (never ``eval``), one
small reader per kind of value, chosen by the encoding's tag from ``_coh_readers``: so no pickle (which can run
any code while it loads) goes from a test's run into code that runs against other tests. It admits no callable
but the repository's own classes and imports only the package's non-test modules. Every function here is
appended verbatim to a mutant's module (``coharden.mutation.value_helpers``), so each calls the others by the
names they have there (``_coh_...``) and imports what it uses inside its body; standard library only, Python
3.7+: it runs in the test interpreter too, beside the recorder plugin, where the encoder
(:mod:`coharden.mutation.recorder_values`) checks that every value it keeps decodes to the same value.
"""

from __future__ import annotations


def decode(text):
    """The value a recorded encoding stands for (see ``encoded`` in :mod:`coharden.mutation.recorder_values`).

    The encoding is JSON: None, booleans, numbers and strings as they are; anything else a list whose first item
    is a tag naming the kind of value and the reader in ``_coh_readers`` that rebuilds it (each reader's
    docstring gives its tag's shape): containers, bytes, complex numbers, ranges, numpy arrays, scalars, ufuncs,
    dtypes and types of plain data, functions of the package by reference (never called), pandas indexes of
    plain items, ``ast`` nodes, exceptions, and objects of the package by their structural representation (only
    its classes are called) or by their state (made by ``object.__new__``, never a constructor; no
    ``__setattr__`` or property runs). Anything else raises ValueError."""
    import json

    return _coh_value(json.loads(text))


def _coh_value(enc, guarded=False):
    """A value from its parsed encoding; ``guarded``: the value reaches code while it is decoded (a set's or a
    mapping's hash, an exception's constructor, a pandas index's name), so no object rebuilt from its state may
    be in it."""
    if enc is None or type(enc) in (bool, int, float, str):
        return enc
    if not isinstance(enc, list) or not enc or not isinstance(enc[0], str):
        raise ValueError("malformed encoding")
    reader = _coh_readers.get(enc[0])
    if reader is None:
        raise ValueError(f"unknown encoding tag {enc[0]!r}")
    return reader(enc[0], enc[1:], guarded)


def _coh_malformed(tag):
    """The error of an encoding whose tag is known and whose parts are not what the tag takes."""
    return ValueError(f"malformed encoding of tag {tag!r}")


def _coh_allowed(module, package):
    """Whether ``module`` lies in ``package`` and is not a test module."""
    parts = module.split(".") if isinstance(module, str) else [""]
    return (parts[0] == package and all(p.isidentifier() for p in parts)
            and not any(p in ("tests", "test", "testing", "conftest") or p.startswith("test_") for p in parts))


def _coh_own(obj, package):
    """Whether ``obj`` (or its class) is defined in ``package``."""
    homes = (getattr(obj, "__module__", None), getattr(type(obj), "__module__", None))
    return any(isinstance(h, str) and _coh_allowed(h, package) for h in homes)


def _coh_plain(item):
    """Whether ``item`` is plain data (numbers, booleans, text, bytes, lists and tuples of them)."""
    if isinstance(item, (list, tuple)):
        return all(_coh_plain(i) for i in item)
    return type(item) in (bool, int, float, complex, str, bytes)


def _coh_dtype(text):
    """``text`` when it names a plain numpy dtype (numbers, booleans, text)."""
    import re

    # recorder_values._DTYPE's pattern, written out: this code is copied alone into mutants
    if not isinstance(text, str) or not re.match(r"[<>|=][biufcSU][0-9]{1,3}\Z", text):
        raise ValueError("not a plain dtype")
    return text


def _coh_sequence(tag, rest, guarded):
    """``["t"|"l"|"s"|"f", items]``: a tuple, list, set or frozenset (a set's items are hashed)."""
    if len(rest) != 1 or not isinstance(rest[0], list):
        raise _coh_malformed(tag)
    items = [_coh_value(e, guarded or tag in ("s", "f")) for e in rest[0]]
    return {"t": tuple, "l": list, "s": set, "f": frozenset}[tag](items)


def _coh_mapping(tag, rest, guarded):
    """``["d", [[key, value], ...]]``: a dict (its keys are hashed)."""
    if len(rest) != 1 or not isinstance(rest[0], list):
        raise _coh_malformed(tag)
    return {_coh_value(k, True): _coh_value(v, guarded) for k, v in rest[0]}


def _coh_bytes(tag, rest, guarded):
    """``["b", hex]``."""
    if len(rest) != 1 or not isinstance(rest[0], str):
        raise _coh_malformed(tag)
    return bytes.fromhex(rest[0])


def _coh_complex(tag, rest, guarded):
    """``["c", real, imag]``."""
    if len(rest) != 2 or not all(type(p) in (int, float) for p in rest):
        raise _coh_malformed(tag)
    return complex(rest[0], rest[1])


def _coh_range(tag, rest, guarded):
    """``["r", start, stop, step]``."""
    if len(rest) != 3 or not all(type(p) is int for p in rest):
        raise _coh_malformed(tag)
    return range(*rest)


def _coh_array(tag, rest, guarded):
    """``["a", dtype, shape, items]`` a numpy array, ``["n", dtype, item]`` a numpy scalar, ``["a", dtype, shape,
    items, class, attributes]`` an array of the package's own array class (a view, then its attributes)."""
    if (tag, len(rest)) not in (("a", 3), ("a", 5), ("n", 2)):
        raise _coh_malformed(tag)
    if guarded and len(rest) == 5:  # an array of the package's class: its hash reads its attributes
        raise ValueError("an array with attributes where decoding would run its code")
    _coh_dtype(rest[0])
    import numpy

    items = _coh_value(rest[1] if tag == "n" else rest[2])
    if not _coh_plain(items):
        raise ValueError("an array of plain items only")
    if tag == "n":
        return numpy.dtype(rest[0]).type(items)
    if not isinstance(rest[1], list) or not all(type(n) is int and n >= 0 for n in rest[1]):
        raise ValueError("malformed shape")
    base = numpy.array(items, dtype=numpy.dtype(rest[0])).reshape(rest[1])
    if len(rest) == 3:
        return base
    cls, state = _coh_value(rest[3]), _coh_value(rest[4])
    if not (isinstance(cls, type) and issubclass(cls, numpy.ndarray) and isinstance(state, dict)
            and all(isinstance(k, str) and k.isidentifier() for k in state)):
        raise ValueError("not an array class of the package")
    made = base.view(cls)
    made.__dict__.update(state)
    return made


def _coh_ufunc(tag, rest, guarded):
    """``["u", name]``: a numpy ufunc."""
    if len(rest) != 1 or not isinstance(rest[0], str) or not rest[0].isidentifier() or rest[0].startswith("_"):
        raise _coh_malformed(tag)
    import numpy

    func = getattr(numpy, rest[0], None)
    if not isinstance(func, numpy.ufunc):
        raise ValueError("not a numpy ufunc")
    return func


def _coh_numpy_dtype(tag, rest, guarded):
    """``["D", dtype]``: a numpy dtype (a plain one, or the object dtype)."""
    if len(rest) != 1:
        raise _coh_malformed(tag)
    import numpy

    return numpy.dtype("O" if rest[0] == "|O" else _coh_dtype(rest[0]))


def _coh_type(tag, rest, guarded):
    """``["y", "builtins"|"numpy", name]``: a type of either."""
    if len(rest) != 2 or rest[0] not in ("builtins", "numpy") or not isinstance(rest[1], str) \
            or not rest[1].isidentifier() or rest[1].startswith("_"):
        raise _coh_malformed(tag)
    import builtins
    import importlib

    found = getattr(builtins if rest[0] == "builtins" else importlib.import_module("numpy"), rest[1], None)
    if not isinstance(found, type):
        raise ValueError("not a type")
    return found


def _coh_function(tag, rest, guarded):
    """``["F", package, module, qualname]``: a function of the package (or of numpy's namespace), not called;
    looked up in namespaces (a module's, a class's), never by getattr: no descriptor, class property or module
    ``__getattr__`` runs."""
    if len(rest) != 3 or not all(isinstance(p, str) for p in rest):
        raise _coh_malformed(tag)
    import importlib
    import types

    package, module, name = rest
    parts = name.split(".")
    if not all(p.isidentifier() and not p.startswith("__") for p in parts):
        raise ValueError("not a function's name")
    if package == module == "numpy" and len(parts) == 1 and not name.startswith("_"):
        found = vars(importlib.import_module("numpy")).get(name)
        ok = callable(found) and not isinstance(found, type)
    elif _coh_allowed(module, package):
        found = importlib.import_module(module)
        for part in parts:
            found = vars(found).get(part) if isinstance(found, (types.ModuleType, type)) else None
            found = found.__func__ if isinstance(found, staticmethod) else found
        ok = isinstance(found, (types.FunctionType, types.BuiltinFunctionType)) and _coh_own(found, package)
    else:
        raise ValueError(f"function {name!r} outside the package")
    if not ok:
        raise ValueError(f"{name!r} is not a function of {package!r}")
    return found


def _coh_pandas_index(tag, rest, guarded):
    """``["P", class, dtype, items, name]``: a pandas index of plain items (a ``RangeIndex`` by its bounds)."""
    if len(rest) != 4 or rest[0] not in ("Index", "RangeIndex", "Int64Index", "UInt64Index", "Float64Index"):
        raise _coh_malformed(tag)
    import importlib

    pandas = importlib.import_module("pandas")
    items, name = _coh_value(rest[2]), _coh_value(rest[3], True)
    if not isinstance(items, list):
        raise ValueError("not a pandas index")
    if rest[0] == "RangeIndex":
        if len(items) != 3 or not all(type(i) is int for i in items):
            raise ValueError("malformed range")
        return pandas.RangeIndex(*items, name=name)
    if not _coh_plain(items):
        raise ValueError("an index of plain items only")
    # text (objects, pandas 3's "str"): the plain items checked above
    kind = object if rest[1] == "|O" else rest[1] if rest[1] in ("str", "string") else _coh_dtype(rest[1])
    made = pandas.Index(items, dtype=kind, name=name)  # Int64Index before pandas 2, no warning
    if type(made).__name__ != rest[0]:
        raise ValueError(f"not a pandas {rest[0]}")
    return made


def _coh_ast_node(tag, rest, guarded):
    """``["A", class, [[field, value], ...]]``: a node of Python's ``ast``, made by its C constructor (which
    stores the fields and runs no other code)."""
    if len(rest) != 2 or not isinstance(rest[0], str) or not isinstance(rest[1], list):
        raise _coh_malformed(tag)
    import ast

    cls = vars(ast).get(rest[0]) if rest[0].isidentifier() and not rest[0].startswith("_") else None
    if not (isinstance(cls, type) and issubclass(cls, ast.AST)):
        raise ValueError("not a node class of ast")
    fields = {}
    for pair in rest[1]:  # only the class's own fields and positions
        if not (isinstance(pair, list) and len(pair) == 2 and pair[0] in (*cls._fields, *cls._attributes)):
            raise ValueError("not a field of the node")
        fields[pair[0]] = _coh_value(pair[1], guarded)
    return cls(**fields)


def _coh_object(tag, rest, guarded):
    """``["O", class, [[name, value], ...]]``: an object of a package class by its state, made by
    ``object.__new__`` and its attributes written through their slots or into its ``__dict__``;
    ``["O", class, attributes, ["d" | "l", items]]`` a subclass of ``dict`` or ``list``, filled by the
    built-in's own ``update`` or ``extend``. No code of the class runs."""
    if not (len(rest) in (2, 3) and isinstance(rest[0], list) and len(rest[0]) == 4 and rest[0][0] == "o"
            and isinstance(rest[0][3], str) and rest[0][3].isidentifier() and isinstance(rest[1], list)):
        raise _coh_malformed(tag)  # a class by its name, never a call
    if guarded:
        raise ValueError("an object rebuilt from its state where decoding would run its code")
    cls = _coh_value(rest[0])
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
    _coh_set_attributes(made, cls, rest[1])
    # by the container named above, never isinstance(made, ...): that reads made.__class__, which a class may
    # compute from the state just written (werkzeug's LocalProxy)
    if container is dict:
        dict.update(made, _coh_value(rest[2]))  # keys hashed while decoded
    elif container is list:
        list.extend(made, _coh_value(rest[2]))
    return made


def _coh_set_attributes(made, cls, pairs):
    """Each ``[name, value]`` of ``pairs`` set on ``made``: through its slot, else into its ``__dict__`` (no
    ``__setattr__``, no property runs)."""
    import types

    holder = next((k.__dict__["__dict__"] for k in cls.__mro__ if "__dict__" in k.__dict__), None)
    own_dict = holder.__get__(made) if type(holder) is types.GetSetDescriptorType else None
    for pair in pairs:
        if not (isinstance(pair, list) and len(pair) == 2 and isinstance(pair[0], str)
                and pair[0].isidentifier() and not pair[0].startswith("__")):
            raise ValueError("malformed attribute")
        name = pair[0]
        found = next((k.__dict__[name] for k in cls.__mro__ if name in k.__dict__), None)
        if type(found) is types.MemberDescriptorType:
            found.__set__(made, _coh_value(pair[1]))
        elif callable(found) or hasattr(type(found), "__get__") or not isinstance(own_dict, dict):
            # it would hide a method or a descriptor of the class (``__eq__`` calling ``self._key()`` would call
            # what the encoding chose), or there is no instance dict to write into
            raise ValueError(f"attribute {name!r} would hide what the class defines")
        else:
            own_dict[name] = _coh_value(pair[1])


def _coh_exception(tag, rest, guarded):
    """``["e", package, module, name, args]``: an exception, a built-in one, the package's, or the standard
    library's (``package`` ``"<stdlib>"``: its module imported already, decoding imports nothing for it)."""
    if len(rest) != 4 or not all(isinstance(p, str) for p in rest[:3]):
        raise _coh_malformed(tag)
    import builtins
    import importlib
    import os
    import sys

    package, module, name, args = rest
    if package == "<stdlib>":  # only a module already imported; ``recorder_values._stdlib``'s test, written out
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
            getattr(importlib.import_module(module), name, None) if _coh_allowed(module, package) else None
    if not (isinstance(cls, type) and issubclass(cls, BaseException)):
        raise ValueError("not an exception class")
    return cls(*_coh_value(args, True))


def _coh_structural(tag, rest, guarded):
    """``["o", package, {name: module}, text]``: an object of the package by its structural representation,
    read with ``ast``."""
    if len(rest) != 3 or not isinstance(rest[0], str) or not isinstance(rest[1], dict) \
            or not isinstance(rest[2], str):
        raise _coh_malformed(tag)
    import ast

    return _coh_node(ast.parse(rest[2], mode="eval").body, rest[0], rest[1])


def _coh_node(tree, package, names):
    """The value of one node of a structural representation: literals, the package's names, calls of its
    classes."""
    import ast
    import importlib

    if not any(isinstance(n, (ast.Name, ast.Call)) for n in ast.walk(tree)):
        return ast.literal_eval(tree)  # literals only (every Python version's literal nodes)
    if isinstance(tree, (ast.Tuple, ast.List)):
        items = [_coh_node(e, package, names) for e in tree.elts]
        return tuple(items) if isinstance(tree, ast.Tuple) else items
    if isinstance(tree, ast.Dict) and None not in tree.keys:
        return {_coh_node(k, package, names): _coh_node(tree.values[i], package, names)
                for i, k in enumerate(tree.keys)}
    if isinstance(tree, ast.Name):
        module = names.get(tree.id)
        if tree.id.startswith("__") or not _coh_allowed(module, package):
            raise ValueError(f"name {tree.id!r} outside the package")
        obj = getattr(importlib.import_module(module), tree.id)
        if not _coh_own(obj, package):
            raise ValueError(f"{tree.id!r} is not the package's own")
        return obj
    if isinstance(tree, ast.Call) and isinstance(tree.func, (ast.Name, ast.Call)) \
            and not any(isinstance(a, ast.Starred) for a in tree.args) \
            and all(k.arg is not None for k in tree.keywords):
        func = _coh_node(tree.func, package, names)
        if not isinstance(func, type):
            raise ValueError("only classes are called")
        return func(*[_coh_node(a, package, names) for a in tree.args],
                    **{str(k.arg): _coh_node(k.value, package, names) for k in tree.keywords})
    raise ValueError(f"not a structural representation: {type(tree).__name__}")


_coh_readers = {
    "t": _coh_sequence, "l": _coh_sequence, "s": _coh_sequence, "f": _coh_sequence, "d": _coh_mapping,
    "b": _coh_bytes, "c": _coh_complex, "r": _coh_range, "a": _coh_array, "n": _coh_array, "u": _coh_ufunc,
    "D": _coh_numpy_dtype, "y": _coh_type, "F": _coh_function, "P": _coh_pandas_index, "A": _coh_ast_node,
    "O": _coh_object, "e": _coh_exception, "o": _coh_structural}
"""The reader of each encoding tag (its closing brace not at column 0: a mutant's folded diff takes the table as
one of the helpers)."""
