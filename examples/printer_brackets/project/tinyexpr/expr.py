"""Expression trees: symbols, integers and binary operations.

Python operators build trees, so ``a / (b * c)`` is ``Div(a, Mul(b, c))``.
"""

from __future__ import annotations

from dataclasses import dataclass


class Expr:
    """Base class of all expression nodes."""

    def __add__(self, other):
        return Add(self, as_expr(other))

    def __radd__(self, other):
        return Add(as_expr(other), self)

    def __sub__(self, other):
        return Sub(self, as_expr(other))

    def __rsub__(self, other):
        return Sub(as_expr(other), self)

    def __mul__(self, other):
        return Mul(self, as_expr(other))

    def __rmul__(self, other):
        return Mul(as_expr(other), self)

    def __truediv__(self, other):
        return Div(self, as_expr(other))

    def __rtruediv__(self, other):
        return Div(as_expr(other), self)

    def __pow__(self, other):
        return Pow(self, as_expr(other))

    def __str__(self):
        from .printer import sstr

        return sstr(self)


def as_expr(value):
    """Turn ``value`` (an Expr or an int) into an Expr."""
    if isinstance(value, Expr):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return Num(value)
    raise TypeError(f"cannot convert {value!r} to an expression")


@dataclass(frozen=True)
class Sym(Expr):
    name: str


@dataclass(frozen=True)
class Num(Expr):
    value: int


@dataclass(frozen=True)
class Add(Expr):
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Sub(Expr):
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Mul(Expr):
    left: Expr
    right: Expr


@dataclass(frozen=True)
class Div(Expr):
    num: Expr
    den: Expr


@dataclass(frozen=True)
class Pow(Expr):
    base: Expr
    exp: Expr


def symbols(names):
    """``symbols("a b c")`` -> ``(Sym('a'), Sym('b'), Sym('c'))``."""
    return tuple(Sym(name) for name in names.split())
