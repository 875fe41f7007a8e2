"""What the two LLM roles share: one fail-closed call, and how a module is shown and imported.

A call never raises for an LLM problem: it returns a :class:`RoleCall` whose ``failure`` names the kind
(an :class:`~coharden.llm.ErrorKind` value: ``truncated``, ``unusable_reply``, ``cost_cap``, ``replay_miss``,
``provider_down``, ``auth``, ...). The loop stops on a failure
and marks the run incomplete; the paid-for usage of a truncated or withheld reply is still accounted.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from coharden.llm import Completion, LLMClient, LLMError, failure_of


@dataclass
class RoleCall:
    """One LLM call of a role: the reply text, or why there is none."""

    role: str
    model: str
    content: str = ""
    failure: str | None = None
    message: str = ""
    finish_reason: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    cached: bool = False
    request_hash: str = ""

    @property
    def ok(self) -> bool:
        return self.failure is None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("content")
        data["message"] = data["message"][:500]
        return data


@dataclass(frozen=True)
class RoleContext:
    """What every call of a role shares in one run: the client it asks, the module under test (its path in
    the project and its source, as the role is shown them), and the sample index and instance id its calls are
    made under (replicates differ even at temperature 0; the ledger and the record/replay store key by them)."""

    client: LLMClient
    module_rel: str
    module_source: str
    sample_index: int = 0
    instance_id: str | None = None


def _usage(call: RoleCall, completion: Completion) -> None:
    call.finish_reason = completion.finish_reason
    call.prompt_tokens = completion.prompt_tokens
    call.completion_tokens = completion.completion_tokens
    call.cost_usd = completion.cost_usd
    call.cached = completion.cached
    call.request_hash = completion.request_hash


def ask(client: LLMClient, role: str, messages: Sequence[dict[str, str]], *, sample_index: int = 0,
        instance_id: str | None = None) -> RoleCall:
    """One call of ``role``: the reply, or the failure's kind and message (never raises for an LLM problem);
    the usage of a paid reply that must not be used is kept."""
    call = RoleCall(role=role, model=client.config.model)
    try:
        completion = client.complete(messages, sample_index=sample_index, instance_id=instance_id)
    except LLMError as exc:
        failed = failure_of(exc)
        if failed.completion is not None:
            _usage(call, failed.completion)
        call.failure, call.message = failed.kind.value, f"{failed.error}: {failed.message}"
        return call
    _usage(call, completion)
    call.content = completion.content
    return call


def import_name(module_rel: str) -> str:
    """``pkg/mod.py`` -> ``pkg.mod``; ``pkg/__init__.py`` -> ``pkg``."""
    name = module_rel[:-3] if module_rel.endswith(".py") else module_rel
    name = name.removesuffix("/__init__")
    return name.replace("/", ".")


def fenced(text: str, lang: str = "") -> str:
    """``text`` in a code fence longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text.rstrip()}\n{fence}"


RULES = """\
Rules for the tests you write:
- plain pytest functions named `test_...` (or classes `Test...`), deterministic, no network, no files, no sleeps;
- they must pass on the module exactly as shown;
- import what they use from `{import_name}` (the module under test); add any other imports you need;
- do not change, repeat with different code, or delete existing tests; do not redefine existing helpers or imports;
- no autouse fixtures, no setup/teardown hooks, no `pytestmark`, no module-level code besides imports, test
  helpers and constants, and never patch the module under test.
Reply with one ```python code block holding only the code to add."""
