"""CONTRIBUTING.md's house rules that a reader can check mechanically, checked: the size of files and functions
(a long one says why, after ``Size:`` in its docstring), the number of parameters a function takes (a budget
that may only fall), issue numbers kept out of the source, and tests laid out like the code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).parents[1]
SRC = ROOT / "src" / "coharden"

MAX_FILE_LINES = 400
MAX_FUNCTION_LINES = 80
MAX_PARAMETERS = 5
#: functions of ``src`` with more than MAX_PARAMETERS parameters: lower it when a change removes some, never
#: raise it (a new function with many arguments takes a dataclass of what travels together instead)
PARAMETER_BUDGET = 47
#: test directories that are not rooms of ``src``: attacks by surface, shared files
TEST_DIRS_BESIDE_THE_CODE = {"attacks", "fixtures"}


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def _says_why(docstring: str | None) -> bool:
    return bool(docstring) and "Size:" in str(docstring)


def _parameters(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    args = node.args
    names = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    count = len(names) + (args.vararg is not None) + (args.kwarg is not None)
    if names and names[0].arg in ("self", "cls"):
        count -= 1
    return count


def _functions(path: Path) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]


def test_a_file_over_400_lines_says_why() -> None:
    long = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        if text.count("\n") > MAX_FILE_LINES and not _says_why(ast.get_docstring(ast.parse(text))):
            long.append(f"{path.relative_to(SRC)}: {text.count(chr(10))} lines")
    assert not long, "split these modules, or say why after 'Size:' in the module docstring: " + ", ".join(long)


def test_a_function_over_80_lines_says_why() -> None:
    long = [f"{path.relative_to(SRC)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for path in _sources() for node in _functions(path)
            if node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES and not _says_why(ast.get_docstring(node))]
    assert not long, "split these functions, or say why after 'Size:' in their docstring: " + ", ".join(long)


def test_functions_with_many_parameters_stay_within_the_budget() -> None:
    many = [f"{path.relative_to(SRC)}:{node.name}" for path in _sources() for node in _functions(path)
            if _parameters(node) > MAX_PARAMETERS]
    assert len(many) <= PARAMETER_BUDGET, (
        f"{len(many)} functions take more than {MAX_PARAMETERS} parameters (budget {PARAMETER_BUDGET}): pass a "
        "dataclass of what travels together")


def test_the_parameter_count_sees_every_kind_of_parameter() -> None:
    node = ast.parse("def f(self, a, /, b, *c, d, **e): pass").body[0]
    assert isinstance(node, ast.FunctionDef)
    assert _parameters(node) == 5


ISSUE = re.compile(r"\bissues? #?\d+", re.IGNORECASE)


def test_the_source_cites_no_issue_number() -> None:
    """Issue numbers belong in commit messages and CHANGELOG; in the code they go stale and say nothing to a
    reader who has no tracker."""
    cited = [f"{path.relative_to(SRC)}:{number}" for path in _sources()
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ISSUE.search(line)]
    assert not cited, "issue numbers in src: " + ", ".join(cited)


def test_tests_are_laid_out_like_the_code() -> None:
    """A module's tests are found by path: ``tests/<room>/`` for a package of ``src/coharden``."""
    rooms = {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    strays = [d.name for d in (ROOT / "tests").iterdir()
              if d.is_dir() and not d.name.startswith((".", "__")) and d.name not in rooms | TEST_DIRS_BESIDE_THE_CODE]
    assert not strays, f"test directories that name no package of src/coharden: {strays}"
