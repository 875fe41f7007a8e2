"""Reader of tox configuration (``tox.ini`` or the ``[tox]`` of setup.cfg / pyproject)."""

from __future__ import annotations

import configparser
import itertools
import re

from coharden.environment.inference.facts import Facts, as_list, ini, pytest_args, pytest_config


def brace_expand(text: str) -> list[str]:
    """'py{38,39}-x{a,b}' -> ['py38-xa', 'py38-xb', 'py39-xa', 'py39-xb']."""
    parts = re.split(r"(\{[^{}]*\})", text)
    options = [p[1:-1].split(",") if p.startswith("{") and p.endswith("}") else [p] for p in parts]
    return ["".join(choice).strip() for choice in itertools.product(*options)]


def split_top(text: str) -> list[str]:
    """Split on commas and newlines that are not inside braces."""
    out, depth, current = [], 0, ""
    for char in text:
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
        if char in ",\n" and depth == 0:
            out.append(current)
            current = ""
        else:
            current += char
    out.append(current)
    return [p.strip() for p in out if p.strip()]


def tox_value(value: str) -> str:
    return value.replace("{toxinidir}", ".").replace("{tox_root}", ".")


def read_tox_text(text: str, label: str, facts: Facts) -> None:
    try:
        cfg = ini(text)
    except configparser.Error as exc:
        facts.notes.append(f"{label} does not parse ({exc}); ignored")
        return
    read_tox_sections({s: dict(cfg.items(s)) for s in cfg.sections()}, label, facts)


def read_tox_sections(sections: dict[str, dict[str, str]], label: str, facts: Facts) -> None:
    tox = sections.get("tox", {})
    envs = [env for item in split_top(tox.get("envlist", tox.get("env_list", ""))) for env in brace_expand(item)]
    versions = []
    for env in envs:
        for factor in env.split("-"):
            match = re.match(r"^py(3)\.?(\d+)$", factor)
            if match:
                versions.append(f"3.{match.group(2)}")
    facts.tested_versions("tox", versions, label, "envlist")
    testenv = sections.get("testenv", {})
    for line in as_list(testenv.get("deps", "")):
        line = tox_value(line.split("#", 1)[0].strip())
        if re.match(r"^[\w.-]+\s*:", line) and not line.startswith(("http:", "https:")):
            line = line.split(":", 1)[1].strip()  # factor-conditional dependency: 'py38: mock'
        if not line or "{" in line:
            continue
        if line.startswith("-r"):
            path = line[2:].strip()
            if path not in facts.requirement_files:
                facts.requirement_files.append(path.removeprefix("./"))
                facts.add(label, "testenv.deps", line)
            continue
        if line.startswith("-") or line.startswith("."):
            continue
        facts.test_deps.append(line)
        facts.deps([line])
        facts.add(label, "testenv.deps", line)
    for extra in split_top(testenv.get("extras", "")):
        if extra not in facts.extras_wanted:
            facts.extras_wanted.append(extra)
            facts.add(label, "testenv.extras", extra)
    for line in as_list(testenv.get("setenv", "")):
        key, sep, value = line.partition("=")
        value = tox_value(value.strip())
        if sep and key.strip() and "{" not in value and ":" not in key:
            facts.env[key.strip()] = value
            facts.add(label, "testenv.setenv", f"{key.strip()}={value}")
    commands = re.sub(r"\\\n\s*", " ", testenv.get("commands", ""))
    for line in as_list(commands):
        args = pytest_args(tox_value(re.sub(r"\{posargs:?([^}]*)\}", r"\1", line.lstrip("- "))))
        if args is not None:
            facts.pytest_commands.append((args, label))
            facts.add(label, "testenv.commands", line)
    if "pytest" in sections:
        pytest_config(sections["pytest"], f"{label} [pytest]", facts)
