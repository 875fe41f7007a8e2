"""Build the mechanical mutant pool of a fix: generate, admit, deduplicate, sample (seeded).

Admission drops mutants that do not parse, equal the fix, equal the buggy code, or duplicate another
(all compared on the AST without positions, so layout-only differences count as equal).
"""

from __future__ import annotations

import functools
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.mutation.candidates import RawMutant
from coharden.mutation.context import (
    FileChange,
    FixContext,
    function_spans,
    functions_added,
    functions_changed,
    normalized,
    record_targets,
)
from coharden.mutation.recording import (  # noqa: F401 - re-exported: callers import them from the pool
    FAILED,
    Mapper,
    Recorder,
    Recording,
    called_by,
    failures,
    record_calls,
    test_labels,
)
from coharden.mutation.registry import BUGGY_RECORDS, FIXED_RECORDS, OperatorInputs, registry
from coharden.mutation.revealing import (  # noqa: F401 - re-exported: callers import them from the pool
    buggy_symptoms,
    called_functions,
    input_diagnosis,
    probes_of,
    revealing_inputs,
)
from coharden.mutation.sampling import Draw, stratified, uniform
from coharden.patches import is_test_path, make_patch, touched_files
from coharden.schema.mpe_config import MPEConfig
from coharden.schema.mutant import MECHANICAL_DEFAULT, Mutant, Operator
from coharden.schema.testpatch import TestPatch


def mechanical_operators() -> tuple[Operator, ...]:
    """Every registered mechanical operator, in registry order: the built-in ones
    (``schema.mutant.MECHANICAL_DEFAULT``), then those installed distributions add."""
    return tuple(registry())


Key = tuple[tuple[str, str], ...]
"""A mutant's identity for deduplication: sorted (path, normalized AST) of every file of the fix."""


def fix_context(executor: InstanceExecutor, fix: str) -> FixContext:
    """Buggy and fixed content of every source file the fix touches."""
    fixed = executor.post_images(fix)
    files = [FileChange(path, executor.base_file(path) or "", fixed[path] or "")
             for path in touched_files(fix) if fixed.get(path) is not None
             and not is_test_path(path, executor.settings.tests.test_patterns)]
    return FixContext(files)


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
        self.skipped: Counter[tuple[str, str]] = Counter()
        """(operator, reason) -> sites an operator could not use (no recorded input, a frame outside the
        repository, unparseable source, ...)."""
        self.unexercised: Counter[str] | None = None
        """With ``prefer_exercised``: per operator, the admitted candidates (before sampling) that change only
        code no test ran."""
        self.recording_seconds = 0.0
        """Wall time the input recorder's test runs took while building the pool."""
        self.fixed_records: list[dict[str, Any]] = []
        """The recorder's records of the tests on the fixed code (empty when no operator needed them)."""
        self.values_dropped: Counter[str] = Counter()
        """reason -> calls the recorder did not keep because a value (argument, receiver or outcome) had no safe
        encoding (see :mod:`coharden.mutation.recorder_values`), over both recordings."""
        self.dropped_types: Counter[str] = Counter()
        """type name -> such calls, by the type of the value that could not be encoded."""
        self.input_reason: tuple[str, str] | None = None
        """Why the recorder captured no bug-revealing input (reason, detail; see :func:`input_diagnosis`), when
        an operator built from recorded inputs was chosen and none was captured."""
        self.warnings: list[str] = []
        """What the output must say loudly: the input-based operators made nothing although the tests call
        a function the fix touches (or the recorder failed)."""

    def summary(self) -> dict[str, Any]:
        per_op = Counter(str(m.operator) for m in self.mutants)
        dropped: dict[str, dict[str, int]] = {}
        for (op, reason), n in sorted(self.dropped.items()):
            dropped.setdefault(op, {})[reason] = n
        out: dict[str, Any] = {"generated": dict(sorted(per_op.items())), "dropped": dropped}
        if self.skipped:
            skipped: dict[str, dict[str, int]] = {}
            for (op, reason), n in sorted(self.skipped.items()):
                skipped.setdefault(op, {})[reason] = n
            out["skipped"] = skipped
        if self.unexercised is not None:
            out["unexercised_candidates"] = dict(sorted(self.unexercised.items()))
        if self.values_dropped:
            out["values_dropped"] = dict(sorted(self.values_dropped.items()))
            out["values_dropped_types"] = dict(self.dropped_types.most_common(10))
        if self.input_reason is not None:
            out["no_revealing_input"] = {"reason": self.input_reason[0], "detail": self.input_reason[1]}
        if self.warnings:
            out["warnings"] = list(self.warnings)
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

    def check(self, files: dict[str, str], seen: set[Key],
              originals: dict[str, str] | None = None) -> tuple[str | None, Key]:
        """``(reason or None, key)`` for ``files``, the full candidate content of every file of the fix plus
        any file outside the fix the candidate changes (``originals``: their base content)."""
        if not all(not self.normal(code).startswith("<unparseable>")  # what parses() says, one parse
                   for path, code in files.items() if path.endswith(".py")):
            return "does_not_parse", ()
        norm = tuple(sorted((p, self.normal(c)) for p, c in files.items()))
        outside = {p: self.normal(c) for p, c in (originals or {}).items()}
        if all(n == self.fixed.get(p, outside.get(p)) for p, n in norm):
            return "equals_fix", norm
        if all(n == self.buggy.get(p, outside.get(p)) for p, n in norm):
            return "equals_buggy", norm
        if norm in seen:
            return "duplicate", norm
        return None, norm


