"""Whole-module mutation operators for ``coharden suite``.

Two engines produce :class:`ModuleMutant` s (the whole mutated module text, one change each):

* ``builtin`` (no extra dependency): the behavior-substitution sites of
  :mod:`coharden.mutation.behavior_substitution` applied to *every* line of the module (comparison,
  boolean, arithmetic, numeric, True/False, look-alike builtin and method swaps, slice bounds), plus
  ``statement_deletion`` (a simple statement inside a function body becomes ``pass``) and
  ``return_value`` (``return <expr>`` becomes ``return None``).
* ``mutmut``: mutmut 3's own operator set (its libcst visitor and pragma handling), when mutmut is installed.
  Only mutant *generation* comes from mutmut; every mutant is then run by coharden's kill oracle, so both
  engines are judged by the same mechanical verdict rules.

Lines carrying ``# pragma: no mutate`` are skipped by both engines. Mutants whose AST equals the original or
an earlier mutant (same code up to layout) are dropped: they cannot be killed and would only dilute the rate.
Ids are stable for a given module text and engine: ``m0001`` ... in (line, operator, description) order.
"""

from __future__ import annotations

import difflib
import functools
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from coharden.errors import CoHardenError
from coharden.mutation.behavior_substitution import SiteReplacer, SubstitutionSites
from coharden.mutation.context import normalized

ENGINES = ("builtin", "mutmut")
BUILTIN_OPERATORS = ("behavior_substitution", "statement_deletion", "return_value")
NO_MUTATE = "pragma: no mutate"


@dataclass(frozen=True)
class ModuleMutant:
    """One mutant of a module: the full mutated source plus where and what changed."""

    id: str
    operator: str
    line: int
    description: str
    source: str
    diff: str

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()

    def to_json(self, *, with_source: bool = False) -> dict[str, Any]:
        data = asdict(self)
        if not with_source:
            data.pop("source")
        return data


def unified_diff(original: str, mutated: str, path: str) -> str:
    lines = difflib.unified_diff(original.splitlines(keepends=True), mutated.splitlines(keepends=True),
                                 fromfile=f"a/{path}", tofile=f"b/{path}", n=2)
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


def _ignored_lines(source: str) -> set[int]:
    return {n for n, line in enumerate(source.splitlines(), 1) if NO_MUTATE in line}


# --- builtin engine -------------------------------------------------------------------------------------

class _StatementSites(cst.CSTVisitor):
    """``statement_deletion`` and ``return_value`` sites, inside function bodies only (like mutmut: module-level
    code runs at import, so deleting it mostly yields import errors, not interesting survivors). Only lines
    holding one statement; the statement is replaced (by ``pass`` / ``return None``), so blocks stay valid."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, ignored: set[int]) -> None:
        self.ignored = ignored
        self.sites: list[tuple[str, cst.CSTNode, cst.CSTNode, str, int]] = []
        self._depth = 0

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        self._depth += 1

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self._depth -= 1

    def visit_SimpleStatementLine(self, node: cst.SimpleStatementLine) -> None:
        if self._depth == 0:
            return
        line = self.get_metadata(PositionProvider, node).start.line
        if line in self.ignored or len(node.body) != 1:
            return
        stmt = node.body[0]
        if isinstance(stmt, cst.Pass):
            return
        if isinstance(stmt, cst.Expr) and isinstance(stmt.value, cst.SimpleString | cst.ConcatenatedString):
            return  # a docstring
        if isinstance(stmt, cst.Return):
            if stmt.value is not None and not (isinstance(stmt.value, cst.Name) and stmt.value.value == "None"):
                self.sites.append(("return_value", stmt, cst.Return(value=cst.Name("None")),
                                   f"return {_code(stmt.value)[:80]} -> return None", line))
            return  # deleting a return is (nearly) the same mutant as returning None
        self.sites.append(("statement_deletion", stmt, cst.Pass(), f"delete `{_code(stmt).strip()[:80]}`", line))


def _code(node: cst.CSTNode) -> str:
    return cst.Module(body=[]).code_for_node(node)


class _Splicer:
    """The mutated source made by replacing the text span of one node (libcst positions) instead of re-rendering
    the whole tree per mutant, which is ~100x slower. Falls back to a tree transform when the span's text is not
    exactly the node's code."""

    def __init__(self, source: str, module: cst.Module, positions: Any) -> None:
        self.source = source
        self.module = module
        self.positions = positions
        self.starts = [0]
        for line in source.splitlines(keepends=True):
            self.starts.append(self.starts[-1] + len(line))

    def __call__(self, node: cst.CSTNode, replacement: cst.CSTNode) -> str:
        pos = self.positions.get(node)
        if pos is not None:
            start = self.starts[pos.start.line - 1] + pos.start.column
            end = self.starts[pos.end.line - 1] + pos.end.column
            if self.source[start:end] == _code(node):
                return self.source[:start] + _code(replacement) + self.source[end:]
        return self.module.visit(SiteReplacer(node, replacement)).code


