"""The value helpers an input-based mutant carries: their names there, and their source to append.

An input-based mutant (``input_specific_shortcut``, ``caller_patch``, ...) compares a call's arguments with the
recorded ones, so the module it mutates gets coharden's decoder (:mod:`coharden.mutation.recorder_decode`) and
comparison (:mod:`coharden.mutation.recorder_same`) appended, verbatim, under names that start with ``_coh_``
(:data:`PREFIX`: a mutant's folded diff, :mod:`coharden.mutation.diff_view`, folds what bears it).
"""

from __future__ import annotations

import ast
import inspect
from collections.abc import Callable

from coharden.mutation import recorder_decode
from coharden.mutation.recorder_decode import decode
from coharden.mutation.recorder_same import attributes, same

DECODER = "_coh_decode"  # the decoder's name in a mutant's module
SAME = "_coh_same"  # the comparison's name in a mutant's module
ATTRS = "_coh_attrs"  # the name, in a mutant's module, of the state reader ``same`` compares objects by
PREFIX = "_coh_"  # every name the helpers have in a mutant's module

def decoder_source() -> str:
    """The source of :func:`~coharden.mutation.recorder_decode.decode`, ``same`` and ``attributes``, named
    ``_coh_decode``, ``_coh_same`` and ``_coh_attrs`` (each with a one-line docstring: the mutant's diff is read by
    people), then the decoder's readers and their table ``_coh_readers`` (every top-level ``_coh_`` definition of
    :mod:`~coharden.mutation.recorder_decode`, in its order), to append to a mutant's module."""
    source = inspect.getsource(recorder_decode)
    readers = [node for node in ast.parse(source).body
               if (isinstance(node, ast.FunctionDef) and node.name.startswith(PREFIX))
               or (isinstance(node, ast.Assign) and all(getattr(t, "id", "").startswith(PREFIX) for t in node.targets))]
    return "\n\n\n".join([
        _copied(decode, DECODER, "A value coharden recorded: plain data, or objects of this repository's own "
                "classes."),
        _copied(same, SAME, "Whether a call's value is the recorded one: the same type, arrays by their bytes."),
        _copied(attributes, ATTRS, "An object's slots and __dict__, read without running its code."),
        *(ast.get_source_segment(source, node) or "" for node in readers)])


def _copied(function: Callable[..., object], name: str, doc: str) -> str:
    source = inspect.getsource(function).replace(f"def {function.__name__}(", f"def {name}(", 1)
    tree = ast.parse(source).body[0]
    old = (ast.get_docstring(tree, clean=False) if isinstance(tree, ast.FunctionDef) else None) or ""
    return source.replace(f'"""{old}"""', f'"""{doc}"""', 1)


def decode_expr(enc: str) -> str:
    """An expression (in a module that has :func:`decoder_source` appended) for the value ``enc`` encodes."""
    return f"{DECODER}({enc!r})"
