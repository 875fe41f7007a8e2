"""billing: money amounts in integer cents, and invoice totals."""

from .invoice import invoice_total
from .money import format_cents, to_cents

__all__ = ["format_cents", "invoice_total", "to_cents"]
