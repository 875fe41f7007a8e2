"""The Critic role (rounds >= 1): shown the mutants that survive the suite, as diffs, it adds tests.

The critic never judges anything: whether its tests kill a mutant is decided by running them. Which survivors
it is shown (at most ``max_shown``) is a seeded sample per (seed, replicate, round), so arms that share a
round 0 see the same first prompt in the same replicate (a paired comparison), and replicates differ even at
temperature 0.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from coharden.suite.operators import ModuleMutant
from coharden.suite.roles import RULES, RoleCall, RoleContext, ask, fenced, import_name

SYSTEM = ("You are a test critic. A mutant is a small deliberate change to the code under test; a good test suite "
          "fails on it. You add tests that pass on the real code and fail on the surviving mutants.")


def shown_mutants(survivors: Sequence[ModuleMutant], max_shown: int, key: str) -> list[ModuleMutant]:
    """The survivors the critic is shown: all of them, or a seeded sample of ``max_shown`` in id order."""
    if len(survivors) <= max_shown:
        return list(survivors)
    keep = set(random.Random(f"suite-critic:{key}").sample(range(len(survivors)), max_shown))
    return [m for k, m in enumerate(survivors) if k in keep]


def critic_messages(module_rel: str, module_source: str, suite: str,
                    survivors: Sequence[ModuleMutant], total_survivors: int) -> list[dict[str, str]]:
    name = import_name(module_rel)
    diffs = "\n\n".join(f"## Mutant {m.id} ({m.operator}, line {m.line})\n\n{fenced(m.diff, 'diff')}"
                        for m in survivors)
    more = f" ({len(survivors)} of {total_survivors} shown)" if total_survivors > len(survivors) else ""
    parts = [
        f"# Module `{module_rel}` (import it as `{name}`)\n\n{fenced(module_source, 'python')}",
        f"# Current test suite\n\n{fenced(suite, 'python')}",
        f"# Surviving mutants{more}\n\nEvery test above passes on each of these mutated versions of the module. "
        f"Each is a unified diff against the module.\n\n{diffs}",
        "Add new tests that pass on the original module and fail on as many of these mutants as possible. "
        "Target the exact behavior each diff changes. Some mutants may be equivalent to the original (no test can "
        "tell them apart); skip those.",
        RULES.format(import_name=name),
    ]
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def add_tests(ctx: RoleContext, suite: str, survivors: Sequence[ModuleMutant], total_survivors: int) -> RoleCall:
    messages = critic_messages(ctx.module_rel, ctx.module_source, suite, survivors, total_survivors)
    return ask(ctx.client, "critic", messages, sample_index=ctx.sample_index, instance_id=ctx.instance_id)
