"""Build the mechanical mutant pool of a fix: generate, admit, deduplicate, sample (seeded).

Admission drops mutants that do not parse, equal the fix, equal the buggy code, or duplicate another
(all compared on the AST without positions, so layout-only differences count as equal).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import random
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.mutation import behavior_substitution, incomplete_fix, input_specific_shortcut, symptom_suppression
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import FileChange, FixContext, function_spans, normalized
from coharden.patches import is_test_path, make_patch, touched_files
from coharden.schema.mutant import TARGETED_OPERATORS, Mutant, Operator
from coharden.schema.testpatch import TestPatch

MECHANICAL_OPERATORS = TARGETED_OPERATORS

Key = tuple[tuple[str, str], ...]
"""A mutant's identity for deduplication: sorted (path, normalized AST) of every file of the fix."""


def fix_context(executor: InstanceExecutor, fix: str) -> FixContext:
    """Buggy and fixed content of every source file the fix touches."""
    fixed = executor.post_images(fix)
    files = [FileChange(path, executor.base_file(path) or "", fixed[path] or "")
             for path in touched_files(fix) if fixed.get(path) is not None
             and not is_test_path(path, executor.settings.test_patterns)]
    return FixContext(files)


Mapper = Callable[[Sequence[Callable[[InstanceExecutor], Any]]], list[Any]]
"""Runs tasks (functions of an executor) and returns their results in order, e.g. on several workers."""

RECORDER = Path(__file__).with_name("recorder_plugin.py")


def _serial(executor: InstanceExecutor) -> Mapper:
    return lambda tasks: [task(executor) for task in tasks]


def record_calls(executor: InstanceExecutor, source_patch: str, tests: Sequence[TestPatch],
                 targets: list[dict[str, str]], probes: list[dict[str, Any]] | None = None, *,
                 mapper: Mapper | None = None) -> list[dict[str, Any]]:
    """Run each test on base + ``source_patch`` with the recorder plugin: the deterministic inputs and outcomes
    of ``targets``, one ``summary`` record per function (calls seen, exception types that escaped), and, for
    ``probes`` (records from another run), a ``probe`` record with this code's outcome on that input.

    Tests that lay down the same files with the same ids (the golden test and a copy of it) are recorded once.
    ``mapper`` runs the per-test recordings (in parallel when it has several workers). With a result store the
    records of one (code, test, targets, probes) are kept, so grading several tests of one instance records the
    reference test once."""
    if not targets:
        return []
    first: dict[str, int] = {}
    for index, test in enumerate(tests):
        first.setdefault(_recording_ident(test), index)
    unique = sorted(set(first.values()))
    runs = (mapper or _serial(executor))(
        [functools.partial(_record_one, source_patch=source_patch, test=tests[i], targets=targets, probes=probes)
         for i in unique])
    by_index = dict(zip(unique, runs, strict=True))
    records: list[dict[str, Any]] = []
    for index, test in enumerate(tests):
        ran = by_index[first[_recording_ident(test)]]
        if ran is None:
            continue
        label = test.name or f"test{index}"
        records.append({"kind": "session", "from_test": label})
        records += [{**rec, "from_test": label} for rec in ran]
    return records


def _recording_ident(test: TestPatch) -> str:
    """What a recording run depends on from the test: the files it lays down and the ids it runs."""
    files = test.files or {"<patch>": test.patch}
    return json.dumps([sorted(files.items(), key=lambda kv: kv[0]), list(test.ids)], default=str)


