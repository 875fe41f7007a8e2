"""Reader of ``pyproject.toml`` (PEP 621, PEP 735 groups, Poetry, pytest's ini options)."""

from __future__ import annotations

import tomllib
from pathlib import PurePosixPath

from coharden.environment.inference.facts import (
    TEST_EXTRAS,
    TEST_GROUPS,
    Facts,
    classifiers,
    parsed,
    pytest_config,
    source_root,
)
from coharden.environment.inference.tox import read_tox_text
from coharden.environment.pyversions import poetry_to_pep440
from coharden.environment.sources import FileSource


def read_pyproject(source: FileSource, facts: Facts) -> None:
    data = parsed(source, "pyproject.toml", tomllib.loads, tomllib.TOMLDecodeError, facts)
    if data is None:
        return
    project = data.get("project", {})
    tool = data.get("tool", {})
    poetry = tool.get("poetry", {})
    if "build-system" in data or project or poetry:
        facts.installable = True
        facts.add("pyproject.toml", "build-system", data.get("build-system", {}).get("build-backend", "(default)"))
    if isinstance(project.get("requires-python"), str):
        facts.requires.append((project["requires-python"], "pyproject.toml"))
        facts.add("pyproject.toml", "project.requires-python", project["requires-python"])
    classifiers(project.get("classifiers") or poetry.get("classifiers"), "pyproject.toml", facts)
    facts.deps(project.get("dependencies"))
    optional = project.get("optional-dependencies") or {}
    if isinstance(optional, dict):
        facts.extras_available.update(optional)
        for name in TEST_EXTRAS:
            facts.deps(optional.get(name))
    if isinstance(poetry.get("extras"), dict):
        facts.extras_available.update(poetry["extras"])
    python_dep = (poetry.get("dependencies") or {}).get("python")
    if isinstance(python_dep, str):
        facts.requires.append((poetry_to_pep440(python_dep), "pyproject.toml [tool.poetry]"))
        facts.add("pyproject.toml", "tool.poetry.dependencies.python", python_dep)
    facts.deps([k for k in (poetry.get("dependencies") or {}) if k != "python"])
    groups = {name: (g or {}).get("dependencies", {}) for name, g in (poetry.get("group") or {}).items()}
    if poetry.get("dev-dependencies"):
        groups["dev"] = poetry["dev-dependencies"]
    for name in TEST_GROUPS:
        if isinstance(groups.get(name), dict):
            reqs = [poetry_requirement(k, v) for k, v in groups[name].items()]
            reqs = [r for r in reqs if r]
            facts.test_deps += reqs
            facts.deps(reqs)
            facts.add("pyproject.toml", f"tool.poetry group {name}", ", ".join(reqs))
    dep_groups = data.get("dependency-groups") or {}
    if isinstance(dep_groups, dict):
        for name in TEST_GROUPS:
            if name in dep_groups:
                reqs = expand_group(dep_groups, name, set())
                facts.test_deps += reqs
                facts.deps(reqs)
                facts.add("pyproject.toml", f"dependency-groups.{name}", ", ".join(reqs))
                break
    pytest_cfg = (tool.get("pytest") or {}).get("ini_options")
    if isinstance(pytest_cfg, dict):
        pytest_config(pytest_cfg, "pyproject.toml [tool.pytest.ini_options]", facts)
    setuptools = tool.get("setuptools") or {}
    package_dir = setuptools.get("package-dir") or {}
    if isinstance(package_dir, dict) and package_dir.get(""):
        source_root(package_dir[""], "pyproject.toml", "tool.setuptools.package-dir", facts)
    find = (setuptools.get("packages") or {}) if isinstance(setuptools.get("packages"), dict) else {}
    for where in (find.get("find") or {}).get("where", []):
        source_root(where, "pyproject.toml", "tool.setuptools.packages.find.where", facts)
    wheel = ((tool.get("hatch") or {}).get("build") or {}).get("targets", {}).get("wheel", {})
    for package in wheel.get("packages", []) if isinstance(wheel, dict) else []:
        parent = str(PurePosixPath(package).parent)
        if parent not in (".", ""):
            source_root(parent, "pyproject.toml", "tool.hatch.build.targets.wheel.packages", facts)
    legacy = (tool.get("tox") or {}).get("legacy_tox_ini")
    if isinstance(legacy, str):
        read_tox_text(legacy, "pyproject.toml [tool.tox]", facts)


def expand_group(groups: dict, name: str, seen: set[str]) -> list[str]:
    """PEP 735 group entries with ``{include-group = ...}`` expanded."""
    if name in seen:
        return []
    seen.add(name)
    out: list[str] = []
    for entry in groups.get(name) or []:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
            out += expand_group(groups, entry["include-group"], seen)
    return out


def poetry_requirement(name: str, spec: object) -> str:
    """A Poetry dependency as a pip requirement; path / git / url dependencies give ''."""
    if name == "python":
        return ""
    if isinstance(spec, dict):
        if any(k in spec for k in ("path", "git", "url")):
            return ""
        spec = spec.get("version", "*")
    if not isinstance(spec, str):
        return ""
    spec = spec.strip()
    if spec in ("", "*"):
        return name
    if spec[0] in "^~" and not spec.startswith("~="):
        return f"{name}>={spec[1:]}"  # the upper bound of a caret is dropped: newer releases usually work
    if spec[0].isdigit():
        return f"{name}=={spec}"
    return f"{name}{spec}"
