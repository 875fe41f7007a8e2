"""What "the same" means for a recorded value: the comparison mutants make with one, copied into them.

:func:`same` (``_coh_same`` in a mutant) compares a call's value with a recorded one, and :func:`attributes`
(``_coh_attrs``) reads an object's state for it without running any of the object's code. The encoder
(:mod:`coharden.mutation.recorder_values`) keeps a value only when its decoding is the same by this comparison,
and an input-based mutant takes its shortcut only for a call whose arguments are. Both are appended verbatim to
a mutant's module (``coharden.mutation.value_helpers``): standard library only, Python 3.7+, and they run in the
test interpreter too, beside the recorder plugin.
"""

from __future__ import annotations

from typing import Any


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
