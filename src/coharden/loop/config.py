"""Configuration of the CoHarden loop and its baselines (one model, one agent, one framework)."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum

from pydantic import BaseModel, Field

from coharden.schema.mutant import TARGETED_OPERATORS, Operator


class Method(StrEnum):
    COHARDEN = "coharden"  # lax-init, then co-generate and harden against mutants (Algorithm 1)
    FIX_ONLY = "fix-only"
    FIX_WITH_TEST = "fix-with-test"  # fix-only given an existing reproduction test (BRT injection)
    TEST_ONLY = "test-only"
    COGEN = "cogen"  # test and fix in one trajectory, its own F->P as the stop signal
    SELF_REFINE = "self-refine"  # K joint rounds with generic review feedback, no mutants
    NO_LAX_INIT = "no-lax-init"  # ablation: no round 0
    NO_HARDENING = "no-hardening"  # ablation: round 0 and one joint round, no mutation check


class LoopConfig(BaseModel):
    method: Method = Method.COHARDEN
    rounds: int = Field(default=5, ge=1, description="K: joint rounds after round 0.")
    tau: float = Field(default=0.2, ge=0, le=1, description="Laxity above which a round is a regression.")
    samples: int = Field(default=3, ge=1, description="N: mutants per operator per round.")
    operators: list[Operator] = Field(default_factory=lambda: list(TARGETED_OPERATORS))
    mutator: str = Field(default="mechanical", pattern="^(mechanical|llm|mechanical,llm)$")
    seed: int = 0
    max_iterations: int | None = Field(default=None, description="Critic follow-ups per agent run.")

    def digest(self) -> str:
        """Identity of the configuration; a saved state with another digest is not resumed."""
        return hashlib.sha256(json.dumps(self.model_dump(mode="json"), sort_keys=True).encode()).hexdigest()[:16]
