"""Readers of ``setup.cfg`` and ``setup.py`` (its literal ``setup(...)`` keywords, never run)."""

from __future__ import annotations

import ast
import configparser
from typing import Any

from coharden import pysource
from coharden.environment.inference.facts import (
    TEST_EXTRAS,
    Facts,
    as_list,
    classifiers,
    ini,
    parsed,
    pytest_config,
    source_root,
)
from coharden.environment.inference.tox import read_tox_sections
from coharden.environment.sources import FileSource


def read_setup_cfg(source: FileSource, facts: Facts) -> None:
    cfg = parsed(source, "setup.cfg", ini, configparser.Error, facts)
    if cfg is None:
        return
    if cfg.has_section("metadata") or cfg.has_section("options"):
        facts.installable = True
    if cfg.has_option("options", "python_requires"):
        spec = cfg.get("options", "python_requires").strip()
        facts.requires.append((spec, "setup.cfg"))
        facts.add("setup.cfg", "options.python_requires", spec)
    if cfg.has_option("metadata", "classifiers"):
        classifiers(cfg.get("metadata", "classifiers"), "setup.cfg", facts)
    if cfg.has_option("options", "install_requires"):
        facts.deps(cfg.get("options", "install_requires"))
    if cfg.has_option("options", "tests_require"):
        reqs = as_list(cfg.get("options", "tests_require"))
        facts.test_deps += reqs
        facts.deps(reqs)
        facts.add("setup.cfg", "options.tests_require", ", ".join(reqs))
    if cfg.has_section("options.extras_require"):
        facts.extras_available.update(cfg.options("options.extras_require"))
        for name in TEST_EXTRAS:
            if cfg.has_option("options.extras_require", name):
                facts.deps(cfg.get("options.extras_require", name))
    if cfg.has_option("options", "package_dir"):
        for line in as_list(cfg.get("options", "package_dir")):
            key, _, value = line.partition("=")
            if not key.strip() and value.strip():
                source_root(value, "setup.cfg", "options.package_dir", facts)
    if cfg.has_section("tool:pytest"):
        pytest_config(dict(cfg.items("tool:pytest")), "setup.cfg [tool:pytest]", facts)
    if cfg.has_section("tox:tox") or cfg.has_section("testenv"):
        sections = {s: dict(cfg.items(s)) for s in cfg.sections()}
        sections["tox"] = sections.pop("tox:tox", {})
        read_tox_sections(sections, "setup.cfg [tox:tox]", facts)


def literal(node: ast.AST | None, names: dict[str, ast.AST]) -> Any:
    """The value of a literal expression, following module-level ``NAME = <literal>`` once; None if unknown."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def read_setup_py(source: FileSource, facts: Facts) -> None:
    text = source.read("setup.py")
    if text is None:
        return
    facts.installable = True
    facts.add("setup.py", "present", "setup.py")
    try:
        tree = pysource.parse(text)
    except SyntaxError as exc:
        facts.notes.append(f"setup.py does not parse with this Python ({exc.msg}); its keywords were not read")
        return
    names: dict[str, ast.AST] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            names[node.targets[0].id] = node.value
    call = next((n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and (getattr(n.func, "id", None) == "setup" or getattr(n.func, "attr", None) == "setup")), None)
    if call is None:
        facts.notes.append("setup.py has no setup() call that could be read")
        return
    keywords = {k.arg: k.value for k in call.keywords if k.arg}
    spec = literal(keywords.get("python_requires"), names)
    if isinstance(spec, str):
        facts.requires.append((spec, "setup.py"))
        facts.add("setup.py", "python_requires", spec)
    classifiers(literal(keywords.get("classifiers"), names), "setup.py", facts)
    facts.deps(literal(keywords.get("install_requires"), names))
    tests_require = literal(keywords.get("tests_require"), names)
    if isinstance(tests_require, list | tuple) and tests_require:
        facts.test_deps += [str(r) for r in tests_require]
        facts.deps(tests_require)
        facts.add("setup.py", "tests_require", ", ".join(map(str, tests_require)))
    extras = literal(keywords.get("extras_require"), names)
    if isinstance(extras, dict):
        facts.extras_available.update(str(k) for k in extras)
        for name in TEST_EXTRAS:
            facts.deps(extras.get(name))
    package_dir = literal(keywords.get("package_dir"), names)
    if isinstance(package_dir, dict) and package_dir.get(""):
        source_root(package_dir[""], "setup.py", "package_dir", facts)
    if "ext_modules" in keywords or "cythonize" in text:
        facts.compiled = True
        facts.add("setup.py", "ext_modules", "compiled extensions")
