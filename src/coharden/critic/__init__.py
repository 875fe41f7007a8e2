"""Critics: the verify-and-feedback boundary at an agent's finish.

The API mirrors the OpenHands SDK's (``CriticBase.evaluate(events, git_patch) -> CriticResult``,
``get_followup_prompt(result, iteration)``, ``IterativeRefinementConfig``). Skill critics are directories with
``critic.yaml`` and detector modules; the built-in gates (clean patch, structural validity, ran the test,
fail-to-pass) are shipped as such skills. Verdicts are mechanical: parsing, ``git apply`` and real test runs.
"""

from coharden.critic.base import (
    CriticBase,
    CriticResult,
    EmptyPatchCritic,
    FollowupPromptFn,
    IterativeRefinementConfig,
    PassCritic,
)
from coharden.critic.builtin import BUILTIN_SKILLS, SKILLS_DIR, builtin_skill, default_critic
from coharden.critic.context import CriticContext, Mode
from coharden.critic.events import Event
from coharden.critic.skill import DetectorError, Signal, SkillCritic, SkillError, SkillSpec, load_skill

__all__ = [
    "BUILTIN_SKILLS",
    "SKILLS_DIR",
    "CriticBase",
    "CriticContext",
    "CriticResult",
    "DetectorError",
    "EmptyPatchCritic",
    "Event",
    "FollowupPromptFn",
    "IterativeRefinementConfig",
    "Mode",
    "PassCritic",
    "Signal",
    "SkillCritic",
    "SkillError",
    "SkillSpec",
    "builtin_skill",
    "default_critic",
    "load_skill",
]
