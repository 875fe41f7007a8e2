"""The evaluation report as Markdown and as one self-contained HTML page (plots inlined as base64 PNG).

Both are rendered from the JSON document of :func:`coharden.evaluation.metrics.build_report` only, through one
list of blocks (:mod:`coharden.evaluation.report_blocks`), so the two always say the same thing; the figures
(:mod:`coharden.evaluation.report_figures`) need matplotlib (``pip install 'coharden[report]'``).

System names, instance ids, reasons and errors come from the graded predictions: every text of a block goes
through :mod:`coharden.escaping` (Markdown: one line, no raw HTML, no block or cell of its own; HTML: entities).
"""

from __future__ import annotations

import base64
from typing import Any

from coharden.escaping import html_text, md_inline, md_line
from coharden.evaluation.report_blocks import blocks, fmt
from coharden.evaluation.report_figures import plots


def _md_cell(value: Any) -> str:
    return md_inline(fmt(value))


def render_markdown(report: dict[str, Any]) -> str:
    """Markdown (no figures: the HTML page has them)."""
    lines: list[str] = []
    for block in blocks(report):
        if block.kind in ("h1", "h2", "h3"):
            lines += ["#" * int(block.kind[1]) + " " + md_inline(block.text), ""]
        elif block.kind == "p":
            lines += [md_line(block.text), ""]
        elif block.kind == "table":
            lines.append("| " + " | ".join(_md_cell(h) for h in block.headers) + " |")
            lines.append("|" + "---|" * len(block.headers))
            lines += ["| " + " | ".join(_md_cell(v) for v in row) + " |" for row in block.rows]
            lines.append("")
    return "\n".join(lines)


STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.6em 0 1.4em; font-size: 0.85em; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: left; vertical-align: top; }
td { max-width: 40em; white-space: normal; overflow-wrap: break-word; }  /* full notes, wrapped between words */
th { background: #f0f0f0; }
figure { margin: 1em 0 2em; } figcaption { font-weight: 600; margin-bottom: 0.4em; }
img { max-width: 100%; }
.wide { max-width: 100%; overflow-x: auto; }  /* a table wider than the page scrolls inside it */
"""


def render_html(report: dict[str, Any], figures: dict[str, bytes] | None = None) -> str:
    """One self-contained page: inline CSS, every plot a ``data:image/png;base64`` URI."""
    figures = plots(report) if figures is None else figures
    parts = ["<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
             "<title>coharden evaluation report</title>", f"<style>{STYLE}</style>", "</head>", "<body>"]
    for block in blocks(report, figures):
        if block.kind in ("h1", "h2", "h3", "p"):
            parts.append(f"<{block.kind}>{html_text(block.text)}</{block.kind}>")
        elif block.kind == "table":
            parts.append('<div class="wide"><table>')
            parts.append("<thead><tr>" + "".join(f"<th>{html_text(h)}</th>" for h in block.headers)
                         + "</tr></thead>")
            parts.append("<tbody>")
            parts += ["<tr>" + "".join(f"<td>{html_text(fmt(v))}</td>" for v in row) + "</tr>" for row in block.rows]
            parts.append("</tbody></table></div>")
        elif block.kind == "figure":
            data = base64.b64encode(block.image).decode("ascii")
            parts.append(f'<figure><figcaption>{html_text(block.text)}</figcaption>'
                         f'<img alt="{html_text(block.text)}" src="data:image/png;base64,{data}"></figure>')
    parts += ["</body>", "</html>", ""]
    return "\n".join(parts)
