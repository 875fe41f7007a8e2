"""Text from tests, fixes and predictions is data: one escaping function per output format it reaches.

A model name, an instance id, a test id, a failure or exception message, a reason, a tampering note, a mutant's
description: all come from code or files coharden grades, so any of them may hold what the output format reads
as structure: Rich markup (``[/x]`` crashed the command with a ``MarkupError``; ``[link=...]`` is a link), a
newline followed by ``## Rigorous`` or ``| x | y |`` (a forged Markdown heading or table row), raw HTML
(``<script>`` kept by Markdown renderers), a newline followed by ``class: Rigorous`` (a forged line of a run
log), terminal escape sequences. Every writer routes such a string through the function of its format at the
point it writes it; the writer's own words stay as they are.

- :func:`for_rich` for Rich markup strings (console lines, table cells, progress descriptions);
- :func:`md_inline` for Markdown table cells and headings, :func:`md_line` for paragraphs (one line, no raw
  HTML, no cell separator; a paragraph cannot start a block); :func:`md_cell` for a cell that keeps its own
  emphasis;
- :func:`html_text` for HTML element text and attribute values;
- :func:`log_value` for one value on one line of a plain-text log (line breaks and control characters shown as
  escapes, so the value can never start a line of its own).
"""

from __future__ import annotations

import html
import re

from rich.markup import escape as _rich_escape

#: Characters that end a line somewhere: ``str.splitlines`` splits on each (and editors and browsers on most).
LINE_BREAKS = "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

# C0 controls, DEL and C1 controls (ESC starts terminal escape sequences), bidirectional overrides and
# isolates (which reorder what a reader sees)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_CONTROL_BUT_LAYOUT = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _visible(char: str) -> str:
    """A control character as a backslash escape (``\\n``, ``\\x1b``, ``\\u2028``)."""
    if char in _SHORT:
        return _SHORT[char]
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _show_controls(text: str, pattern: re.Pattern[str]) -> str:
    return pattern.sub(lambda m: _visible(m.group()), text)


def for_rich(text: object) -> str:
    """``text`` as a Rich markup string that prints exactly as it is: every ``[`` that could open a tag
    escaped, terminal control characters (escape sequences, carriage returns, bidi overrides) shown as
    backslash escapes. Newlines and tabs stay: a multi-line failure message still prints on its lines."""
    return _rich_escape(_show_controls(str(text), _CONTROL_BUT_LAYOUT))


#: Markdown's backslash-escapable characters that can change a line's structure or become markup: the escape
#: character itself, the table cell separator, code spans, links and images, emphasis by ``*`` (an underscore
#: inside a word, as in test ids, is no emphasis and stays as it is).
_MD_ESCAPE = re.compile(r"([\\`|*\[\]])")
#: What a block starts with (heading, quote, list, thematic break, setext underline, fenced code), at the
#: beginning of a line only: the one place in a line that can start a block once every line break is gone.
_MD_BLOCK_CHARS = frozenset("#>+=~-")


def md_inline(text: object) -> str:
    """``text`` as Markdown inline content that renders as the text itself: one line (every line break a space,
    other control characters shown as escapes); ``\\ ` | * [ ]`` backslash-escaped; ``<`` an entity (no raw
    HTML, no autolink) and ``&`` too where it would start one. Safe in a table cell, a heading's text, or after
    other text on a line; text that starts a line (a paragraph) goes through :func:`md_line`."""
    value = str(text).replace("\r\n", "\n")
    value = re.sub(f"[{LINE_BREAKS}]+", " ", value)
    value = _show_controls(value, _CONTROL)
    value = re.sub(r"&(?=#?\w+;)", "&amp;", value).replace("<", "&lt;")  # before the backslashes added next
    value = _MD_ESCAPE.sub(r"\\\1", value)
    return re.sub(r"#(?=[ #]*$)", r"\\#", value)  # a heading's closing sequence would be dropped


def md_cell(text: object) -> str:
    """``text`` as a Markdown table cell that keeps the Markdown it holds (a writer's own ``**emphasis**`` or
    ``[0.1, 0.2]``) but cannot change the table's structure: one line, ``\\`` and ``|`` backslash-escaped, ``<``
    an entity (no raw HTML). For cells that mix the writer's formatting with data; :func:`md_inline` for data."""
    value = str(text).replace("\r\n", "\n")
    value = re.sub(f"[{LINE_BREAKS}]+", " ", value)
    value = _show_controls(value, _CONTROL).replace("<", "&lt;")
    return re.sub(r"([\\|])", r"\\\1", value)


def md_line(text: object) -> str:
    """:func:`md_inline` for text that starts a line (a paragraph): no block (heading, quote, list, rule, code)
    can start at its beginning either."""
    value = md_inline(text).lstrip(" ")  # four leading spaces would start a code block
    number = re.match(r"\d+(?=[.)])", value)
    if number:  # "1." / "1)" would start a numbered list: the punctuation escaped
        return value[:number.end()] + "\\" + value[number.end():]
    return "\\" + value if value[:1] in _MD_BLOCK_CHARS else value


def html_text(text: object) -> str:
    """``text`` as HTML element text or a quoted attribute value: ``& < > " '`` as entities, control characters
    (other than newline and tab) shown as escapes."""
    return html.escape(_show_controls(str(text), _CONTROL_BUT_LAYOUT), quote=True)


def log_value(text: object) -> str:
    """``text`` as one value on one line of a plain-text log: every line break and control character shown as a
    backslash escape (a backslash doubled first, so the escapes cannot be forged), so no value starts a line."""
    return _show_controls(str(text).replace("\\", "\\\\"), _CONTROL)


def md_code_block(text: object, lang: str = "") -> str:
    """``text`` as a fenced Markdown code block that shows it exactly: the fence is one backtick longer than the
    longest run of backticks in it (so no line of the text can close it), control characters other than newline
    and tab shown as escapes. The block starts and ends a line; ``lang`` is coharden's own (``diff``)."""
    value = _show_controls(str(text).replace("\r\n", "\n"), _CONTROL_BUT_LAYOUT)
    fence = "`" * max(3, 1 + max((len(run) for run in re.findall(r"`+", value)), default=0))
    return f"{fence}{lang}\n{value.rstrip(chr(10))}\n{fence}"


def block_text(text: object) -> str:
    """``text`` as a block of lines kept as they are (a diff printed on a terminal; XML 1.0 character data or an
    attribute value, before the XML writer escapes ``& < >``): every control character other than newline and
    tab (escape sequences; those XML 1.0 cannot hold at all) shown as a backslash escape."""
    return _show_controls(str(text), _CONTROL_BUT_LAYOUT)