def admit(ctx: FixContext, raw: Iterable[RawMutant], pool: Pool, draw: Draw) -> None:
    """Admit ``raw`` through the filter, then draw each operator's sample as ``draw`` says (see :class:`Draw`).
    Mutants that name the test whose recorded input they use (``meta["from_test"]``) are drawn from each such
    test in turn; in an ``ordered`` draw, by the same rules (preferred first, source tests in turn)."""
    base = {c.path: c.old for c in ctx.files}
    per_operator: dict[Operator, list[tuple[tuple[str, RawMutant, dict[str, str], dict[str, str]], Key]]] = {}
    preferred_of: dict[Operator, list[bool]] = {}
    seen: set[Key] = set(pool.keys)
    check = AdmissionFilter.of(ctx).check
    for candidate in raw:
        op = str(candidate.operator)
        originals = {p: c for p, c in candidate.originals.items() if p not in base}
        files = {path: candidate.files.get(path, base[path]) for path in base}
        files.update({path: candidate.files.get(path, content) for path, content in originals.items()})
        reason, norm = check(files, seen, originals)
        if reason is not None:
            pool.dropped[(op, reason)] += 1
            continue
        seen.add(norm)
        mutants = per_operator.setdefault(candidate.operator, [])
        preferred = preferred_of.setdefault(candidate.operator, [])
        mutants.append(((f"{op}-{len(mutants) + 1}", candidate, files, {**base, **originals}), norm))
        preferred.append(draw.prefer is None or draw.prefer(files))
    if draw.prefer is not None:
        pool.unexercised = Counter({str(op): flags.count(False) for op, flags in preferred_of.items()})
    for operator in (op for op in registry() if op in per_operator):
        mutants = per_operator.get(operator, [])
        limit, ordered = draw.budget.get(operator), draw.ordered
        if ordered or (limit is not None and len(mutants) > limit):
            rng = random.Random(f"{draw.seed}:{operator}")  # each operator's draw independent of the others'
            flags = preferred_of[operator]
            tiers = [list(range(len(mutants)))] if draw.prefer is None else \
                [[i for i, ok in enumerate(flags) if ok], [i for i, ok in enumerate(flags) if not ok]]
            sources = [str(c.meta.get("from_test", "")) for (_, c, _, _), _ in mutants]
            take = len(mutants) if ordered else int(limit)  # type: ignore[arg-type]
            drawn = stratified(rng, tiers, sources, take) if len(set(sources)) > 1 else uniform(rng, tiers, take)
            chosen = drawn if ordered else sorted(drawn)
            if not ordered:
                pool.dropped[(str(operator), "over_budget")] += len(mutants) - take
            mutants = [mutants[i] for i in chosen]
        # the patch (a diff of every file of the fix) is made only for the mutants kept
        fixed = {c.path: c.new for c in ctx.files}
        pool.mutants += [Mutant(id=ident, operator=c.operator, description=c.description, location=c.location,
                                patch=make_patch((path, bases[path] or None, files[path]) for path in bases),
                                change=change_of({**bases, **fixed}, files), meta=c.meta)
                         for (ident, c, files, bases), _ in mutants]
        pool.keys.update(k for _, k in mutants)


