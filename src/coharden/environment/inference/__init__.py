"""Rule-guided environment inference: read a repository's packaging, tox / nox and CI files and write a plan.

Sources, strongest first where they disagree:

* **Python version**: a ``.python-version`` pin; else the highest version the CI workflows, tox envlist or
  nox sessions test that the metadata admits (``requires-python`` in pyproject / setup.cfg / setup.py,
  Poetry's ``python`` dependency); else the classifiers' versions; else the newest admitted release not newer
  than :data:`~coharden.environment.pyversions.DEFAULT_CEILING`.
* **Install**: requirement files (base + test / dev / ci ones; docs and lint ones are left out), the
  ``pip install`` lines of CI workflows, the project itself (``pip install -e .[extras]`` with the test-like
  extras, or those tox names), then test dependencies from tox ``deps``, nox ``session.install``, PEP 735
  dependency groups, Poetry dev groups and ``tests_require``, then pytest and the pytest plugins the
  configuration or the tests need (``--cov`` -> pytest-cov, ``mocker`` -> pytest-mock, ...).
* **Tests**: pytest's ``testpaths``; the arguments of the pytest command in tox / nox / CI (selection,
  verbosity, coverage and parallelism flags are dropped: verdicts need none of them).

Every fact is recorded as :class:`~coharden.environment.plan.Evidence`, every guess as a note.
"""

from __future__ import annotations

import re
import shlex

from coharden.environment.inference.facts import (
    DROP_OPTS,
    INI_PLUGINS,
    OPTION_PLUGINS,
    TEST_EXTRAS,
    TEXT_PLUGINS,
    TOOLING,
    VALUE_OPTS,
    Facts,
    dist_name,
)
from coharden.environment.inference.misc import read_misc
from coharden.environment.inference.nox import read_nox
from coharden.environment.inference.pyproject import read_pyproject
from coharden.environment.inference.requirements import read_requirements
from coharden.environment.inference.setuptools import read_setup_cfg, read_setup_py
from coharden.environment.inference.workflows import read_workflows
from coharden.environment.plan import EnvPlan
from coharden.environment.pyversions import DEFAULT_CEILING, KNOWN_VERSIONS, admitted, vkey
from coharden.environment.sources import FileSource

__all__ = ["infer_plan"]


def choose_python(facts: Facts) -> tuple[str, str | None, list[str]]:
    """(version, combined specifier, tested versions)."""
    spec = ",".join(s for s, _ in facts.requires if s.strip()) or None
    try:
        allowed = admitted(spec)
    except ValueError as exc:
        facts.notes.append(f"python_requires {spec!r} not understood ({exc}); treated as unconstrained")
        allowed, spec = list(KNOWN_VERSIONS), spec
    if not allowed:
        facts.notes.append(f"python_requires {spec!r} admits none of {', '.join(KNOWN_VERSIONS)}")
        allowed = list(KNOWN_VERSIONS)
    tested_strong = set().union(*(facts.tested.get(k, set()) for k in ("ci", "tox", "nox")))
    tested_all = sorted(tested_strong | facts.tested.get("classifiers", set()), key=vkey)
    if facts.pinned and facts.pinned in allowed:
        return facts.pinned, spec, tested_all
    for pool, why in ((tested_strong, "highest version tested by CI / tox / nox"),
                      (facts.tested.get("classifiers", set()), "highest version named by the classifiers")):
        usable = sorted((v for v in pool if v in allowed and v in KNOWN_VERSIONS), key=vkey)
        if usable:
            facts.notes.append(f"python {usable[-1]}: {why} that the metadata admits")
            return usable[-1], spec, tested_all
    below = [v for v in allowed if vkey(v) <= vkey(DEFAULT_CEILING)]
    choice = below[-1] if below else allowed[0]
    facts.notes.append(f"python {choice}: no tested version found; newest admitted release up to {DEFAULT_CEILING}")
    return choice, spec, tested_all


