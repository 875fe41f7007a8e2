"""Configuration of the CoHarden loop and its baselines (one model, one agent, one framework)."""

from __future__ import annotations

import hashlib
import json
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field, model_validator

from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import Operator


class Method(StrEnum):
    COHARDEN = "coharden"  # lax-init, then co-generate and harden against mutants (Algorithm 1)
    FIX_ONLY = "fix-only"
    FIX_WITH_TEST = "fix-with-test"  # fix-only given an existing reproduction test (BRT injection)
    TEST_ONLY = "test-only"
    COGEN = "cogen"  # test and fix in one trajectory, its own F->P as the stop signal
    SELF_REFINE = "self-refine"  # K joint rounds with generic review feedback, no mutants
    NO_LAX_INIT = "no-lax-init"  # ablation: no round 0
    NO_HARDENING = "no-hardening"  # ablation: round 0 and one joint round, no mutation check


MUTATOR_CHOICES = ("mechanical", "llm", "mechanical,llm")
_LOOP_MPE = {"tau": "tau", "samples": "per_operator", "per_operator": "per_operator", "operators": "operators",
             "seed": "seed", "paper_classes": "paper_classes"}


class LoopConfig(BaseModel):
    """K rounds of one method; ``mpe`` is the hardening check of every round (its ``tau`` is the regression
    threshold, its ``per_operator`` the N mutants per operator, its ``seed`` + k the round's sampling seed).

    Each round's MPE is sequential and its interval decides (clean: the new test is decided Rigorous; a
    Borderline round asks for more mutants first); ``paper_classes`` keeps Algorithm 1's point rule with N
    mutants per operator.

    The loop's own words are accepted as keywords and map into ``mpe``: ``tau``, ``per_operator`` (N; its older
    name ``samples``),
    ``paper_classes``,
    ``operators``, ``seed``, ``mutator`` (``mechanical``, ``llm`` or ``mechanical,llm``)."""

    method: Method = Method.COHARDEN
    rounds: int = Field(default=5, ge=1, description="K: joint rounds after round 0.")
    mpe: MPEConfig = Field(default_factory=MPEConfig.for_loop)
    max_iterations: int | None = Field(default=None, description="Critic follow-ups per agent run.")

    @model_validator(mode="before")
    @classmethod
    def _loop_words(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not ({*_LOOP_MPE, "mutator"} & data.keys()):
            return data
        data = dict(data)
        mpe = data.get("mpe")
        fields = mpe.model_dump() if isinstance(mpe, MPEConfig) else dict(mpe or MPEConfig.for_loop().model_dump())
        for word, field in _LOOP_MPE.items():
            if word in data:
                fields[field] = data.pop(word)
        if "mutator" in data:
            mutator = data.pop("mutator")
            if mutator not in MUTATOR_CHOICES:
                raise ValueError(f"mutator must be one of {', '.join(MUTATOR_CHOICES)}, not {mutator!r}")
            sources = mutator.split(",")
            fields["mechanical"] = "mechanical" in sources
            fields["llm"] = "llm" if "llm" in sources else None
        data["mpe"] = fields
        return data

    @property
    def tau(self) -> float:
        return self.mpe.tau

    @property
    def samples(self) -> int:
        return self.mpe.per_operator or 0

    @property
    def operators(self) -> list[Operator]:
        return self.mpe.operators

    @property
    def seed(self) -> int:
        return self.mpe.seed

    @property
    def mutator(self) -> str:
        return ",".join(self.mpe.mutators())

    def digest(self) -> str:
        """Identity of the configuration; a saved state with another digest is not resumed. Computed over the
        loop's own words (as before ``mpe`` was embedded), so saved states stay resumable."""
        flat: dict[str, Any] = {
            "method": self.method.value, "rounds": self.rounds, "tau": self.tau, "samples": self.samples,
            "operators": [op.value for op in self.operators], "mutator": self.mutator, "seed": self.seed,
            "max_iterations": self.max_iterations}
        if not self.mpe.paper_classes:  # the interval estimate; states saved before it used the point rule
            flat["estimate"] = [self.mpe.is_sequential, self.mpe.max_mutants, self.mpe.confidence]
        return hashlib.sha256(json.dumps(flat, sort_keys=True).encode()).hexdigest()[:16]
