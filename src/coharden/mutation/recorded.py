"""The recorder's value shapes, usable outside the test interpreter, and records built by hand (examples).

The shape function lives in :mod:`coharden.mutation.recorder_plugin` (which runs in the test interpreter and
cannot import coharden); its source is read from that file, so a narrowed_scope mutant and the recorder
compute the same shape with the same code.
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path
from typing import Any

from coharden import pysource
from coharden.mutation.recorder_values import encoded

SHAPE_FUNCTION = "_coh_shape"


@cache
def shape_source() -> str:
    """Source of the recorder's shape function (a module-level ``def``)."""
    text = Path(__file__).with_name("recorder_plugin.py").read_text()
    for node in pysource.parse(text).body:
        if isinstance(node, ast.FunctionDef) and node.name == SHAPE_FUNCTION:
            segment = ast.get_source_segment(text, node)
            if segment:
                return segment + "\n"
    raise RuntimeError(f"recorder_plugin.py lacks {SHAPE_FUNCTION}")  # pragma: no cover - a packaging error


def shape_of(value: Any, level: str = "shape") -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(shape_source(), "recorder_plugin.py", "exec"), namespace)  # noqa: S102 - our own source
    return namespace[SHAPE_FUNCTION](value, level)


def _encoded(value: Any, root: str | None) -> str:
    """The recorder's encoding of ``value`` (plain data; with ``root``, objects of classes defined there)."""
    with pysource.parsing():  # encoded parses structural reprs with ast (and decodes to check): one thread at a time
        return encoded(value, root)[1]


def example_record(qualname: str, params: list[str], args: tuple, kind: str, value: Any, *,
                   path: str = "m.py", self_shape: tuple = (), receiver: Any = None,
                   root: str | None = None) -> dict[str, Any]:
    """A fixed-code record as the recorder writes it (``args`` without ``self``; ``self_shape`` prepends the
    shapes of ``self`` for a method; ``receiver`` is a method's recorded ``self``; ``root``: the directory
    whose classes' objects may be encoded, plain values only without it)."""
    every = (*self_shape, *args) if receiver is None else (receiver, *args)
    rec: dict[str, Any] = {"path": path, "qualname": qualname, "params": params, "key": repr(args),
                           "args_enc": _encoded(args, root), "kind": kind, "value_enc": _encoded(value, root),
                           "value_repr": repr(value), "type_shape": repr(shape_of(every, "type")),
                           "shape": repr(shape_of(every, "shape"))}
    if receiver is not None:
        rec.update(receiver="self", receiver_key=repr(receiver), receiver_enc=_encoded(receiver, root))
    if kind == "raise":
        rec["exc_type"] = type(value).__name__
    return rec


def example_caller(qualname: str, params: list[str], args: tuple, kind: str, value: Any, *, callee: str,
                   path: str = "m.py", depth: int = 1) -> dict[str, Any]:
    """A caller record as the recorder writes it."""
    rec = example_record(qualname, params, args, kind, value, path=path)
    return {**rec, "kind": "caller", "outcome": kind, "callee": callee, "depth": depth, "line": 0}
