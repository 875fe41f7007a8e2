"""A raw mutant before admission: new contents for some files, with operator, description and location."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coharden.schema.mutant import Operator


@dataclass
class RawMutant:
    operator: Operator
    description: str
    location: str
    files: dict[str, str]  # path -> mutated content (files not listed keep their BUGGY content)
    meta: dict[str, Any] = field(default_factory=dict)
    originals: dict[str, str] = field(default_factory=dict)
    """Base content of files outside the fix that ``files`` changes (a fix made at a caller elsewhere)."""

    def __post_init__(self) -> None:
        self.operator = Operator(self.operator)  # an outside operator may give its name as a plain string