def change_of(fixed: dict[str, str], files: dict[str, str]) -> str:
    """The diff from the fixed code to a mutant's ``files``: what its operator changed in the fix (a mutant's
    ``patch`` is against the buggy code, so it shows the fix and the change as one)."""
    return make_patch((path, fixed.get(path) or None, content or None) for path, content in files.items()
                      if content != fixed.get(path, ""))


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
                    patch=make_patch((path, base[path] or None, files[path]) for path in base),
                    change=change_of(fixed, files))
    pool.keys.add(norm)
    pool.mutants.append(mutant)
    return mutant


@dataclass(frozen=True)
class PoolRequest:
    """Which pool :func:`build_pool` builds: everything that decides which mutants come out of it (how its
    recordings run is told to build_pool apart). Mechanical mutants of ``fix`` (a source-only patch) from
    the registered ``operators``; ``tests`` (candidate and reference) feed the input recorder, run only when an
    operator needs it (or ``prefer_exercised``).

    ``per_operator``: at most this many mutants per operator, drawn with ``seed`` (None: all).
    ``prefer_exercised``: when an operator has more mutants than ``per_operator``, sample first among those
    that change code the tests run on the fixed code (see :func:`exercised`). A mutant confined to functions no
    test calls is accepted by every test, so it only dilutes laxity; on fixes with many hunks a uniform sample
    can consist of nothing else. ``ordered``: keep every mutant, each operator's in its seeded draw order (see
    :func:`admit`; sequential MPE)."""

    fix: str
    tests: Sequence[TestPatch]
    operators: Sequence[Operator] = MECHANICAL_DEFAULT
    per_operator: int | None = None
    seed: int = 0
    prefer_exercised: bool = False
    ordered: bool = False

    @classmethod
    def for_mpe(cls, fix: str, tests: Sequence[TestPatch], config: MPEConfig) -> PoolRequest:
        """An MPE run's pool: its mechanical operators, N per operator, or (sequential) every mutant in its
        seeded draw order."""
        mechanical = mechanical_operators()
        return cls(fix, tests, [op for op in config.operators if op in mechanical],
                   per_operator=None if config.is_sequential else config.per_operator, seed=config.seed,
                   prefer_exercised=config.prefer_exercised, ordered=config.is_sequential)


