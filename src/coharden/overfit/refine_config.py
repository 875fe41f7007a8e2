"""How the overfit refinement loop runs (:class:`RefineConfig`): apart from the loop, so that the critic's prompt
(:mod:`coharden.overfit.critic_prompt`) reads it without importing the loop that imports the prompt."""

from __future__ import annotations

from pydantic import BaseModel, Field

from coharden.overfit.coverage import Backend

MAX_ITERATIONS = 15
"""The most critic calls per pair (the issue's cap)."""


class RefineConfig(BaseModel):
    """How the refinement loop runs."""

    max_iterations: int = Field(default=MAX_ITERATIONS, ge=0, le=MAX_ITERATIONS)
    """Critic calls at most (the issue's cap is 15)."""
    hide_test: bool = False
    """The critic sees the test's pass/fail flags only and may change the focal code only."""
    extra_context: bool = True
    """Show the issue text, the fix's files whole (when short) and which changed lines the test misses."""
    backend: Backend = "coverage"
    whole_file_lines: int = 400
    """Test files (and fix files with module-level changes) up to this length are shown whole."""
