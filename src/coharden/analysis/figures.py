"""Figures of the reports, drawn with matplotlib's object API (no global pyplot state, safe in threads).
matplotlib is the ``report`` extra: without it :func:`figure` raises a one-line :class:`CoHardenError`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError


def figure(width: float = 7.0, height: float = 3.6, layout: str = "constrained") -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError as exc:  # pragma: no cover - exercised only without the extra
        raise CoHardenError("the reports draw plots with matplotlib: pip install 'coharden[report]' "
                            "(or write only Markdown / JSON)") from exc
    return Figure(figsize=(width, height), dpi=100, layout=layout)


def png(fig: Any, dpi: float | None = None) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=dpi)
    return buffer.getvalue()


def save(fig: Any, path: Path, dpi: float | None = None) -> None:
    path.write_bytes(png(fig, dpi))


def integer_axis(axis: Any) -> None:
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))
