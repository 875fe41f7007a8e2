"""The Tester role (round 0): writes a pytest suite for the module from its source."""

from __future__ import annotations

from coharden.suite.roles import RULES, RoleCall, RoleContext, ask, fenced, import_name

SYSTEM = ("You are an expert Python test engineer. You write thorough, precise pytest tests that pin down the exact "
          "behavior of the code: boundaries, edge cases, error cases, return values.")


def round0_messages(module_rel: str, module_source: str, existing_suite: str = "") -> list[dict[str, str]]:
    name = import_name(module_rel)
    parts = [f"Write a pytest test suite for the module `{name}` (file `{module_rel}`).",
             f"# Module `{module_rel}`\n\n{fenced(module_source, 'python')}"]
    if existing_suite.strip():
        parts.append(f"# Existing tests (kept as they are; add new ones)\n\n{fenced(existing_suite, 'python')}")
    parts.append("Cover every public function and method: normal cases, boundaries (off-by-one, empty inputs, "
                 "equal values) and error cases.")
    parts.append(RULES.format(import_name=name))
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "\n\n".join(parts)}]


def write_suite(ctx: RoleContext, existing_suite: str = "") -> RoleCall:
    return ask(ctx.client, "tester", round0_messages(ctx.module_rel, ctx.module_source, existing_suite),
               sample_index=ctx.sample_index, instance_id=ctx.instance_id)
