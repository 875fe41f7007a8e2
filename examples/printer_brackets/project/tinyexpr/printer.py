"""Print expression trees as Python-like strings, with only the brackets that are needed."""

from .expr import Add, Div, Mul, Num, Pow, Sub, Sym

PREC_ADD = 10
PREC_MUL = 20
PREC_POW = 30
PREC_ATOM = 1000


def precedence(expr):
    """How tightly ``expr`` binds when printed: higher binds tighter."""
    if isinstance(expr, (Add, Sub)):
        return PREC_ADD
    if isinstance(expr, (Mul, Div)):
        return PREC_MUL
    if isinstance(expr, Pow):
        return PREC_POW
    if isinstance(expr, Num) and expr.value < 0:
        return PREC_ADD
    return PREC_ATOM


class StrPrinter:
    """``StrPrinter().doprint(expr)`` returns the string form of ``expr``."""

    def doprint(self, expr):
        method = getattr(self, "_print_" + type(expr).__name__, None)
        if method is None:
            raise TypeError(f"don't know how to print {type(expr).__name__}")
        return method(expr)

    def parenthesize(self, expr, level):
        """Print ``expr``, in brackets if it binds less tightly than ``level``."""
        if precedence(expr) < level:
            return "(%s)" % self.doprint(expr)
        return self.doprint(expr)

    def _print_Sym(self, expr):
        return expr.name

    def _print_Num(self, expr):
        return str(expr.value)

    def _print_Add(self, expr):
        return "%s + %s" % (self.parenthesize(expr.left, PREC_ADD), self.parenthesize(expr.right, PREC_ADD))

    def _print_Sub(self, expr):
        left = self.parenthesize(expr.left, PREC_ADD)
        right = self.parenthesize(expr.right, PREC_ADD)
        return "%s - %s" % (left, right)

    def _print_Pow(self, expr):
        base = self.doprint(expr.base)
        if precedence(expr.base) <= PREC_POW:
            # (a**b)**c is not a**b**c, which Python reads as a**(b**c)
            base = "(%s)" % base
        return "%s**%s" % (base, self.parenthesize(expr.exp, PREC_POW))

    def _print_Mul(self, expr):
        return "%s*%s" % (self.parenthesize(expr.left, PREC_MUL), self.parenthesize(expr.right, PREC_MUL))

    def _print_Div(self, expr):
        num = self.parenthesize(expr.num, PREC_MUL)
        den = self.parenthesize(expr.den, PREC_MUL)
        return "%s/%s" % (num, den)


def sstr(expr):
    """The string form of ``expr``, e.g. ``sstr(a * (b + c))`` -> ``'a*(b + c)'``."""
    return StrPrinter().doprint(expr)
