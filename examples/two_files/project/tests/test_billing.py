from billing import format_cents, invoice_total, to_cents


def test_to_cents_exact_amounts():
    assert to_cents("10") == 1000
    assert to_cents(5) == 500
    assert to_cents("0.50") == 50
    assert to_cents("12.25") == 1225


def test_format_cents():
    assert format_cents(0) == "0.00"
    assert format_cents(1999) == "19.99"
    assert format_cents(5) == "0.05"
    assert format_cents(-250) == "-2.50"


def test_invoice_without_tax():
    assert invoice_total([]) == "0.00"
    assert invoice_total([("10.00", 2), ("0.50", 3)]) == "21.50"


def test_invoice_with_round_tax():
    assert invoice_total([("10.00", 2)], tax_percent=10) == "22.00"
    assert invoice_total([("12.50", 4)], tax_percent=20) == "60.00"
