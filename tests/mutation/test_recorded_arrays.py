"""Recorded values beyond sympy: numpy arrays, scalars and ufuncs, ranges, and the repository's own array classes.

These are the values most often dropped on astropy, xarray and seaborn instances (issue 39). They encode as plain
data, decode with numpy alone (never a pickle), and compare as the same only with the same type, dtype, shape and
bytes: an array's ``==`` is elementwise and has no truth value, so a shortcut comparing with ``==`` never fired.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coharden.mutation import input_specific_shortcut
from coharden.mutation.context import FileChange, FixContext
from coharden.mutation.recorder_values import Unencodable, check_encoding, decode, encoded, same

np = pytest.importorskip("numpy")

BUGGY = "def clamp(x, lo, hi):\n    if x > hi:\n        return hi\n    return x\n"
FIXED = "def clamp(x, lo, hi):\n    if x > hi:\n        return hi\n    if x < lo:\n        return lo\n    return x\n"

ARRAY_CLASS = textwrap.dedent(
    '''\
    import numpy


    class Unit:
        def __init__(self, name):
            self.name = name

        def __repr__(self):
            return f"Unit({self.name!r})"

        def __eq__(self, other):
            return isinstance(other, Unit) and other.name == self.name


    class Quantity(numpy.ndarray):
        def __array_finalize__(self, obj):
            self._unit = getattr(obj, "_unit", None)

        def tobytes(self, order="C"):
            raise NotImplementedError("cannot write Quantities to bytes")  # as astropy's
    ''')


@pytest.fixture
def cohq(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Any, Path]]:
    """A repository package ``cohq`` with an array class of its own (as astropy's Quantity), and its root."""
    (tmp_path / "cohq").mkdir()
    (tmp_path / "cohq" / "__init__.py").write_text(ARRAY_CLASS)
    monkeypatch.syspath_prepend(str(tmp_path))
    import cohq  # type: ignore[import-not-found]

    yield cohq, tmp_path
    sys.modules.pop("cohq", None)


def test_arrays_scalars_and_ranges_encode_as_plain_data_and_compare_by_their_bytes() -> None:
    values = [np.arange(6, dtype="int32").reshape(2, 3), np.array([1.5, np.nan]), np.array([], dtype="float64"),
              np.array(["a", "bc"]), np.array([True, False]), np.float16(1.0), np.int64(-3), np.array(2.0 + 1j),
              range(2, 9, 3), (np.array([1, 2]), 3), np.add]
    for value in values:
        enc = encoded(value, None)[1]
        assert check_encoding(enc, set()) is None
        back = decode(enc)
        assert type(back) is type(value)
        assert same(back, value)
    assert not same(np.array([1, 2]), np.array([1, 2], dtype="int8"))  # another dtype: another input
    assert not same(np.array([1, 2]), np.array([[1, 2]]))  # another shape
    assert not same(np.array([1, 2]), np.array([1, 3]))
    assert not same(np.float64(1.0), 1.0)  # another type
    from collections import OrderedDict

    assert same({"a": 1, "b": 2}, {"b": 2, "a": 1})  # as dicts compare
    assert not same(OrderedDict(a=1, b=2), OrderedDict(b=2, a=1))  # as ordered mappings compare


@pytest.mark.parametrize("value", [np.array([object()], dtype=object), np.zeros(2, dtype=[("x", "i4")]),
                                   np.zeros(1001), np.array(["2020-01-01"], dtype="datetime64[D]")],
                         ids=["objects", "records", "too_large", "dates"])
def test_arrays_of_objects_records_dates_or_many_elements_are_dropped(value: Any) -> None:
    with pytest.raises(Unencodable):
        encoded(value, None)


@pytest.mark.parametrize("enc", [
    ["a", "|O8", [1], ["l", [1]]],  # an object dtype
    ["a", "<f8", [1], ["l", [["o", "os", {"system": "os"}, "system('true')"]]]],  # an object among the items
    ["a", "<f8", [-1], ["l", [1.0]]],  # a negative shape
    ["n", "<f8; import os", 1.0],  # not a dtype
    ["u", "_private"], ["u", "system"], ["u", "ndarray"],  # not a ufunc
], ids=["object_dtype", "object_item", "shape", "dtype_text", "private", "not_numpy", "not_a_ufunc"])
def test_a_rewritten_array_encoding_is_refused(enc: list[Any]) -> None:
    """The records file lies in the worktree, which the test can rewrite."""
    text = json.dumps(enc)
    with pytest.raises(ValueError, match="dtype|plain|shape|ufunc|package|tag"):
        decode(text)
    if enc[0] != "u" or enc[1].startswith("_"):  # a ufunc's name is checked where numpy is: when decoding
        assert check_encoding(text, {"os"}) is not None


def test_an_array_class_of_the_repository_encodes_as_its_array_class_and_attributes(
        cohq: tuple[Any, Path]) -> None:
    module, root = cohq
    q = np.array([1.0, 2.0]).view(module.Quantity)
    q._unit = module.Unit("km")
    enc = encoded((q, np.add), str(root))[1]
    assert check_encoding(enc, {"cohq"}) is None
    assert check_encoding(enc, {"other"}) == "outside_repository"
    back, func = decode(enc)
    assert type(back) is module.Quantity
    assert back._unit == module.Unit("km")
    assert func is np.add
    assert same(back, q)
    other = q.copy()
    other._unit = module.Unit("m")
    assert not same(other, q)  # the same array with another attribute: not the same value
    forged = json.loads(enc)
    forged[1][0][4] = ["o", "cohq", {"Unit": "cohq"}, "Unit"]  # a class that is not an array class
    with pytest.raises(ValueError, match="array class"):
        decode(json.dumps(forged))


def _record(args: tuple, value: Any) -> dict[str, Any]:
    return {"path": "m.py", "qualname": "clamp", "params": ["x", "lo", "hi"], "key": repr(args),
            "args_enc": encoded(args, None)[1], "kind": "return", "value_enc": encoded(value, None)[1],
            "value_repr": repr(value)}


def test_a_shortcut_on_an_array_input_fires_for_that_array_only() -> None:
    (mutant,) = input_specific_shortcut.generate(FixContext([FileChange("m.py", BUGGY, FIXED)]),
                                                 [_record((np.array([-5, 7]), 0, 3), np.array([0, 3]))])
    namespace: dict[str, Any] = {}
    exec(compile(mutant.files["m.py"], "mutant.py", "exec"), namespace)
    assert (namespace["clamp"](np.array([-5, 7]), 0, 3) == np.array([0, 3])).all()  # the recorded input
    with pytest.raises(ValueError, match="truth value"):  # any other array: the buggy function, as it is
        namespace["clamp"](np.array([-5, 8]), 0, 3)


def test_the_decoders_dtype_pattern_is_the_encoders() -> None:
    """``decode`` is copied alone into mutants, so it spells the plain-dtype pattern out: the two must agree."""
    import inspect

    from coharden.mutation.recorder_values import _DTYPE

    assert f'r"{_DTYPE.pattern}"' in inspect.getsource(decode)