def filter_test_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(kept options, test paths) from the arguments of a pytest command."""
    kept: list[str] = []
    paths: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        takes_value = name in VALUE_OPTS and "=" not in token
        value = [args[i + 1]] if takes_value and i + 1 < len(args) else []
        if token.startswith("-"):
            dropped = name in DROP_OPTS or name.startswith(("--cov", "--junit", "--benchmark")) \
                or re.match(r"^-r\w+$", token) or re.match(r"^-[vqsx]+$", token)
            if not dropped:
                kept += [token, *value]
            i += 1 + len(value)
            continue
        paths.append(token.split("::")[0].rstrip("/") or token)
        i += 1
    return kept, paths


def needed_plugins(facts: Facts, source: FileSource) -> list[tuple[str, str]]:
    """(plugin, why) for pytest plugins the configuration or the tests need."""
    wanted: list[tuple[str, str]] = []
    options = list(facts.addopts) + [a for args, _ in facts.pytest_commands for a in args]
    for option in facts.addopts:
        for prefix, plugin in OPTION_PLUGINS:
            if option == prefix or option.startswith(prefix + "=") or (prefix.startswith("--")
                                                                       and option.startswith(prefix)):
                wanted.append((plugin, f"addopts {option}"))
    for i, option in enumerate(options):
        if option == "-p" and i + 1 < len(options):
            name = options[i + 1]
            if not name.startswith("no:") and "." not in name:
                wanted.append((f"pytest-{name.removeprefix('pytest_').removeprefix('pytest-')}", f"-p {name}"))
    for key in facts.ini_keys:
        if ini_plugin := INI_PLUGINS.get(key):
            wanted.append((ini_plugin, f"ini option {key}"))
    test_files = [p for p in source.files() if p.endswith(".py") and re.search(r"(^|/)(tests?|testing)/|(^|/)test_"
                                                                                 r"|_test\.py$|conftest\.py$", p)]
    for path in test_files[:400]:
        text = source.read(path) or ""
        for pattern, plugin in TEXT_PLUGINS:
            if pattern.search(text):
                wanted.append((plugin, f"{path} uses it"))
    out: list[tuple[str, str]] = []
    for plugin, why in wanted:
        if plugin not in facts.known_deps and plugin not in {p for p, _ in out}:
            out.append((plugin, why))
    return out


def infer_plan(source: FileSource, *, repo: str = "", commit: str = "") -> EnvPlan:
    """The environment plan for the files of ``source`` (see the module docstring for the rules)."""
    facts = Facts()
    read_pyproject(source, facts)
    read_setup_cfg(source, facts)
    read_setup_py(source, facts)
    read_requirements(source, facts)
    read_misc(source, facts)
    read_nox(source, facts)
    read_workflows(source, facts)
    python, spec, tested = choose_python(facts)

    install: list[str] = []
    for path in dict.fromkeys(facts.requirement_files):
        install.append(f"python -m pip install -r {shlex.quote(path)}")
    for command in dict.fromkeys(facts.ci_installs):
        if command not in install:
            install.append(command)
    installs_project = any(re.search(r"(^|\s)('?-e'?\s+)?'?\.(\[[^\]]*\])?'?(\s|$)", c) for c in install)
    for command in facts.ci_installs:  # extras a CI step installs the project with: '.[dev]'
        for group in re.findall(r"\.\[([^\]]+)\]", command):
            facts.extras_wanted += [e.strip() for e in group.split(",") if e.strip() not in facts.extras_wanted]
    extras = [e for e in facts.extras_wanted if not facts.extras_available or e in facts.extras_available]
    if not extras:
        extras = [e for e in TEST_EXTRAS if e in facts.extras_available][:1]
    if facts.installable and not installs_project:
        target = "." + (f"[{','.join(extras)}]" if extras else "")
        install.append(f"python -m pip install -e {shlex.quote(target)}")
    elif not facts.installable and not installs_project:
        facts.notes.append("no packaging metadata (pyproject / setup.py / setup.cfg): the project is not installed; "
                           "tests import it from the checkout")
    deps = [d for d in dict.fromkeys(facts.test_deps) if dist_name(d) not in TOOLING]
    if deps:
        install.append("python -m pip install " + " ".join(shlex.quote(d) for d in deps))
    plugins = needed_plugins(facts, source)
    for plugin, why in plugins:
        facts.notes.append(f"{plugin}: {why}")
    install.append("python -m pip install " + " ".join(["pytest", *(p for p, _ in plugins)]))

    test_args: list[str] = []
    test_paths: list[str] = list(facts.testpaths)
    if facts.pytest_commands:
        args, label = facts.pytest_commands[0]
        test_args, cmd_paths = filter_test_args(args)
        known = set(source.files())
        cmd_paths = [p for p in cmd_paths if p in known or any(f.startswith(p + "/") for f in known)]
        if cmd_paths and not test_paths:
            test_paths = cmd_paths
        facts.notes.append(f"test arguments from {label}: {' '.join(args) or '(none)'}")
    if not test_paths:
        for candidate in ("tests", "test", "testing"):
            if any(f.startswith(candidate + "/") for f in source.files()):
                test_paths = [candidate]
                facts.add("layout", "test directory", candidate)
                break
    system = ["git"]
    if facts.compiled:
        system.append("build-essential")
    return EnvPlan(repo=repo, commit=commit, python=python, python_requires=spec, python_tested=tested,
                   system_packages=system, install=install, extras=extras,
                   requirements=list(dict.fromkeys(facts.requirement_files)), source_roots=facts.source_roots,
                   test_args=test_args, test_paths=test_paths, env=facts.env, evidence=facts.evidence,
                   notes=facts.notes)

