"""Where a loop run is: one :class:`LoopProgress` per phase change, sent by the engine to whoever listens (the
CLI's progress display). Listeners are called from the worker threads and must be thread-safe."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

Phase = Literal["agent", "gate", "mutants", "round", "done"]


@dataclass(frozen=True)
class LoopProgress:
    """``phase``: the agent is working (``agent``), the mechanical F->P gate runs (``gate``), the temporal matrix
    runs over mutants (``mutants``), a round ended (``round``, with its ``decision``), the instance ended
    (``done``, with the final decision)."""

    instance_id: str
    round: int
    """The round in progress (0: lax-init)."""
    rounds: int
    """Rounds the run can take at most (round 0 included)."""
    phase: Phase
    decision: str = ""

    @property
    def completed(self) -> int:
        """Rounds finished so far (of :attr:`rounds`)."""
        first = 0 if self.rounds > 1 else 1  # multi-round runs start at round 0, one-shot runs at round 1
        return self.round - first + (self.phase in ("round", "done"))

    def describe(self) -> str:
        """One short line: ``round 2/6 mutants``, ``round 1/6 gate_failed``, ``done: clean``."""
        if self.phase == "done":
            return f"done: {self.decision}"
        what = self.decision if self.phase == "round" else self.phase
        return f"round {self.round}/{self.rounds - 1 if self.rounds > 1 else 1} {what}"


ProgressCallback = Callable[[LoopProgress], None]
