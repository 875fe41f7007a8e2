"""Runners say what they support (issue 53): code outside ``execution/runners.py`` asks the runner
(``runner_of(settings.tests.runner).forks``), it never compares the runner's name with a string."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from coharden.execution.runners import RUNNERS, DjangoRunner, PytestRunner, Runner, SympyRunner, runner_of

SRC = Path(__file__).parents[2] / "src" / "coharden"
REGISTRY = SRC / "execution" / "runners.py"

#: what each call site relied on when it compared names (pytest's own path, Django's descriptions, sympy's bare names)
EXPECTED: dict[str, dict[str, bool]] = {
    "pytest": {"forks": True, "session_server": True, "collects_once": True, "loads_plugins": True,
               "shares_process": True, "reach_pass": True, "needs_pytest": True, "ids_are_descriptions": False,
               "bare_ids": False, "log_failures": False},
    "django": {"forks": False, "session_server": False, "collects_once": False, "loads_plugins": False,
               "shares_process": False, "reach_pass": False, "needs_pytest": False, "ids_are_descriptions": True,
               "bare_ids": False, "log_failures": True},
    "sympy": {"forks": True, "session_server": False, "collects_once": False, "loads_plugins": False,
              "shares_process": False, "reach_pass": False, "needs_pytest": False, "ids_are_descriptions": False,
              "bare_ids": True, "log_failures": True},
}


def _is_runner(node: ast.expr) -> bool:
    """An expression that holds a runner's name: ``runner``, ``settings.tests.runner``, ``self.runner_name``..."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else ""
    return "runner" in name.lower()


def _is_text(node: ast.expr) -> bool:
    """A string literal, or a tuple / list / set of them (``runner in ("django", "sympy")``)."""
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return bool(node.elts) and all(_is_text(e) for e in node.elts)
    return isinstance(node, ast.Constant) and isinstance(node.value, str)


def name_comparisons(source: str) -> list[int]:
    """The lines of ``source`` that compare a runner's name with a string (``==``, ``!=``, ``in``, ``match``)."""
    lines: list[int] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            for left, right in zip(operands, operands[1:], strict=False):
                if (_is_runner(left) and _is_text(right)) or (_is_text(left) and _is_runner(right)):
                    lines.append(node.lineno)
        elif isinstance(node, ast.Match) and _is_runner(node.subject):
            if any(isinstance(case.pattern, ast.MatchValue) and _is_text(case.pattern.value) for case in node.cases):
                lines.append(node.lineno)
    return sorted(set(lines))


def test_the_scan_finds_every_form_of_a_name_comparison() -> None:
    source = ('a = settings.tests.runner == "pytest"\nb = "django" != spec.runner\nc = self.runner in ("sympy",)\n'
              'd = runner not in {"pytest", "django"}\nmatch settings.tests.runner:\n    case "sympy":\n        pass\n'
              'e = runner_of(settings.tests.runner).forks\nf = runner_files == ()\ng = path == "pytest"\n')
    assert name_comparisons(source) == [1, 2, 3, 4, 5]


def test_no_module_outside_the_registry_compares_a_runner_s_name() -> None:
    found = {f"{path.relative_to(SRC)}:{line}" for path in sorted(SRC.rglob("*.py")) if path != REGISTRY
             for line in name_comparisons(path.read_text(encoding="utf-8"))}
    assert not found, ("ask the runner what it supports (runner_of(name).CAPABILITY, a class attribute in "
                       f"execution/runners.py) instead of comparing its name: {sorted(found)}")


def _capabilities() -> list[str]:
    """The capabilities the runner interface declares: its ``ClassVar[bool]`` attributes."""
    return [name for name, kind in Runner.__annotations__.items() if str(kind) == "ClassVar[bool]"]


def test_each_runner_supports_what_the_call_sites_relied_on() -> None:
    assert set(_capabilities()) == set(EXPECTED["pytest"])
    assert set(RUNNERS) == set(EXPECTED)
    for name, expected in EXPECTED.items():
        runner = runner_of(name)
        assert runner.name == name
        # stated by each runner itself, not inherited or defaulted
        assert {c: vars(runner)[c] for c in expected} == expected, name


def test_capabilities_are_class_attributes_of_the_registered_classes() -> None:
    assert (runner_of("pytest"), runner_of("django"), runner_of("sympy")) == (PytestRunner, DjangoRunner,
                                                                             SympyRunner)
    assert all(isinstance(getattr(cls, c), bool) for cls in RUNNERS.values() for c in _capabilities())


def test_an_unknown_runner_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown test runner 'nose'"):
        runner_of("nose")
