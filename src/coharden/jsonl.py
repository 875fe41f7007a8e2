"""Reading JSON Lines files: every reader of the project names the file and line of a malformed one."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from coharden.errors import CoHardenError


def json_lines(path: Path, error: Callable[[str], Exception] = CoHardenError, *,
               text: str | None = None) -> Iterator[tuple[int, Any]]:
    """(line number, value) of every non-blank line of ``path`` (or of ``text``, read from it); a malformed
    line raises ``error("FILE:LINE: malformed JSON line: ...")``."""
    for number, line in enumerate((path.read_text() if text is None else text).splitlines(), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{number}: malformed JSON line: {exc.msg} (column {exc.colno})") from exc
        yield number, value
