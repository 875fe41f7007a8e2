"""Recorded objects with no structural repr, by their state; types, dtypes, functions and pandas indexes by name.

After numpy arrays, the values most often dropped on xarray, astropy, sphinx and pytest instances were objects of
the repository whose repr is not a constructor call (``<xarray.DataArray ...>``) or holds an address, and which
compare by identity (``DataArrayWeighted``) or elementwise (``DataArray``): issue 39. They are encoded by their
class and attributes and rebuilt without running any of the class's code; a rewritten encoding (the records file
lies in the worktree a test can rewrite) that names anything else, or would run code, is refused.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coharden.mutation.recorder_values import MAX_NODES, Unencodable, attributes, check_encoding, decode, encoded, same

PACKAGE = textwrap.dedent(
    '''\
    import threading

    made = []  # constructors that ran


    class Slotted:
        __slots__ = ("dims", "__data", "__weakref__")

        def __init__(self, dims, data):
            made.append("Slotted")
            self.dims, self.__data = dims, data

        def __eq__(self, other):  # elementwise, as a DataArray's: no truth value
            return [a == b for a, b in zip(self.__data, other.__data)]

        def data(self):
            return self.__data


    class Holder:
        """Compared by identity; printing it has a side effect (a Django QuerySet fetches its rows)."""

        printed = 0

        def __init__(self, item, name):
            made.append("Holder")
            self.item, self.name = item, name

        def __repr__(self):
            Holder.printed += 1
            return "<Holder>"


    class Guarded:
        def __init__(self):
            self._x = 1

        @property
        def x(self):
            return self._x

        @x.setter
        def x(self, value):
            made.append("setter")


    class Own:
        def __new__(cls):
            made.append("__new__")
            return super().__new__(cls)


    class Locked:
        def __init__(self):
            self.lock = threading.Lock()


    class Chain:
        def __init__(self, rest):
            self.rest = rest


    class Key:
        def __init__(self, key):
            self.key = key

        def __hash__(self):
            made.append("__hash__")
            return hash(self.key)

        def __eq__(self, other):
            return self.key == other.key

        def name(self):
            return "key"


    class Tok(str):
        pass


    class Headers(dict):
        """A dict subclass with a cache beside its items (requests' CaseInsensitiveDict)."""

        def __init__(self, *args):
            made.append("Headers")
            super().__init__(*args)
            self._lower = None

        def __setitem__(self, key, value):
            made.append("__setitem__")
            dict.__setitem__(self, key, value)

        def update(self, *args):
            made.append("update")

        def items(self):
            made.append("items")
            return []


    class Stack(list):
        def extend(self, items):
            made.append("extend")


    class Proxy:
        \"\"\"werkzeug's LocalProxy: ``__class__`` calls a function its state holds (isinstance reads it).\"\"\"

        __slots__ = ("_get_current_object",)

        @property
        def __class__(self):
            return type(self._get_current_object())


    class OwnDict(dict):
        def __new__(cls, *args):
            made.append("__new__")
            return super().__new__(cls)


    def helper(x):
        made.append("helper")
        return x


    class LazySetting:
        def __get__(self, obj, cls):
            made.append("descriptor")
            return helper


    class Conf:
        settings = LazySetting()


    def __getattr__(name):
        made.append("module __getattr__")
        return helper
    ''')


@pytest.fixture
def cohs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, str]]:
    (tmp_path / "cohs").mkdir()
    (tmp_path / "cohs" / "__init__.py").write_text(PACKAGE)
    monkeypatch.syspath_prepend(str(tmp_path))
    import cohs  # type: ignore[import-not-found]

    yield cohs, str(tmp_path)
    sys.modules.pop("cohs", None)


def test_objects_are_encoded_by_their_state_and_rebuilt_without_their_code(cohs: tuple[Any, str]) -> None:
    module, root = cohs
    value = module.Holder(module.Slotted(("x",), [1, 2]), "h")
    module.made.clear()
    key, enc = encoded(value, root)
    assert module.Holder.printed == 0  # compared by identity: never printed, named by its encoding's digest
    assert key.startswith("<Holder state ")
    assert check_encoding(enc, {"cohs"}) is None
    assert check_encoding(enc, {"other"}) == "outside_repository"
    back = decode(enc)
    assert module.made == []  # no constructor ran
    assert type(back) is module.Holder
    assert type(back.item) is module.Slotted
    assert back.item.data() == [1, 2]  # a private slot, by its mangled name
    assert same(back, value)
    assert encoded(module.Holder(module.Slotted(("x",), [1, 2]), "h"), root)[0] == key  # the same state: the same key
    other = module.Holder(module.Slotted(("x",), [1, 3]), "h")
    assert not same(other, value)  # elementwise == has no truth value: by the attributes, which differ
    assert attributes(value) == {"item": value.item, "name": "h"}


def test_types_dtypes_functions_and_pandas_indexes_encode_by_name(cohs: tuple[Any, str]) -> None:
    np = pytest.importorskip("numpy")
    pd = pytest.importorskip("pandas")
    module, root = cohs
    values = [float, np.float64, np.dtype("int32"), np.mean, module.helper, pd.Index([1, 2], name="x"),
              pd.RangeIndex(2, 9, 3), pd.Index([0.5]), pd.Index(["a", "b"]), np.dtype("O")]  # text: the object dtype
    for value in values:
        enc = encoded(value, root)[1]
        assert check_encoding(enc, {"cohs"}) is None, enc
        back = decode(enc)
        assert type(back) is type(value)
        assert same(back, value), enc
    assert decode(encoded(module.helper, root)[1]) is module.helper
    assert not same(pd.Index([1, 2], name="x"), pd.Index([1, 2], name="y"))
    assert not same(pd.Index([1, 2]), pd.Index([1.0, 2.0]))
    with pytest.raises(Unencodable, match="function_outside_repository"):
        encoded(lambda x: x, root)  # a test's lambda: no name gives it back
    with pytest.raises(Unencodable, match="array_dtype"):
        encoded(pd.Index([module.Chain(None)]), root)  # objects in an index: only plain text and numbers


@pytest.mark.parametrize(("build", "reason"), [
    (lambda m: m.Locked(), "type_outside_repository"),  # a lock has no encoding
    (lambda m: m.Own(), "no_state"),  # a __new__ of its own would run on decoding
], ids=["lock", "own_new"])
def test_objects_whose_state_cannot_be_rebuilt_safely_are_dropped(cohs: tuple[Any, str], build: Any,
                                                                  reason: str) -> None:
    module, root = cohs
    with pytest.raises(Unencodable, match=reason):
        encoded(build(module), root)


def test_a_dropped_object_names_the_attribute_and_type_that_have_no_encoding(cohs: tuple[Any, str]) -> None:
    """A pytest fixture is dropped for the lock its handler holds: the reason says where, not only the outer
    type, so that a user sees what to teach the encoder."""
    module, root = cohs
    with pytest.raises(Unencodable, match="type_outside_repository") as caught:
        encoded(module.Holder(module.Chain(module.Locked()), "h"), root)
    path, kind = caught.value.where()
    assert path == ".item.rest.lock"
    assert kind.endswith(".lock")  # _thread.lock
    assert "thread" in kind
    with pytest.raises(Unencodable) as top:
        encoded(module.Locked().lock, root)
    assert top.value.where()[0] == ""  # the value itself


def test_an_object_reaching_too_many_others_is_given_up_early(cohs: tuple[Any, str]) -> None:
    module, root = cohs
    with pytest.raises(Unencodable, match="too_large"):
        encoded(module.Chain([module.Chain(None) for _ in range(MAX_NODES)]), root)
    assert len(decode(encoded([0] * (MAX_NODES + 1), root)[1])) == MAX_NODES + 1  # plain items are not counted


def test_identity_compared_objects_inside_arguments_are_never_printed(cohs: tuple[Any, str]) -> None:
    module, root = cohs
    key, _ = encoded((module.Holder(1, "a"), 2), root)
    other, _ = encoded((module.Holder(1, "b"), 2), root)
    assert module.Holder.printed == 0
    assert key.startswith("<tuple state ")
    assert key != other  # the same repr ("<Holder>"), another state: another input


def test_a_subclass_of_a_builtin_is_compared_by_its_value_not_its_empty_attributes(cohs: tuple[Any, str]) -> None:
    module, _ = cohs
    assert not same(module.Tok("a"), module.Tok("b"))
    assert same(module.Tok("a"), module.Tok("a"))


def test_a_subclass_of_dict_or_list_is_rebuilt_with_its_items_and_attributes_by_builtin_code_only(
        cohs: tuple[Any, str]) -> None:
    """Its repr reads as a plain dict or list, which decodes to another type: it is encoded by its state and its
    items, read and put back through the built-in's own methods (never the class's overrides)."""
    module, root = cohs
    headers = module.Headers({"Content-Length": "0"})
    headers._lower = {"content-length": "Content-Length"}
    stack = module.Stack([1, module.Headers({"a": 1})])
    for value in (headers, stack):
        module.made.clear()
        enc = encoded(value, root)[1]
        assert module.made == []  # read without the class's items(), update() or extend()
        assert check_encoding(enc, {"cohs"}) is None
        assert check_encoding(enc, {"other"}) == "outside_repository"
        back = decode(enc)
        assert module.made == []  # no constructor, __setitem__, update or extend of the class ran
        assert type(back) is type(value)
        assert same(back, value)
    back = decode(encoded(headers, root)[1])
    assert dict.copy(back) == {"Content-Length": "0"}
    assert back._lower == {"content-length": "Content-Length"}
    assert not same(back, module.Headers({"Content-Length": "1"}))
    with pytest.raises(Unencodable, match="no_state"):
        encoded(module.OwnDict(), root)  # a __new__ of its own would run on decoding


def test_an_exception_of_the_standard_library_is_encoded_by_its_module_and_name(cohs: tuple[Any, str]) -> None:
    """pylint-8898's buggy code raises ``argparse.ArgumentTypeError``: neither a built-in exception nor the
    repository's. Decoding takes the class from its module only when that is imported already."""
    import argparse
    import json as json_module

    _, root = cohs
    value = argparse.ArgumentTypeError("bad pattern")
    enc = encoded(value, root)[1]
    assert json.loads(enc)[:4] == ["e", "<stdlib>", "argparse", "ArgumentTypeError"]
    assert check_encoding(enc, {"cohs"}) is None  # no repository module to look for
    back = decode(enc)
    assert type(back) is argparse.ArgumentTypeError
    assert same(back, value)
    with pytest.raises(Unencodable, match="refused_by_decoder"):  # its constructor does not take back its args
        encoded(json_module.JSONDecodeError("bad", "doc", 0), root)


@pytest.mark.parametrize("enc", [
    ["e", "<stdlib>", "os", "system", ["t", []]],  # not an exception class
    ["e", "<stdlib>", "antigravity", "Error", ["t", []]],  # a module not imported: decoding imports nothing
    ["e", "<stdlib>", "cohs", "Key", ["t", []]],  # the repository's module named as the standard library's
], ids=["function", "not_imported", "not_stdlib"])
def test_a_forged_standard_library_exception_is_refused(cohs: tuple[Any, str], enc: list[Any]) -> None:
    module, _ = cohs
    module.made.clear()
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies with what is refused
        decode(json.dumps(enc))
    assert "antigravity" not in sys.modules
    assert module.made == []
    if enc[2] == "cohs":
        assert check_encoding(json.dumps(enc), {"cohs"}) == "outside_repository"


def test_decoding_and_comparing_never_read_a_class_computed_from_the_state(cohs: tuple[Any, str]) -> None:
    """A forged state may name a function of the package in a slot that a ``__class__`` property calls (review of
    issue 39): neither decoding nor ``same`` may call it (``isinstance`` reads ``__class__``)."""
    module, _ = cohs
    text = json.dumps(["O", ["o", "cohs", {"Proxy": "cohs"}, "Proxy"],
                       [["_get_current_object", ["F", "cohs", "cohs", "helper"]]]])
    module.made.clear()
    one, other = decode(text), decode(text)
    assert same(one, other)
    assert module.made == []


def test_ordered_mappings_compare_in_their_own_order() -> None:
    from collections import OrderedDict

    moved = OrderedDict(x=1, y=2)
    moved.move_to_end("x")
    assert same(moved, OrderedDict(y=2, x=1))
    assert not same(moved, OrderedDict(x=1, y=2))


def test_an_array_with_attributes_is_refused_where_decoding_hashes() -> None:
    """astropy's Quantity hashes its unit: an array of the package's class may not stand in a set, a key or an
    exception's arguments, where decoding runs that hash on a chosen state."""
    array = ["a", "<f8", [], 1.0, ["o", "cohs", {"Holder": "cohs"}, "Holder"], ["d", []]]
    for enc in (["s", [array]], ["d", [[array, 1]]]):
        assert check_encoding(json.dumps(enc), {"cohs"}) == "object_where_code_runs"
        with pytest.raises(ValueError, match="array with attributes"):
            decode(json.dumps(enc))


def _holder(attrs: list[list[Any]], cls: str = "Holder") -> list[Any]:
    return ["O", ["o", "cohs", {cls: "cohs"}, cls], attrs]


@pytest.mark.parametrize("enc", [
    _holder([["__class__", ["o", "cohs", {"Own": "cohs"}, "Own"]]]),  # a dunder attribute
    _holder([["a b", 1]]),  # not a name
    _holder([], "Own"),  # a class whose __new__ would run
    ["O", ["o", "cohs", {"Holder": "cohs"}, "Holder(1, 2)"], []],  # a call where a class belongs
    ["O", ["o", "os", {"system": "os"}, "system"], []],  # outside the package
    ["F", "cohs", "os", "system"], ["F", "os", "os", "system"], ["F", "numpy", "numpy", "_private"],
    ["y", "builtins", "eval"], ["y", "os", "system"],
    ["P", "Index", "|O8", ["l", [1]], None],  # an object dtype
    ["D", "|O8"],
    _holder([["name", ["F", "cohs", "cohs", "helper"]]], "Key"),  # hides a method: Key.name() would call helper
    _holder([["x", 5]], "Guarded"),  # hides a property
    ["s", [_holder([["key", 1]], "Key")]],  # a set item: decoding would run its __hash__ on a chosen state
    ["d", [[_holder([["key", 1]], "Key"), 1]]],  # a mapping's key, likewise
    ["P", "Index", "<i8", ["l", [1]], _holder([["key", 1]], "Key")],  # an index's name, likewise
    ["e", "builtins", "builtins", "ValueError", ["t", [_holder([["key", 1]], "Key")]]],  # a constructor's argument
    ["F", "cohs", "cohs", "Conf.settings"],  # a descriptor would run on lookup
    ["F", "cohs", "cohs", "missing"],  # the module's __getattr__ would run
    [*_holder([], "Headers"), ["l", [1]]],  # a dict subclass filled as a list
    [*_holder([], "Chain"), ["d", []]],  # items for a class that is no dict
    [*_holder([], "OwnDict"), ["d", []]],  # a dict subclass with a __new__ of its own
    [*_holder([], "Headers"), ["d", [[_holder([["key", 1]], "Key"), 1]]]],  # a key's __hash__ on a chosen state
    [*_holder([], "Headers"), ["s", []]],  # not items of a dict or list
], ids=["dunder", "not_a_name", "own_new", "call", "outside", "function_module", "function_package",
        "private_numpy", "not_a_type", "type_module", "object_index", "object_dtype", "hides_method",
        "hides_property", "set_item", "dict_key", "index_name", "exception_arg", "descriptor", "module_getattr",
        "dict_as_list", "items_of_no_container", "dict_own_new", "dict_subclass_key", "set_items"])
def test_a_rewritten_state_or_reference_encoding_is_refused(cohs: tuple[Any, str], enc: list[Any]) -> None:
    """The records file lies in the worktree, which the test can rewrite: what it names must stay the package's
    classes and functions, and rebuilding must run none of their code."""
    module, _ = cohs
    text = json.dumps(enc)
    module.made.clear()
    with pytest.raises(ValueError):  # noqa: PT011 - the message varies with what is refused
        decode(text)
    assert module.made == []  # no constructor, hash, setter, descriptor or function ran
    # what a name stands for (a type, a method, a __new__ of its own, a descriptor) is known only where it imports:
    # those forgeries pass the static check and are refused by the decoder alone
    known_only_on_import = {"eval", "Own", "Key", "Guarded", "Conf.settings", "missing", "Headers", "OwnDict",
                            "Chain"}
    named = {str(enc[-1])} | ({str(enc[1][-1])} if isinstance(enc[1], list) else set())
    if not known_only_on_import & named or enc[0] in ("s", "d", "P", "e"):
        assert check_encoding(text, {"cohs"}) is not None


@pytest.mark.skipif(sys.version_info < (3, 9), reason="ast's base class is a built-in type before Python 3.9")
def test_python_syntax_trees_encode_by_their_fields() -> None:
    import ast

    tree = ast.parse("def f(x: int) -> str:\n    return x + 1\n")
    enc = encoded(tree, None)[1]
    assert check_encoding(enc, set()) is None
    back = decode(enc)
    assert ast.dump(back, include_attributes=True) == ast.dump(tree, include_attributes=True)
    assert same(back, tree)
    assert not same(ast.parse("x + 2"), ast.parse("x + 1"))
    for forged in (["A", "Module", [["__class__", 1]]], ["A", "Module", [["spam", 1]]], ["A", "AST_", []],
                   ["A", "literal_eval", []]):
        with pytest.raises(ValueError):  # noqa: PT011 - the message varies with what is refused
            decode(json.dumps(forged))


def test_an_attribute_beside_a_plain_class_default_is_rebuilt(cohs: tuple[Any, str]) -> None:
    """An instance attribute may stand where the class has a plain default (``printed = 0``): only methods and
    descriptors may not be hidden."""
    module, root = cohs
    value = module.Holder(1, "a")
    value.printed = 3
    back = decode(encoded(value, root)[1])
    assert vars(back) == {"item": 1, "name": "a", "printed": 3}
