"""tinyexpr: tiny symbolic expression trees and a string printer."""

from .expr import Add, Div, Expr, Mul, Num, Pow, Sub, Sym, as_expr, symbols
from .printer import StrPrinter, sstr

__all__ = ["Add", "Div", "Expr", "Mul", "Num", "Pow", "StrPrinter", "Sub", "Sym", "as_expr", "sstr", "symbols"]