def _record_one(executor: InstanceExecutor, *, source_patch: str, test: TestPatch, targets: list[dict[str, str]],
                probes: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """The records (paths relative to the workspace, no ``from_test``) of one test, or None when the recorder
    did not run. Served from / kept in the executor's store when it has one."""
    store = executor.store
    key = hashlib.sha256(json.dumps([
        "recording", 1, executor.env_id, executor.instance.repo, executor.base_commit, source_patch,
        _recording_ident(test), targets, probes or [], hashlib.sha256(RECORDER.read_bytes()).hexdigest(),
    ], sort_keys=True, default=str).encode()).hexdigest()
    if store is not None:
        cached = store.get_record("recording", key)
        if cached is not None:
            return cached["records"]
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-rec-"))
    try:
        shutil.copy(RECORDER, plugin_dir / "coharden_recorder.py")
        root = executor.workspace_root()
        targets_file = plugin_dir / "targets.json"
        targets_file.write_text(json.dumps([{"file": str(root / t["path"]), "qualname": t["qualname"]}
                                            for t in targets]))
        env = {
            "PYTHONPATH": os.pathsep.join(p for p in (str(plugin_dir), os.environ.get("PYTHONPATH", "")) if p),
            "COHARDEN_RECORD_TARGETS": str(targets_file),
        }
        if probes:
            probe_file = plugin_dir / "probes.jsonl"
            probe_file.write_text("".join(json.dumps({"file": str(root / r["path"]), "qualname": r["qualname"],
                                                      "key": r["key"], "args_pickle": r["args_pickle"]}) + "\n"
                                          for r in probes))
            env["COHARDEN_RECORD_PROBE"] = str(probe_file)
        out = plugin_dir / "records.jsonl"
        run = executor.run_raw(source_patch, test, extra_args=["-p", "coharden_recorder"],
                               extra_env={**env, "COHARDEN_RECORD_OUT": str(out)})
        if not out.exists():  # the plugin opens it at start: it ran, even if no target was called
            return None
        records = []
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            rec["path"] = str(Path(rec.pop("file")).relative_to(root.resolve()))
            records.append(rec)
        if store is not None and not run.timed_out:
            store.put_record("recording", key, {"records": records})
        return records
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)


