"""The shared parses and statement-local regeneration of :mod:`coharden.mutation.cstedit` change no mutant:
every replacement equals a whole-module transformer's output, and operators and pools are identical to the
reference implementation (a whole-module transformer and a fresh parse per rewrite, as before the cache)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import libcst as cst
import pytest

import coharden
from coharden.mutation import funcwrap
from coharden.mutation.behavior_substitution import SubstitutionSites
from coharden.mutation.context import FileChange, FixContext, functions_touched
from coharden.mutation.cstedit import LineSites, ParsedModule, ScopedTransformer, ScopedVisitor, parsed
from coharden.mutation.pool import Pool, admit, mechanical_operators
from coharden.mutation.registry import OperatorInputs, registry
from coharden.mutation.sampling import Draw
from coharden.mutation.widened_scope import WideningSites

SRC = Path(coharden.__file__).parent
FILES = [SRC / "mpe" / "evaluate.py", SRC / "mutation" / "pool.py", SRC / "execution" / "fast" / "forkserver_main.py",
         SRC / "mutation" / "behavior_substitution.py"]

ODD = (  # tabs, comments between statements, decorators, elif chains, a one-line suite, no trailing newline
    "import os\n# a comment\n\n\nclass A:\n\tdef f(self, x):\n\t\tif x > 1:\n\t\t\treturn x + 1\n"
    "\t\telif x == 0:  # zero\n\t\t\treturn not x\n\t\telse:\n\t\t\treturn [x][0:x - 1]\n\n"
    "\t@staticmethod\n\tdef g(y): return y * 2 if y else min(y, 3)\n\n\ndef h(a, b):\n"
    "    try:\n        return a < b and b != 2\n    except ValueError:\n        return isinstance(a, (int, str))"
)


def _sites(module: ParsedModule) -> list[tuple[cst.CSTNode, cst.CSTNode]]:
    lines = set(range(1, module.source.count("\n") + 2))
    subst, widen = SubstitutionSites(lines), WideningSites(lines)
    module.visit(subst)
    module.visit(widen)
    return [(s.node, s.replacement) for s in [*subst.sites, *widen.sites]]


@pytest.mark.parametrize("source", [*(p.read_text() for p in FILES), ODD, ODD.replace("\n", "\r\n")],
                         ids=[*(p.name for p in FILES), "odd", "odd-crlf"])
def test_every_site_replacement_equals_the_whole_module_transformer(source: str) -> None:
    module = parsed(source)
    assert module is not None
    sites = _sites(module)
    assert len(sites) > 5
    for node, replacement in sites[:: max(1, len(sites) // 10)]:  # a whole-module visit each: spread a sample
        assert module.replace(node, replacement) == module.full_replace(node, replacement)
    # statements replaced whole (a function by another definition), also at the end of a file without newline
    definitions = [node for nodes in module.functions().values() for node in nodes]
    for node in [*definitions[:: max(1, len(definitions) // 4)], definitions[-1]]:
        other = node.with_changes(body=cst.IndentedBlock(body=[cst.parse_statement("pass\n")]))
        assert module.replace(node, other) == module.full_replace(node, other)


@pytest.mark.parametrize("path", FILES[:2], ids=lambda p: p.name)
def test_site_visits_that_skip_statements_far_from_the_lines_find_the_same_sites(path: Path) -> None:
    module = parsed(path.read_text())
    assert module is not None
    total = module.source.count("\n")
    for lines in ({5, 6, 7}, set(range(40, 60)), {total // 2, total // 3, total - 3}, set(range(1, total))):
        found = []
        for pruned in (True, False):
            collectors = [SubstitutionSites(lines), WideningSites(lines)]
            for collector in collectors:
                if not pruned:
                    collector.on_visit = lambda node, c=collector: cst.CSTVisitor.on_visit(c, node)  # type: ignore[method-assign]
                module.visit(collector)
            found.append([(s.description, s.line, s.node is not None) for c in collectors for s in c.sites])
        assert found[0] == found[1]
    assert found[0]


def test_a_source_libcst_cannot_parse_gives_none() -> None:
    assert parsed("def f(:\n") is None
    assert funcwrap.rewrite_function("def f(:\n", "f", lambda body: body) is None


_NESTED = ("if a:\n    pass\nclass A:\n    if b:\n        pass\n    def m(self):\n        if c:\n            pass\n"
           "        def inner():\n            x = d if e else f\n        class B:\n"
           "            def n(self, y=g if h else i):\n                pass\n")


def test_a_scoped_visitor_and_transformer_know_the_function_they_are_in() -> None:
    """Conditions are named by the innermost function (none in a class body or at module level), a default value
    by the function it belongs to, and a definition's own leave hook still sees itself and its class."""

    class Conditions(ScopedVisitor):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[tuple[str, str | None]] = []

        def visit_If(self, node: cst.If) -> None:
            self.found.append((cst.Module([]).code_for_node(node.test), self.scopes.function()))

        def visit_IfExp(self, node: cst.IfExp) -> None:
            self.found.append((cst.Module([]).code_for_node(node.test), self.scopes.function()))

    class Leaves(ScopedTransformer):
        def __init__(self) -> None:
            super().__init__()
            self.found: list[tuple[str, str | None]] = []

        def leave_function(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
            self.found.append((self.scopes.qualname(), self.scopes.enclosing_class()))
            return updated_node

    module = cst.parse_module(_NESTED)
    conditions, leaves = Conditions(), Leaves()
    module.visit(conditions)
    assert module.visit(leaves).code == _NESTED
    assert conditions.found == [("a", None), ("b", None), ("c", "A.m"), ("e", "A.m.inner"), ("h", "A.m.B.n")]
    assert leaves.found == [("A.m.inner", None), ("A.m.B.n", "B"), ("A.m", "A")]
    shared = parsed(_NESTED)
    assert shared is not None
    assert list(shared.functions()) == ["A.m", "A.m.inner", "A.m.B.n"]


# --- the reference implementation (before the shared parses): a fresh parse and a whole-module visit each ------
class _Rewriter(cst.CSTTransformer):
    def __init__(self, qualname: str, rewrite: funcwrap.BodyRewrite, whole: cst.FunctionDef | None) -> None:
        self.qualname, self.rewrite, self.whole = qualname, rewrite, whole
        self.stack: list[str] = []
        self.done = False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_ClassDef(self, original_node: cst.ClassDef, updated_node: cst.ClassDef) -> cst.ClassDef:
        self.stack.pop()
        return updated_node

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        self.stack.append(node.name.value)
        return True

    def leave_FunctionDef(self, original_node: cst.FunctionDef, updated_node: cst.FunctionDef) -> cst.FunctionDef:
        name = ".".join(self.stack)
        self.stack.pop()
        if name != self.qualname or self.done or not isinstance(updated_node.body, cst.IndentedBlock):
            return updated_node
        if self.whole is not None:
            self.done = True
            return self.whole
        body = list(updated_node.body.body)
        doc = body[:1] if body and funcwrap.is_docstring(body[0]) else []
        rest = body[len(doc):]
        if not rest:
            return updated_node
        self.done = True
        return updated_node.with_changes(body=updated_node.body.with_changes(body=[*doc, *self.rewrite(rest)]))


def _reference_rewrite(source: str, qualname: str, rewrite: funcwrap.BodyRewrite, *,
                       whole: cst.FunctionDef | None = None) -> str | None:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    rewriter = _Rewriter(qualname, rewrite, whole)
    new = module.visit(rewriter)
    return new.code if rewriter.done else None


def _reference_find(source: str, qualname: str) -> cst.FunctionDef | None:
    try:
        module = cst.parse_module(source)
    except cst.ParserSyntaxError:
        return None
    found: list[cst.FunctionDef] = []

    class Finder(cst.CSTVisitor):
        def __init__(self) -> None:
            self.stack: list[str] = []

        def visit_ClassDef(self, node: cst.ClassDef) -> bool:
            self.stack.append(node.name.value)
            return True

        def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
            self.stack.pop()

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            self.stack.append(node.name.value)
            if ".".join(self.stack) == qualname:
                found.append(node)
            return True

        def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
            self.stack.pop()

    module.visit(Finder())
    return found[0] if found else None


def _reference_transplanted(target: str, donor: str, qualname: str, rewrite: funcwrap.BodyRewrite) -> str | None:
    replacement = _reference_find(donor, qualname)
    base = _reference_rewrite(target, qualname, lambda b: list(b), whole=replacement) if replacement else None
    return _reference_rewrite(base, qualname, rewrite) if base is not None else None


@pytest.fixture
def reference(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Switch the operators to the reference implementation for the duration of a block."""
    def use() -> None:
        monkeypatch.setattr(ParsedModule, "replace", ParsedModule.full_replace)
        monkeypatch.setattr(LineSites, "on_visit", cst.CSTVisitor.on_visit)
        monkeypatch.setattr(funcwrap, "rewrite_function", _reference_rewrite)
        monkeypatch.setattr(funcwrap, "find_function", _reference_find)
        for name in ("symptom_suppression", "input_specific_shortcut", "caller_patch", "narrowed_scope"):
            module = __import__(f"coharden.mutation.{name}", fromlist=["x"])
            for attr, ref in (("rewrite_function", _reference_rewrite), ("find_function", _reference_find),
                              ("rewrite_transplanted", _reference_transplanted)):
                if hasattr(module, attr):
                    monkeypatch.setattr(module, attr, ref)
    yield use  # type: ignore[misc]
    monkeypatch.undo()


def _mutated(source: str) -> str:
    """A plausible 'buggy' version of a real file: comparisons, constants and guards changed in places."""
    out = []
    for k, line in enumerate(source.splitlines(keepends=True)):
        if k % 7 == 3:
            line = line.replace(" >= ", " > ").replace(" == ", " != ").replace(" and ", " or ")
        if k % 11 == 5:
            line = re.sub(r"\b1\b", "2", line)
        out.append(line)
    return "".join(out)


def _pool(ctx: FixContext) -> tuple[list[tuple[str, str, dict[str, str]]], Pool]:
    inputs = OperatorInputs(ctx, base_file=lambda path: None)
    raw = [m for op in mechanical_operators() for m in registry()[op]().generate(inputs)]
    pool = Pool()
    admit(ctx, raw, pool, Draw(dict.fromkeys(mechanical_operators(), 3), seed=0))
    return [(m.operator, m.description, m.files) for m in raw], pool


def _same_pools(ctx: FixContext, reference) -> None:  # type: ignore[no-untyped-def]
    fast_raw, fast = _pool(ctx)
    reference()
    slow_raw, slow = _pool(ctx)
    assert len(fast_raw) == len(slow_raw) > 0
    assert fast_raw == slow_raw
    assert [m.model_dump() for m in fast.mutants] == [m.model_dump() for m in slow.mutants]
    assert fast.dropped == slow.dropped


def test_pools_are_unchanged_on_real_files(reference) -> None:  # type: ignore[no-untyped-def]
    files = [FileChange(str(p.relative_to(SRC)), _mutated(p.read_text()), p.read_text()) for p in FILES[:2]]
    ctx = FixContext(files)
    assert any(functions_touched(c) for c in files)
    _same_pools(ctx, reference)


SYMPY = Path(os.environ.get("COHARDEN_REPOS", "/work/repos")) / "sympy__sympy"
DATA = Path(os.environ.get("COHARDEN_DATA", "/work/shared/data")) / "swebench_verified_sympy.jsonl"


@pytest.mark.slow
@pytest.mark.skipif(not (SYMPY.exists() and DATA.exists()), reason="needs the sympy clone and the shared data")
@pytest.mark.parametrize("instance_id", ["sympy__sympy-16597", "sympy__sympy-20590", "sympy__sympy-18211"])
def test_pools_are_unchanged_on_sympy_fixes(instance_id: str, reference) -> None:  # type: ignore[no-untyped-def]
    import json
    import subprocess

    from coharden.patches import touched_files

    record = next(r for r in map(json.loads, DATA.read_text().splitlines()) if r["instance_id"] == instance_id)
    files = []
    for path in touched_files(record["patch"]):
        old = subprocess.run(["git", "show", f"{record['base_commit']}:{path}"], cwd=SYMPY, capture_output=True,
                             text=True, check=True).stdout
        files.append((path, old))
    work = Path(subprocess.run(["mktemp", "-d"], capture_output=True, text=True, check=True).stdout.strip())
    try:
        for path, old in files:
            (work / path).parent.mkdir(parents=True, exist_ok=True)
            (work / path).write_text(old)
        subprocess.run(["git", "init", "-q"], cwd=work, check=True)
        subprocess.run(["git", "apply", "-"], cwd=work, input=record["patch"], text=True, check=True)
        ctx = FixContext([FileChange(path, old, (work / path).read_text()) for path, old in files])
    finally:
        subprocess.run(["rm", "-rf", str(work)], check=True)
    _same_pools(ctx, reference)
