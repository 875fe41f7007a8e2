"""Parsing Python source with :mod:`ast` from several threads.

CPython 3.11 keeps the AST constructor's recursion depth in per-interpreter state: two threads parsing at once
(MPE's workers building pools, a study's lanes) can corrupt it and ``ast.parse`` raises ``SystemError: AST
constructor recursion depth mismatch`` (python/cpython#106905). Every parse in coharden goes through
:func:`parse`, which holds one lock while it builds the tree.
"""

from __future__ import annotations

import ast
import threading

_PARSING = threading.Lock()


def parse(source: str | bytes, filename: str = "<unknown>") -> ast.Module:
    """``ast.parse(source, filename)``, one thread at a time (raises ``SyntaxError`` / ``ValueError`` as it)."""
    with _PARSING:
        return ast.parse(source, filename=filename)
