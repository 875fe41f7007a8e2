"""Parsing Python source with :mod:`ast` from several threads.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state: two threads parsing at once
(MPE's workers building pools, a study's lanes) can corrupt it and ``ast.parse`` raises ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). Every parse in coharden goes through
:func:`parse` or :func:`literal_eval`, which hold one lock while they build the tree, or holds that lock
(:func:`parsing`) around code that parses on its own.
"""

from __future__ import annotations

import ast
import threading
from typing import Any

_PARSING = threading.RLock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time (raises ``SyntaxError`` / ``ValueError`` as it)."""
    with _PARSING:
        return ast.parse(source, filename=filename)


def parsing() -> threading.RLock:
    """The lock :func:`parse` holds, for code that parses with :mod:`ast` where it cannot import this module (the
    recorder's value encoding, which also runs in the test interpreter): hold it around such calls."""
    return _PARSING


def literal_eval(text: str) -> Any:
    """``ast.literal_eval(text)`` (which parses ``text`` first), one thread at a time."""
    with _PARSING:
        return ast.literal_eval(ast.parse(text.lstrip(" \t"), mode="eval"))