def revealing_inputs(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Inputs recorded on the fixed code whose outcome differs on the buggy code (or was not seen there):
    a shortcut for an input the bug does not affect would only be the buggy function again."""
    on_buggy = {(r["qualname"], r["key"]): (r["kind"], r["value_pickle"]) for r in buggy
                if r["kind"] in ("return", "raise")}
    on_buggy.update({(r["qualname"], r["key"]): (r["outcome"], r["value_pickle"]) for r in buggy
                     if r["kind"] == "probe"})
    seen: set[tuple[str, str]] = set()
    kept = []
    for rec in fixed:
        if rec["kind"] not in ("return", "raise"):
            continue
        ident = (rec["qualname"], rec["key"])
        if ident in seen or on_buggy.get(ident) == (rec["kind"], rec["value_pickle"]):
            continue
        seen.add(ident)
        kept.append(rec)
    return kept


def buggy_symptoms(buggy: list[dict[str, Any]]) -> dict[str, set[str]]:
    """Per touched function observed on the buggy code: the exception types that escaped it."""
    symptoms: dict[str, set[str]] = {}
    for rec in buggy:
        if rec["kind"] == "summary" and rec["calls"]:
            symptoms.setdefault(rec["qualname"], set()).update(rec["raised"])
    return symptoms


def called_functions(records: list[dict[str, Any]], tests: int) -> set[tuple[str, str]] | None:
    """(path, qualname) of the recorded functions some test called; None unless the recorder ran for every
    test (then 'not called' cannot be told from 'not recorded')."""
    if sum(1 for r in records if r["kind"] == "session") < tests:
        return None
    return {(r["path"], r["qualname"]) for r in records if r["kind"] == "summary" and r["calls"]}


def exercised(ctx: FixContext, files: dict[str, str], targets: set[tuple[str, str]],
              called: set[tuple[str, str]]) -> bool:
    """False when every line in which ``files`` differ from the fixed code lies in a recorded function
    (``targets``) that no test called on the fixed code: a mutant there cannot change any test's outcome.
    Changes outside functions (module or class level, run at import) and in unrecorded functions count as
    exercised."""
    for change in ctx.files:
        mutated = files.get(change.path, change.old)
        if mutated == change.new:
            continue
        diff = FileChange(change.path, change.new, mutated)
        spans = [(function_spans(diff.new), sorted(diff.added_lines())),
                 (function_spans(diff.old), sorted(diff.changed_old_lines()))]
        for span, lines in spans:
            for line in lines:
                inside = [(end - start, name) for name, (start, end) in span.items() if start <= line <= end]
                if not inside:
                    return True
                innermost = min(inside)[1]
                key = (change.path, innermost)
                if key not in targets or key in called:
                    return True
    return False


class Pool:
    """The admitted mutants and the count of dropped candidates per operator and reason."""

    def __init__(self) -> None:
        self.mutants: list[Mutant] = []
        self.dropped: Counter[tuple[str, str]] = Counter()
        self.keys: set[Key] = set()
        """Normalized file sets of the admitted mutants: later admissions (e.g. LLM mutants) are deduplicated
        against them, whatever their source."""
        self.unexercised: Counter[str] | None = None
        """With ``prefer_exercised``: per operator, the admitted candidates (before sampling) that change only
        code no test ran."""
        self.recording_seconds = 0.0
        """Wall time the input recorder's test runs took while building the pool."""

    def summary(self) -> dict[str, Any]:
        per_op = Counter(m.operator.value for m in self.mutants)
        dropped: dict[str, dict[str, int]] = {}
        for (op, reason), n in sorted(self.dropped.items()):
            dropped.setdefault(op, {})[reason] = n
        out: dict[str, Any] = {"generated": dict(sorted(per_op.items())), "dropped": dropped}
        if self.unexercised is not None:
            out["unexercised_candidates"] = dict(sorted(self.unexercised.items()))
        return out


@dataclass(frozen=True)
class AdmissionFilter:
    """The admission filter shared by every mutant source (mechanical and LLM).

    Reasons a candidate is dropped: ``does_not_parse``, ``equals_fix``, ``equals_buggy``, ``duplicate``.
    """

    fixed: dict[str, str]
    buggy: dict[str, str]
    memo: dict[str, str] = field(default_factory=dict, compare=False, repr=False)
    """content -> normalized AST: a candidate leaves most files of a multi-file fix as they are, and each
    content is parsed and dumped once instead of once per candidate (sympy-16597: 6 files, 65 candidates)."""

    @classmethod
    def of(cls, ctx: FixContext) -> AdmissionFilter:
        new = AdmissionFilter({}, {})
        return cls({c.path: new.normal(c.new) for c in ctx.files}, {c.path: new.normal(c.old) for c in ctx.files},
                   new.memo)

    def normal(self, code: str) -> str:
        """:func:`normalized`, once per content."""
        if code not in self.memo:
            self.memo[code] = normalized(code)
        return self.memo[code]

    def check(self, files: dict[str, str], seen: set[Key]) -> tuple[str | None, Key]:
        """``(reason or None, key)`` for ``files``, the full candidate content of every file of the fix."""
        if not all(not self.normal(code).startswith("<unparseable>")  # what parses() says, one parse
                   for path, code in files.items() if path.endswith(".py")):
            return "does_not_parse", ()
        norm = tuple(sorted((p, self.normal(c)) for p, c in files.items()))
        if all(n == self.fixed[p] for p, n in norm):
            return "equals_fix", norm
        if all(n == self.buggy[p] for p, n in norm):
            return "equals_buggy", norm
        if norm in seen:
            return "duplicate", norm
        return None, norm


def admit(ctx: FixContext, raw: Iterable[RawMutant], pool: Pool, budget: dict[Operator, int | None],
          seed: int, prefer: Callable[[dict[str, str]], bool] | None = None) -> None:
    """Admit ``raw`` through the filter, then sample at most ``budget[op]`` per operator (seeded). With
    ``prefer``, an operator's over-budget sample is drawn first from the mutants ``prefer`` accepts (files ->
    bool) and filled up from the rest."""
    base = {c.path: c.old for c in ctx.files}
    per_operator: dict[Operator, list[tuple[Mutant, Key]]] = {}
    preferred_of: dict[Operator, list[bool]] = {}
    seen: set[Key] = set(pool.keys)
    check = AdmissionFilter.of(ctx).check
    for candidate in raw:
        op = candidate.operator.value
        files = {path: candidate.files.get(path, base[path]) for path in base}
        reason, norm = check(files, seen)
        if reason is not None:
            pool.dropped[(op, reason)] += 1
            continue
        seen.add(norm)
        patch = make_patch((path, base[path] or None, files[path]) for path in base)
        mutants = per_operator.setdefault(candidate.operator, [])
        preferred = preferred_of.setdefault(candidate.operator, [])
        mutants.append((Mutant(id=f"{op}-{len(mutants) + 1}", operator=candidate.operator,
                               description=candidate.description, location=candidate.location, patch=patch,
                               meta=candidate.meta), norm))
        preferred.append(prefer is None or prefer(files))
    if prefer is not None:
        pool.unexercised = Counter({op.value: flags.count(False) for op, flags in preferred_of.items()})
    rng = random.Random(seed)
    for operator in MECHANICAL_OPERATORS:
        mutants = per_operator.get(operator, [])
        limit = budget.get(operator)
        if limit is not None and len(mutants) > limit:
            if prefer is None:
                chosen = sorted(rng.sample(range(len(mutants)), limit))
            else:
                flags = preferred_of[operator]
                first = [i for i, ok in enumerate(flags) if ok]
                rest = [i for i, ok in enumerate(flags) if not ok]
                chosen = rng.sample(first, min(limit, len(first)))
                chosen = sorted(chosen + rng.sample(rest, limit - len(chosen)))
            pool.dropped[(operator.value, "over_budget")] += len(mutants) - limit
            mutants = [mutants[i] for i in chosen]
        pool.mutants += [m for m, _ in mutants]
        pool.keys.update(k for _, k in mutants)


def admit_llm(ctx: FixContext, candidate: RawMutant, pool: Pool, mutant_id: str,
              admission: AdmissionFilter | None = None) -> Mutant | str:
    """Admit one LLM mutant through the same filter as mechanical ones (deduplicated against the whole pool).

    ``candidate.files`` must hold the content of every file of the fix (LLM edits start from the fixed code).
    Returns the admitted mutant (appended to ``pool`` with ``source="llm"``) or the reason it was dropped;
    drops are not added to ``pool.dropped`` (the LLM pool reports its own rejections, per sample).
    """
    base = {c.path: c.old for c in ctx.files}
    fixed = {c.path: c.new for c in ctx.files}
    files = {path: candidate.files.get(path, fixed[path]) for path in base}
    reason, norm = (admission or AdmissionFilter.of(ctx)).check(files, pool.keys)
    if reason is not None:
        return reason
    mutant = Mutant(id=mutant_id, operator=candidate.operator, description=candidate.description,
                    location=candidate.location, source="llm", meta=candidate.meta,
                    patch=make_patch((path, base[path] or None, files[path]) for path in base))
    pool.keys.add(norm)
    pool.mutants.append(mutant)
    return mutant


def build_pool(executor: InstanceExecutor, fix: str, tests: Sequence[TestPatch], *,
               operators: Sequence[Operator] = MECHANICAL_OPERATORS, per_operator: int | None = None,
               seed: int = 0, prefer_exercised: bool = False, mapper: Mapper | None = None,
               recorder: Callable[..., list[dict[str, Any]]] | None = None, ctx: FixContext | None = None) -> Pool:
    """Mechanical mutants of ``fix``. ``tests`` (candidate and reference) feed the input recorder (its runs go
    through ``mapper``, see :func:`record_calls`; ``recorder``, with the signature of :func:`record_calls`,
    replaces it, e.g. to serve recordings started before the pool was asked for).

    ``prefer_exercised``: when an operator has more mutants than ``per_operator``, sample first among those
    that change code the tests run on the fixed code (see :func:`exercised`). A mutant confined to functions no
    test calls is accepted by every test, so it only dilutes laxity; on fixes with many hunks a uniform sample
    can consist of nothing else.

    ``ctx``: the fix's context when the caller has it (then the executor's workspace is not used here). The
    operators that need no recording generate first, so a caller building the pool in the background overlaps
    that work with the recordings."""
    ctx = ctx or fix_context(executor, fix)
    pool = Pool()
    if not ctx.python_files:
        return pool
    raw: list[RawMutant] = []
    if Operator.INCOMPLETE_FIX in operators:
        raw += incomplete_fix.generate(ctx)
    if Operator.BEHAVIOR_SUBSTITUTION in operators:
        raw += behavior_substitution.generate(ctx)
    targets = input_specific_shortcut.targets(ctx)
    shortcut = Operator.INPUT_SPECIFIC_SHORTCUT in operators
    mark = time.monotonic()
    record = recorder or functools.partial(record_calls, mapper=mapper)
    fixed_records = record(executor, fix, tests, targets) if shortcut or prefer_exercised else []
    fixed_inputs = [r for r in fixed_records if r["kind"] in ("return", "raise")]
    needs_buggy = shortcut or Operator.SYMPTOM_SUPPRESSION in operators
    buggy_records = record(executor, "", tests, targets, probes=fixed_inputs) if needs_buggy else []
    pool.recording_seconds = time.monotonic() - mark
    if Operator.SYMPTOM_SUPPRESSION in operators:
        raw += symptom_suppression.generate(ctx, buggy_symptoms(buggy_records))
    if Operator.INPUT_SPECIFIC_SHORTCUT in operators:
        raw += input_specific_shortcut.generate(ctx, revealing_inputs(fixed_records, buggy_records))
    prefer: Callable[[dict[str, str]], bool] | None = None
    called = called_functions(fixed_records, len(tests)) if prefer_exercised else None
    if called is not None:
        recorded = {(t["path"], t["qualname"]) for t in targets}
        prefer = functools.partial(exercised, ctx, targets=recorded, called=called)
    admit(ctx, raw, pool, {op: per_operator for op in operators}, seed, prefer=prefer)
    return pool
