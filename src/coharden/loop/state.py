"""Loop state persisted as JSON between agent invocations, so a killed run resumes at the last finished round.

The file belongs to one (instance, method, configuration); a state for another instance or configuration is
discarded (reset), never mixed in.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field


class RoundOutcome(BaseModel):
    round: int
    decision: str
    test: str = ""  # t_k (test patch)
    fix: str = ""  # c_k (source patch)
    laxity: float | None = None
    admissible: int = 0
    matrix: dict[str, list[str]] = Field(default_factory=dict)
    feedback: str = ""  # what the next round's agent is told
    cost_usd: float = 0.0
    mutant_cost_usd: float = 0.0
    agent_status: str = ""
    error_kind: str = ""  # the model error that stopped the agent (coharden.llm.ErrorKind), "" when none
    note: str = ""


class LoopState(BaseModel):
    instance_id: str
    method: str
    config_hash: str
    t0: str = ""
    t_ref: str = ""
    fix: str = ""  # c_{k-1}
    test: str = ""  # t_{k-1}
    round: int = -1  # last finished round (-1: none)
    inconclusive_streak: int = 0
    finished: bool = False
    final_decision: str = ""
    final_note: str = ""
    error_kind: str = ""  # why a model_error / cost_cap run stopped (coharden.llm.ErrorKind)
    rounds: list[RoundOutcome] = Field(default_factory=list)

    @property
    def fix_history(self) -> list[str]:
        return [r.fix for r in self.rounds if r.fix]

    def save(self, path: Path) -> None:
        """Atomic write: a kill during the write leaves the previous state intact."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".state-", dir=path.parent)
        with os.fdopen(fd, "w") as handle:
            handle.write(self.model_dump_json(indent=1))
        Path(tmp).replace(path)

    @classmethod
    def load_or_new(cls, path: Path, **identity: Any) -> LoopState:
        """The saved state when it belongs to the same instance, method and configuration; else a new one."""
        if path.is_file():
            try:
                saved = cls.model_validate(json.loads(path.read_text()))
            except (ValueError, json.JSONDecodeError):
                saved = None
            if saved is not None and all(getattr(saved, k) == v for k, v in identity.items()):
                return saved
        return cls(**identity)
