"""tinyexpr: tiny symbolic expression trees and a string printer."""

from .expr import Add, Div, Expr, Mul, Num, Pow, Sym, as_expr, symbols
from .printer import StrPrinter, sstr

__all__ = ["Add", "Div", "Expr", "Mul", "Num", "Pow", "StrPrinter", "Sym", "as_expr", "sstr", "symbols"]
