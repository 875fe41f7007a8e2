"""Money amounts are kept as integer cents; these helpers convert to and from them."""


def to_cents(amount):
    """Convert an amount in currency units (``"19.99"``, ``19.99`` or ``5``) to integer cents."""
    return int(float(amount) * 100)


def format_cents(cents):
    """``format_cents(1999)`` -> ``"19.99"``; negative amounts get a leading minus."""
    sign = "-" if cents < 0 else ""
    whole, frac = divmod(abs(cents), 100)
    return f"{sign}{whole}.{frac:02d}"
