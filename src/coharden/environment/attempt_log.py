"""Where a bounded model loop reports its attempts (:class:`AttemptLog`): refining an environment plan
(:mod:`coharden.environment.refine`) and writing a reproduction test (:mod:`coharden.environment.reproduce_generate`)
both append every attempt to a JSONL file, for audit and replay with the LLM call store, and say what they are
doing to a person."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel

from coharden.jsonl import append_line


@dataclass(frozen=True)
class AttemptLog:
    """``path``: the JSONL file each attempt is appended to (None: the attempts are kept in the result only);
    ``progress``: where progress lines for a person go (None: nowhere)."""

    path: Path | None = None
    progress: Callable[[str], None] | None = None

    def say(self, message: str) -> None:
        if self.progress is not None:
            self.progress(message)

    def write(self, attempt: BaseModel) -> None:
        if self.path is not None:
            append_line(self.path, attempt.model_dump_json())