def build_pool(executor: InstanceExecutor, request: PoolRequest, *, mapper: Mapper | None = None,
               recorder: Recorder | None = None, ctx: FixContext | None = None) -> Pool:
    """The pool ``request`` asks for. The recorder's runs go through ``mapper`` (see :func:`record_calls`), and
    ``recorder``, with the signature of :func:`record_calls`, replaces it, e.g. to serve recordings started
    before the pool was asked for.

    ``ctx``: the fix's context when the caller has it (then the executor's workspace is not used here: other
    files are read from the base commit's git objects). The operators that need no recording generate first,
    so a caller building the pool in the background overlaps that work with the recordings; the candidates
    still reach admission in registry order."""
    fix, tests, operators = request.fix, request.tests, request.operators
    ctx = ctx or fix_context(executor, fix)
    pool = Pool()
    if not ctx.python_files:
        return pool
    chosen = {op: registry()[Operator(op)]() for op in operators}
    needs = recordings_needed(operators)
    inputs = OperatorInputs(ctx, base_file=executor.base_file,
                            is_test_path=lambda path: is_test_path(path, executor.settings.tests.test_patterns),
                            operators=tuple(Operator(op) for op in operators))
    generated: dict[Operator, list[RawMutant]] = {}
    for op, operator in chosen.items():
        if not type(operator).needs:
            generated[op] = list(operator.generate(inputs))
    targets = record_targets(ctx)
    mark = time.monotonic()
    record = recorder or functools.partial(record_calls, mapper=mapper)
    fixed_records = record(executor, Recording(fix, tests, targets)) \
        if FIXED_RECORDS in needs or BUGGY_RECORDS in needs or request.prefer_exercised else []
    buggy_records = record(executor, Recording("", tests, targets, probes=probes_of(fixed_records))) \
        if BUGGY_RECORDS in needs else []
    pool.recording_seconds = time.monotonic() - mark
    pool.fixed_records = fixed_records
    for rec in (*fixed_records, *buggy_records):
        if rec["kind"] == "summary":
            pool.values_dropped.update(rec.get("dropped") or {})
            pool.dropped_types.update(rec.get("dropped_types") or {})
    inputs.fixed_records, inputs.buggy_records = fixed_records, buggy_records
    raw: list[RawMutant] = []
    for op, operator in chosen.items():
        raw += generated[op] if op in generated else operator.generate(inputs)
    pool.skipped.update(inputs.skipped)
    _diagnose(pool, [op for op, operator in chosen.items() if FIXED_RECORDS in type(operator).needs], raw,
              inputs, targets)
    prefer: Callable[[dict[str, str]], bool] | None = None
    called = called_functions(fixed_records, len(tests)) if request.prefer_exercised else None
    if called is not None:
        recorded = {(t["path"], t["qualname"]) for t in targets}
        prefer = functools.partial(exercised, ctx, targets=recorded, called=called)
    admit(ctx, raw, pool, Draw({op: request.per_operator for op in chosen}, request.seed, prefer, request.ordered))
    return pool


def _diagnose(pool: Pool, input_operators: list[Operator], raw: list[RawMutant], inputs: OperatorInputs,
              targets: list[dict[str, str]]) -> None:
    """Note why no bug-revealing input was captured (from the records in ``inputs``), and warn when the
    input-based operators then made no candidate although a test called a touched function (or a recording
    failed): the pool lacks the kinds of wrong fix agents write most (special-casing the example, fixing at the
    caller), so a Rigorous class rests on the other kinds alone."""
    if not input_operators:
        return
    fixed, buggy = inputs.fixed_records, inputs.buggy_records
    pool.warnings += [f"recorder failed for {failure}" for failure in failures(fixed, buggy)]
    pool.input_reason = input_diagnosis(fixed, buggy, targets, _only_adds(inputs.ctx))
    made = {c.operator for c in raw}
    empty = [str(op) for op in input_operators if op not in made]
    if pool.input_reason is None or not empty or pool.input_reason[0] in ("not_called", "no_function_touched"):
        return
    reason, detail = pool.input_reason
    if reason != "recorder_failed":  # a failure is said above, with its reason
        pool.warnings.append(f"no bug-revealing input recorded ({reason}): {detail}")
    pool.warnings.append(f"the pool lacks the input-based kinds ({', '.join(empty)}): the class rests on the "
                         "other operators' mutants only")


def _only_adds(ctx: FixContext) -> list[str]:
    """The functions the fix adds, when it changes no function of the buggy code itself (the recorder then
    watches only the neighbours of its insertions); [] otherwise."""
    changes = [c for c in ctx.python_files if c.old]
    if any(functions_changed(c) for c in changes):
        return []
    return [name for c in changes for name in functions_added(c)]


def recordings_needed(operators: Sequence[Operator]) -> set[str]:
    """What the chosen operators need recorded (``FIXED_RECORDS`` / ``BUGGY_RECORDS``) before they run."""
    return set().union(*(registry()[Operator(op)].needs for op in operators))


