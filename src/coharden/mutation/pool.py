"""Build the mechanical mutant pool of a fix: generate, admit, deduplicate, sample (seeded).

Admission drops mutants that do not parse, equal the fix, equal the buggy code, or duplicate another
(all compared on the AST without positions, so layout-only differences count as equal).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.mutation import behavior_substitution, incomplete_fix, input_specific_shortcut, symptom_suppression
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext, normalized, parses
from coharden.patches import is_test_path, make_patch, touched_files
from coharden.schema.mutant import TARGETED_OPERATORS, Mutant, Operator
from coharden.schema.testpatch import TestPatch

MECHANICAL_OPERATORS = TARGETED_OPERATORS


def fix_context(executor: InstanceExecutor, fix: str) -> FixContext:
    """Buggy and fixed content of every source file the fix touches."""
    fixed = executor.post_images(fix)
    files = [FileChange(path, executor.base_file(path) or "", fixed[path] or "")
             for path in touched_files(fix) if fixed.get(path) is not None
             and not is_test_path(path, executor.settings.test_patterns)]
    return FixContext(files)


def record_inputs(executor: InstanceExecutor, fix: str, tests: Sequence[TestPatch],
                  ctx: FixContext) -> list[dict[str, Any]]:
    """Run each test on the fixed code with the recorder plugin; the deterministic inputs of touched functions."""
    targets = input_specific_shortcut.targets(ctx)
    if not targets:
        return []
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-rec-"))
    try:
        shutil.copy(Path(__file__).with_name("recorder_plugin.py"), plugin_dir / "coharden_recorder.py")
        records: list[dict[str, Any]] = []
        root = executor.workspace_root()
        targets_file = plugin_dir / "targets.json"
        targets_file.write_text(json.dumps([{"file": str(root / t["path"]), "qualname": t["qualname"]}
                                            for t in targets]))
        for index, test in enumerate(tests):
            out = plugin_dir / f"records-{index}.jsonl"
            executor.run_raw(fix, test, extra_args=["-p", "coharden_recorder"], extra_env={
                "PYTHONPATH": os.pathsep.join(p for p in (str(plugin_dir), os.environ.get("PYTHONPATH", "")) if p),
                "COHARDEN_RECORD_TARGETS": str(targets_file),
                "COHARDEN_RECORD_OUT": str(out),
            })
            if out.exists():
                for line in out.read_text().splitlines():
                    rec = json.loads(line)
                    rec["path"] = str(Path(rec.pop("file")).relative_to(root.resolve()))
                    rec["from_test"] = test.name or f"test{index}"
                    records.append(rec)
        seen: set[tuple[str, str, str]] = set()
        unique = []
        for rec in records:
            ident = (rec["qualname"], rec["key"], rec["kind"])
            if ident not in seen:
                seen.add(ident)
                unique.append(rec)
        return unique
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)


class Pool:
    """The admitted mutants and the count of dropped candidates per operator and reason."""

    def __init__(self) -> None:
        self.mutants: list[Mutant] = []
        self.dropped: Counter[tuple[str, str]] = Counter()

    def summary(self) -> dict[str, Any]:
        per_op = Counter(m.operator.value for m in self.mutants)
        dropped: dict[str, dict[str, int]] = {}
        for (op, reason), n in sorted(self.dropped.items()):
            dropped.setdefault(op, {})[reason] = n
        return {"generated": dict(sorted(per_op.items())), "dropped": dropped}


def admit(ctx: FixContext, raw: Iterable[RawMutant], pool: Pool, budget: dict[Operator, int | None],
          seed: int) -> None:
    base = {c.path: c.old for c in ctx.files}
    fixed_norm = {c.path: normalized(c.new) for c in ctx.files}
    buggy_norm = {c.path: normalized(c.old) for c in ctx.files}
    per_operator: dict[Operator, list[Mutant]] = {}
    seen: set[tuple[tuple[str, str], ...]] = set()
    for candidate in raw:
        op = candidate.operator.value
        files = {path: candidate.files.get(path, base[path]) for path in base}
        if not all(parses(code) for path, code in files.items() if path.endswith(".py")):
            pool.dropped[(op, "does_not_parse")] += 1
            continue
        norm = tuple(sorted((p, normalized(c)) for p, c in files.items()))
        if all(n == fixed_norm[p] for p, n in norm):
            pool.dropped[(op, "equals_fix")] += 1
            continue
        if all(n == buggy_norm[p] for p, n in norm):
            pool.dropped[(op, "equals_buggy")] += 1
            continue
        if norm in seen:
            pool.dropped[(op, "duplicate")] += 1
            continue
        seen.add(norm)
        patch = make_patch((path, base[path] or None, files[path]) for path in base)
        mutants = per_operator.setdefault(candidate.operator, [])
        mutants.append(Mutant(id=f"{op}-{len(mutants) + 1}", operator=candidate.operator,
                              description=candidate.description, location=candidate.location, patch=patch,
                              meta=candidate.meta))
    rng = random.Random(seed)
    for operator in MECHANICAL_OPERATORS:
        mutants = per_operator.get(operator, [])
        limit = budget.get(operator)
        if limit is not None and len(mutants) > limit:
            chosen = sorted(rng.sample(range(len(mutants)), limit))
            pool.dropped[(operator.value, "over_budget")] += len(mutants) - limit
            mutants = [mutants[i] for i in chosen]
        pool.mutants += mutants


def build_pool(executor: InstanceExecutor, fix: str, tests: Sequence[TestPatch], *,
               operators: Sequence[Operator] = MECHANICAL_OPERATORS, per_operator: int | None = None,
               seed: int = 0) -> Pool:
    """Mechanical mutants of ``fix``. ``tests`` (candidate and reference) feed the input recorder."""
    ctx = fix_context(executor, fix)
    pool = Pool()
    if not ctx.python_files:
        return pool
    raw: list[RawMutant] = []
    if Operator.INCOMPLETE_FIX in operators:
        raw += incomplete_fix.generate(ctx)
    if Operator.BEHAVIOR_SUBSTITUTION in operators:
        raw += behavior_substitution.generate(ctx)
    if Operator.SYMPTOM_SUPPRESSION in operators:
        raw += symptom_suppression.generate(ctx)
    if Operator.INPUT_SPECIFIC_SHORTCUT in operators:
        records = record_inputs(executor, fix, tests, ctx)
        raw += input_specific_shortcut.generate(ctx, records)
    admit(ctx, raw, pool, {op: per_operator for op in operators}, seed)
    return pool
