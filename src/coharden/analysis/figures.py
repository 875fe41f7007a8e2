"""Figures of the reports, drawn with matplotlib's object API (no global pyplot state, safe in threads).
matplotlib is the ``report`` extra: without it :func:`figure` raises a one-line :class:`CoHardenError`."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Literal

from coharden.errors import CoHardenError

#: One colour per class in every report; Borderline (the interval contains tau) is also hatched, so it reads as
#: a class of its own beside Lax in print and for readers who tell the two oranges apart poorly.
CLASS_COLORS = {"Rigorous": "#2e7d32", "Borderline": "#ffcc80", "Lax": "#f9a825", "Misaligned": "#c62828",
                "NotReproducing": "#6a1b9a", "Invalid": "#616161", "Inconclusive": "#90a4ae"}
CLASS_HATCHES = {"Borderline": "///"}
CLASS_MARKERS = {"Borderline": "D"}  # points (scatter plots): a shape of its own too


def figure(width: float = 7.0, height: float = 3.6,
           layout: Literal["constrained", "compressed", "tight"] = "constrained") -> Any:
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


def shared_count_limit(axes: Any, tops: list[float]) -> None:
    """Give panels that share a count axis one range from 0 that holds the tallest bar of any panel (set once,
    after every panel is drawn: a limit set while drawing the first panel cut the taller bars of the others)."""
    top = max([0.0, *tops])
    for ax in axes:
        ax.set_ylim(0, top * 1.08 if top > 0 else 1)
