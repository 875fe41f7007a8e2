from tinyexpr import Num, sstr, symbols


def test_atoms():
    (a,) = symbols("a")
    assert sstr(a) == "a"
    assert sstr(Num(3)) == "3"
    assert sstr(Num(-3)) == "-3"


def test_add_and_mul():
    a, b, c = symbols("a b c")
    assert sstr(a + b * c) == "a + b*c"
    assert sstr((a + b) * c) == "(a + b)*c"
    assert sstr(a * Num(-2)) == "a*(-2)"


def test_subtraction():
    a, b, c = symbols("a b c")
    assert sstr(a - b) == "a - b"
    assert sstr(a - b * c) == "a - b*c"
    assert sstr((a + b) - c) == "a + b - c"
    assert sstr(a - b - c) == "a - b - c"
    assert sstr((a - b) * c) == "(a - b)*c"


def test_pow():
    a, b, c = symbols("a b c")
    assert sstr((a + b) ** 2) == "(a + b)**2"
    assert sstr((a**b) ** c) == "(a**b)**c"
    assert sstr(a ** (b**c)) == "a**b**c"


def test_simple_division():
    a, b, c = symbols("a b c")
    assert sstr(a / b) == "a/b"
    assert sstr((a + b) / c) == "(a + b)/c"
    assert sstr(a / (b + c)) == "a/(b + c)"
