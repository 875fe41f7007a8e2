"""Reading YAML files: every reader of the project names the file of an unreadable or malformed one."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml


def read_yaml(path: Path, error: Callable[[str], Exception], *, what: str = "", kind: str = "YAML") -> Any:
    """The parsed YAML of ``path``; a file that cannot be read raises ``error("PATH: cannot read WHAT: ...")``
    and malformed text ``error("PATH: not valid KIND: ...")``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot read{what}: {exc.strerror or exc}") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise error(f"{path}: not valid {kind}: {exc}") from None
