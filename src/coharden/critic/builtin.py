"""The built-in skills and the default critic of each phase."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

from coharden.critic.context import CriticContext, Mode
from coharden.critic.skill import SkillCritic, SkillError, load_skill

logger = logging.getLogger(__name__)

SKILLS_DIR = Path(__file__).parent / "skills"

#: Built-in skills, cheapest first (the harness stops at the first triggered hard gate).
BUILTIN_SKILLS = ("clean_patch", "structural_validity", "ran_the_test", "fail_to_pass")


def builtin_skill(name: str, context: CriticContext | None = None) -> SkillCritic:
    if name not in BUILTIN_SKILLS:
        raise SkillError(f"unknown built-in skill {name!r} (known: {', '.join(BUILTIN_SKILLS)})")
    return load_skill(SKILLS_DIR / name, context=context)


def default_critic(
    context: CriticContext,
    *,
    skills: Sequence[str | Path] = (),
    builtins: Sequence[str] | None = None,
    threshold: float | None = None,
    max_iterations: int | None = None,
) -> SkillCritic:
    """The built-in gates for ``context.mode`` followed by user ``skills`` (directories), in one critic.

    ``builtins`` picks built-in skills (default: all four; the F→P gate is left out when the context has no
    instance to run tests on, and in fix-only mode when there is no reference test). The F→P gate, the only
    costly one, always runs last so a cheap gate can reject first.
    """
    chosen = list(BUILTIN_SKILLS if builtins is None else builtins)
    for name in chosen:
        if name not in BUILTIN_SKILLS:
            raise SkillError(f"unknown built-in skill {name!r} (known: {', '.join(BUILTIN_SKILLS)})")
    if builtins is None and "fail_to_pass" in chosen and not _can_run_fail_to_pass(context):
        chosen.remove("fail_to_pass")
        logger.warning("critic for %s: no F->P gate (no instance to run tests on, or no reference test)",
                       context.mode.value)
    first = [builtin_skill(n, context) for n in chosen if n != "fail_to_pass"]
    user = [load_skill(s, context=context) for s in skills]
    last = [builtin_skill("fail_to_pass", context)] if "fail_to_pass" in chosen else []
    critics = first + user + last
    if not critics:
        raise SkillError("the critic has no signals: choose at least one built-in or user skill")
    base = user[0] if user else critics[0]
    refinement = base.iterative_refinement
    return SkillCritic.combine(
        critics,
        threshold=threshold if threshold is not None else (refinement.success_threshold if refinement else None),
        max_iterations=max_iterations if max_iterations is not None else (
            refinement.max_iterations if refinement else None),
        context=context,
        name=f"coharden-{context.mode.value}",
    )


def _can_run_fail_to_pass(context: CriticContext) -> bool:
    if not context.can_run_tests:
        return False
    return context.mode is not Mode.FIX_ONLY or context.has_reference_test
