"""Invoice totals."""

from .money import format_cents, to_cents


def invoice_total(lines, tax_percent=0):
    """The total of an invoice, as a string such as ``"21.39"``.

    ``lines`` are ``(unit_price, quantity)`` pairs, prices in currency units. Tax is
    ``tax_percent`` percent of the subtotal, rounded to the nearest cent (halves round up).
    """
    subtotal = sum(to_cents(price) * quantity for price, quantity in lines)
    tax = subtotal * tax_percent // 100
    return format_cents(subtotal + tax)
