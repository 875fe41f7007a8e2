"""The critic API: the verify-and-feedback boundary at an agent's finish.

Names, fields and semantics are those of the OpenHands SDK (``openhands.sdk.critic``: ``CriticBase``,
``CriticResult``, ``IterativeRefinementConfig``), so a critic written for one works in the other:

* ``evaluate(events, git_patch)`` returns a :class:`CriticResult` with ``score`` in [0, 1] (a probability of
  success), an optional ``message`` and free-form ``metadata``;
* ``get_followup_prompt(critic_result, iteration)`` is the next user turn when the critic asks for another
  try; ``iteration`` counts refinements from 1;
* ``should_refine(critic_result)`` is ``score < success_threshold`` when ``iterative_refinement`` is set,
  else False; at most ``max_iterations`` follow-ups are sent (so at most ``max_iterations + 1`` evaluations).

Differences, all additive: ``events`` are plain dicts (see :mod:`coharden.critic.events`) instead of SDK event
objects, ``git_patch`` is always given by coharden's harness (the SDK passes None), and :meth:`CriticBase.accepts`
states once what "accepted" means for a critic without a refinement config.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from coharden.critic.events import Event


class CriticResult(BaseModel):
    """A score and a message."""

    THRESHOLD: ClassVar[float] = 0.5

    score: float = Field(ge=0.0, le=1.0, description="A predicted probability of success between 0 and 1.")
    message: str | None = Field(description="An optional message explaining the score.")
    metadata: dict[str, Any] | None = Field(default=None, description="Optional metadata about the evaluation.")

    @property
    def success(self) -> bool:
        return self.score >= CriticResult.THRESHOLD


#: Function that generates a follow-up prompt from a critic result and the (1-indexed) iteration.
FollowupPromptFn = Callable[[CriticResult, int], str]


class IterativeRefinementConfig(BaseModel):
    """Retry while the critic's score is below ``success_threshold``, at most ``max_iterations`` times."""

    success_threshold: float = Field(default=0.6, ge=0.0, le=1.0)
    max_iterations: int = Field(default=3, ge=1)


class CriticBase(BaseModel, abc.ABC):
    """A critic takes the agent's events and the working-tree diff and returns a score.

    A pydantic model like the SDK's; ``arbitrary_types_allowed`` lets a critic hold runtime objects (an
    executor, a workspace) as fields.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    mode: Literal["finish_and_message", "all_actions"] = "finish_and_message"
    """When the critic runs. coharden's harness always evaluates at the finish; kept for SDK parity."""
    iterative_refinement: IterativeRefinementConfig | None = None

    @abc.abstractmethod
    def evaluate(self, events: Sequence[Event], git_patch: str | None = None) -> CriticResult: ...

    def get_followup_prompt(self, critic_result: CriticResult, iteration: int) -> str:
        """The next user turn after a rejection (``iteration`` is 1-indexed). Same text as the SDK's default."""
        score_percent = critic_result.score * 100
        return (
            f"The task appears incomplete (iteration {iteration}, "
            f"predicted success likelihood: {score_percent:.1f}%).\n\n"
            "Please review what you've done and verify each requirement is met.\n"
            "List what's working and what needs fixing, then complete the task.\n"
        )

    def should_refine(self, critic_result: CriticResult) -> bool:
        if self.iterative_refinement is None:
            return False
        return critic_result.score < self.iterative_refinement.success_threshold

    # -- coharden additions ---------------------------------------------------------------------------------
    def accepts(self, critic_result: CriticResult) -> bool:
        """Whether the harness takes the submission. With a refinement config: not ``should_refine`` (so a
        subclass overriding ``should_refine`` decides); without one: ``critic_result.success``."""
        if self.iterative_refinement is None:
            return critic_result.success
        return not self.should_refine(critic_result)

    @property
    def max_iterations(self) -> int:
        """How many follow-ups the harness may send (0 without a refinement config, as in the SDK)."""
        return 0 if self.iterative_refinement is None else self.iterative_refinement.max_iterations


class PassCritic(CriticBase):
    """Always successful (the SDK's ``PassCritic``)."""

    def evaluate(self, events: Sequence[Event], git_patch: str | None = None) -> CriticResult:  # noqa: ARG002
        return CriticResult(score=1.0, message="PassCritic always succeeds")


class EmptyPatchCritic(CriticBase):
    """Successful iff the patch is non-empty (the SDK's ``EmptyPatchCritic``)."""

    def evaluate(self, events: Sequence[Event], git_patch: str | None = None) -> CriticResult:  # noqa: ARG002
        if not git_patch or not git_patch.strip():
            return CriticResult(score=0.0, message="Git patch is empty or missing")
        return CriticResult(score=1.0, message="Git patch is non-empty")
