"""LLM mutant operators, the prompts: per-operator instructions and realizations (``prompts/operators.yaml``),
the system and user messages of one sample, and the seeded order in which the two tests are shown."""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from typing import Any, Literal, Protocol

import yaml

from coharden.llm.cache import canonical_json
from coharden.mutation.context import FileChange, FixContext
from coharden.patches import make_patch
from coharden.schema.mutant import TARGETED_OPERATORS, Operator
from coharden.schema.testpatch import TestPatch

LLM_OPERATORS: tuple[Operator, ...] = (Operator.VANILLA, *TARGETED_OPERATORS)

EditFormat = Literal["blocks", "diff"]
"""What a reply is asked to hold: SEARCH/REPLACE blocks (the default: what large models apply most reliably)
or one unified diff (what small local models write best; see :mod:`coharden.mutation.llm_edits`, which
parses either whatever was asked)."""


class PromptLayout(Protocol):
    """How a prompt shows the fixed code and what it asks a reply to hold (the LLM mutator's settings say it): a
    fixed file up to ``whole_file_lines`` lines whole, a longer one as windows of ``context_lines`` lines around
    the fix; the reply in ``edit_format``."""

    @property
    def context_lines(self) -> int: ...
    @property
    def whole_file_lines(self) -> int: ...
    @property
    def edit_format(self) -> EditFormat: ...


@dataclass(frozen=True)
class OperatorPrompt:
    """What the prompt says about one operator."""

    instruction: str
    realizations: tuple[str, ...]


def _prompt_text(name: str) -> str:
    return resources.files("coharden.mutation").joinpath("prompts", name).read_text(encoding="utf-8")


@cache
def operator_prompts() -> dict[Operator, OperatorPrompt]:
    """The instruction and typical realizations of every LLM operator (``prompts/operators.yaml``)."""
    data = yaml.safe_load(_prompt_text("operators.yaml"))
    prompts = {Operator(name): OperatorPrompt(" ".join(spec["instruction"].split()),
                                              tuple(" ".join(r.split()) for r in spec["realizations"]))
               for name, spec in data.items()}
    missing = [str(op) for op in LLM_OPERATORS if op not in prompts]
    if missing:  # pragma: no cover - a packaging error
        raise RuntimeError(f"prompts/operators.yaml lacks operators {missing}")
    return prompts


#: How the prompts name the reply per edit format: after "Reply with", and as the subject of "... applied".
_REPLY_KIND: dict[str, str] = {"blocks": "SEARCH/REPLACE blocks", "diff": "one unified diff"}
_REPLY_SUBJECT: dict[str, str] = {"blocks": "Your SEARCH/REPLACE blocks are", "diff": "Your diff is"}


@cache
def system_prompt(edit_format: EditFormat = "blocks") -> str:
    return Template(_prompt_text("system.md")).substitute(reply_kind=_REPLY_KIND[edit_format]).strip()


@cache
def _user_template() -> Template:
    return Template(_prompt_text("user.md"))


EXAMPLE_BLOCK = """path/to/file.py
<<<<<<< SEARCH
exact lines of the fixed code
=======
the lines that replace them
>>>>>>> REPLACE"""

EXAMPLE_DIFF = """--- a/path/to/file.py
+++ b/path/to/file.py
@@ -10,3 +10,3 @@
 a context line, copied from the fixed code
-a line of the fixed code that the variant removes
+the line the variant puts there
 another context line"""


def _fenced(text: str, lang: str = "") -> str:
    """``text`` in a markdown code fence longer than any backtick run inside it."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{fence}{lang}\n{body}{fence}"


def _excerpts(change: FileChange, context: int, whole_file_lines: int) -> list[tuple[int, int]]:
    """1-based inclusive line ranges of the fixed file to show: the whole file if short, else windows of
    ``context`` lines around every changed line, merged."""
    lines = change.new_lines
    if len(lines) <= whole_file_lines:
        return [(1, max(1, len(lines)))]
    centres: list[int] = []
    for _tag, _i1, _i2, j1, j2 in change.opcodes():
        centres += list(range(j1 + 1, j2 + 1)) or [j1 + 1]
    ranges: list[tuple[int, int]] = []
    for c in sorted(set(centres)):
        start, end = max(1, c - context), min(len(lines), c + context)
        if ranges and start <= ranges[-1][1] + 1:
            ranges[-1] = (ranges[-1][0], max(ranges[-1][1], end))
        else:
            ranges.append((start, end))
    return ranges or [(1, min(len(lines), 2 * context))]


def render_fixed_code(ctx: FixContext, context: int = 40, whole_file_lines: int = 400) -> str:
    parts: list[str] = []
    for change in ctx.files:
        lang = "python" if change.path.endswith(".py") else ""
        lines = change.new_lines
        ranges = _excerpts(change, context, whole_file_lines)
        parts.append(f"## {change.path}")
        for start, end in ranges:
            if len(ranges) > 1 or (start, end) != (1, max(1, len(lines))):
                parts.append(f"lines {start}-{end} of {len(lines)}:")
            parts.append(_fenced("".join(lines[start - 1:end]), lang))
    return "\n\n".join(parts)


def build_messages(ctx: FixContext, tests: tuple[TestPatch, TestPatch], operator: Operator, layout: PromptLayout,
                   *, problem_statement: str = "") -> list[dict[str, str]]:
    """The chat messages of one sample. ``tests`` are shown as Test 1, Test 2 in the order given (the caller
    draws it, see :func:`swap_tests`); nothing else about them (names, which is the candidate) reaches the
    prompt."""
    spec = operator_prompts()[operator]
    first, second = tests
    edit_format = layout.edit_format
    fix_diff = make_patch((c.path, c.old or None, c.new) for c in ctx.files)
    issue = problem_statement.strip()
    user = _user_template().substitute(
        issue_section=f"# Issue\n\n{issue}\n\n" if issue else "",
        fix_diff=_fenced(fix_diff, "diff"),
        fixed_code=render_fixed_code(ctx, layout.context_lines, layout.whole_file_lines),
        test_1=_fenced(first.patch, "diff"),
        test_2=_fenced(second.patch, "diff"),
        operator=str(operator),
        instruction=spec.instruction,
        realizations="\n".join(f"- {r}" for r in spec.realizations),
        reply_subject=_REPLY_SUBJECT[edit_format],
        reply_format=Template(_prompt_text(f"format_{edit_format}.md")).substitute(
            example=_fenced(EXAMPLE_DIFF, "diff") if edit_format == "diff" else _fenced(EXAMPLE_BLOCK),
            editable_files=", ".join(f"`{c.path}`" for c in ctx.files)).strip(),
    )
    return [{"role": "system", "content": system_prompt(edit_format)},
            {"role": "user", "content": user.strip() + "\n"}]


def prompt_hash(messages: Sequence[dict[str, Any]]) -> str:
    """sha256 of the canonical JSON of the messages (the request hash also covers model, params, sample)."""
    return hashlib.sha256(canonical_json(list(messages)).encode("ascii")).hexdigest()


def swap_tests(seed: int, operator: Operator, sample_index: int) -> bool:
    """Whether this sample shows the tests in reversed order: a fair coin per sample, fixed by the seed
    (string seeds are hashed with sha512 by :mod:`random`, so this does not depend on PYTHONHASHSEED)."""
    return random.Random(f"{seed}:{operator}:{sample_index}").random() < 0.5