def _builtin(source: str, operators: Sequence[str]) -> Iterable[tuple[str, int, str, str]]:
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise CoHardenError(f"module does not parse: {exc}") from exc
    ignored = _ignored_lines(source)
    splice = _Splicer(source, wrapper.module, wrapper.resolve(PositionProvider))
    if "behavior_substitution" in operators:
        lines = set(range(1, len(source.splitlines()) + 1)) - ignored
        collector = SubstitutionSites(lines)
        wrapper.visit(collector)
        for site in collector.sites:
            yield "behavior_substitution", site.line, site.description[:160], splice(site.node, site.replacement)
    statements = _StatementSites(ignored)
    wrapper.visit(statements)
    for op, node, new, description, line in statements.sites:
        if op in operators:
            yield op, line, description, splice(node, new)


# --- mutmut engine --------------------------------------------------------------------------------------

def mutmut_available() -> bool:
    try:
        import mutmut  # noqa: F401
    except ImportError:
        return False
    return True


def _mutmut(source: str, path: str) -> Iterable[tuple[str, int, str, str]]:
    """mutmut 3's mutants as whole modules. Uses mutmut's visitor directly (its ``create_mutations`` reads
    mutmut's global project configuration, which a single-module run does not have)."""
    try:
        from mutmut.mutation.file_mutation import MutationVisitor, deep_replace
        from mutmut.mutation.mutators import mutation_operators
        from mutmut.mutation.pragma_handling import IgnoredCode, PragmaVisitor
    except ImportError as exc:
        raise CoHardenError(
            "--engine mutmut: mutmut 3 is not installed or its internal API changed "
            f"({exc}); install the extra: pip install 'coharden[mutmut]'"
        ) from exc
    try:
        wrapper = MetadataWrapper(cst.parse_module(source))
    except cst.ParserSyntaxError as exc:
        raise CoHardenError(f"module does not parse: {exc}") from exc
    pragmas = PragmaVisitor(path)
    wrapper.visit(pragmas)
    ignored = IgnoredCode(no_mutate_lines=pragmas.no_mutate_lines | _ignored_lines(source),
                          ignore_node_lines=pragmas.ignore_node_lines, ignore_pattern_lines=set())
    visitor = MutationVisitor(mutation_operators, ignored)
    module = wrapper.visit(visitor)
    positions = MetadataWrapper(module, unsafe_skip_copy=True).resolve(PositionProvider)
    splice = _Splicer(source, module, positions)
    for mutation in visitor.mutations:
        original, mutated = mutation.original_node, mutation.mutated_node
        if isinstance(mutated, cst.CSTNode):
            code = splice(original, mutated)
        else:  # a removal sentinel: mutmut's own replacement handles it
            replaced = deep_replace(module, original, mutated)
            if not isinstance(replaced, cst.Module):  # pragma: no cover - a whole module is never removed
                continue
            code = replaced.code
        pos = positions.get(original)
        line = pos.start.line if pos is not None else 0
        before = (_code(original).strip().splitlines() or [""])[0][:70]
        after = (_code(mutated).strip().splitlines() or [""])[0][:70] if isinstance(mutated, cst.CSTNode) else ""
        yield "mutmut", line, f"{before} -> {after}", code


# --- public ---------------------------------------------------------------------------------------------

def generate_mutants(source: str, path: str, *, engine: str = "builtin",
                     operators: Sequence[str] | None = None) -> list[ModuleMutant]:
    """All first-order mutants of ``source`` (the module at ``path``), deduplicated, with stable ids."""
    return list(_generate(source, path, engine, tuple(operators) if operators else None))


@functools.lru_cache(maxsize=16)
def _generate(source: str, path: str, engine: str, operators: tuple[str, ...] | None) -> tuple[ModuleMutant, ...]:
    if engine not in ENGINES:
        raise CoHardenError(f"--engine: {engine!r} (known: {', '.join(ENGINES)})")
    if engine == "builtin":
        chosen = list(operators or BUILTIN_OPERATORS)
        unknown = [op for op in chosen if op not in BUILTIN_OPERATORS]
        if unknown:
            raise CoHardenError(f"--operators: unknown {', '.join(unknown)} (known: {', '.join(BUILTIN_OPERATORS)})")
        raw = list(_builtin(source, chosen))
    else:
        raw = list(_mutmut(source, path))
    seen = {normalized(source)}
    found: list[tuple[int, str, str, str]] = []
    for op, line, description, code in raw:
        key = normalized(code)
        if key in seen or key.startswith("<unparseable>"):
            continue
        seen.add(key)
        found.append((line, op, description, code))
    found.sort(key=lambda t: (t[0], t[1], t[2]))
    return tuple(ModuleMutant(f"m{k:04d}", op, line, description, code, unified_diff(source, code, path))
                 for k, (line, op, description, code) in enumerate(found, 1))


def select_mutants(mutants: list[ModuleMutant], max_mutants: int | None, seed: int) -> list[ModuleMutant]:
    """A seeded sample of at most ``max_mutants`` (id order kept), or all of them."""
    if max_mutants is None or len(mutants) <= max_mutants:
        return list(mutants)
    import random

    keep = set(random.Random(f"suite-mutants:{seed}").sample(range(len(mutants)), max_mutants))
    return [m for k, m in enumerate(mutants) if k in keep]
