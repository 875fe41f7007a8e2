"""What the readers of :mod:`coharden.environment.inference` found, before the rules turn it into a plan;
and the shared vocabulary (test extras, tooling, pytest options) they read with."""

from __future__ import annotations

import configparser
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

from coharden.environment.plan import Evidence
from coharden.environment.pyversions import normalize_version, vkey
from coharden.environment.sources import FileSource

TEST_EXTRAS = ("test", "tests", "testing", "test-deps", "tests-deps")
TEST_GROUPS = ("test", "tests", "testing", "dev")
#: Tools a CI step installs that are not test dependencies of the project.
TOOLING = frozenset({"pip", "setuptools", "wheel", "tox", "nox", "build", "twine", "codecov", "coveralls",
                     "virtualenv", "uv", "pre-commit", "tox-gh-actions", "tox-gh", "poetry", "hatch", "pdm",
                     "setuptools-scm", "flit"})
#: Requirement files with these words in the name are not needed to run tests.
REQ_SKIP = re.compile(r"doc|lint|typing|mypy|release|bench|format|style|publish|deploy", re.IGNORECASE)
REQ_NAME = re.compile(r"(^|/)([\w.-]*requirements[\w.-]*\.txt|requirements/[\w.-]+\.txt|[\w.-]*reqs[\w.-]*\.txt)$",
                       re.IGNORECASE)

# pytest options: the ones that take a separate value, and the ones a verdict run must not inherit
VALUE_OPTS = frozenset({"-m", "-k", "-p", "-W", "-n", "-c", "-o", "--rootdir", "--cov", "--cov-report",
                         "--cov-config", "--junitxml", "--junit-xml", "--durations", "--tb", "--maxfail",
                         "--deselect", "--ignore", "--ignore-glob", "--timeout", "--dist", "--color", "--basetemp",
                         "--numprocesses", "--import-mode", "--confcutdir", "--html", "--reruns",
                         "--cov-fail-under", "--log-level", "--override-ini", "--capture"})
DROP_OPTS = frozenset({"-x", "--exitfirst", "-v", "-vv", "-vvv", "--verbose", "-q", "--quiet", "-qq", "-s",
                        "--lf", "--last-failed", "--ff", "--failed-first", "--sw", "--stepwise", "--no-cov",
                        "-k", "--cov", "--cov-report", "--cov-config", "--cov-append", "--cov-branch",
                        "--cov-fail-under", "--junitxml", "--junit-xml", "--durations", "--tb", "--maxfail",
                        "--color", "--basetemp", "-n", "--numprocesses", "--dist", "--html", "--showlocals", "-l",
                        "--capture", "--reruns", "--benchmark-skip", "--benchmark-disable"})
#: option prefix -> pytest plugin that provides it
OPTION_PLUGINS = (("--cov", "pytest-cov"), ("--no-cov", "pytest-cov"), ("-n", "pytest-xdist"),
                   ("--numprocesses", "pytest-xdist"), ("--dist", "pytest-xdist"), ("--timeout", "pytest-timeout"),
                   ("--reruns", "pytest-rerunfailures"), ("--benchmark", "pytest-benchmark"),
                   ("--html", "pytest-html"), ("--doctest-plus", "pytest-doctestplus"), ("--mypy", "pytest-mypy"),
                   ("--randomly", "pytest-randomly"), ("--asyncio-mode", "pytest-asyncio"),
                   ("--ds", "pytest-django"), ("--env", "pytest-env"))
INI_PLUGINS = {"asyncio_mode": "pytest-asyncio", "asyncio_default_fixture_loop_scope": "pytest-asyncio",
                "timeout": "pytest-timeout", "django_settings_module": "pytest-django", "env": "pytest-env",
                "mock_use_standalone_module": "pytest-mock", "xfail_strict": ""}
#: what a test module's text shows -> plugin it needs
TEXT_PLUGINS = ((re.compile(r"def \w+\([^)]*\bmocker\b"), "pytest-mock"),
                 (re.compile(r"@pytest\.mark\.asyncio\b"), "pytest-asyncio"),
                 (re.compile(r"@pytest\.mark\.timeout\b"), "pytest-timeout"),
                 (re.compile(r"def \w+\([^)]*\bhttpx_mock\b"), "pytest-httpx"),
                 (re.compile(r"def \w+\([^)]*\brequests_mock\b"), "requests-mock"),
                 (re.compile(r"def \w+\([^)]*\bbenchmark\b"), "pytest-benchmark"))


def dist_name(requirement: str) -> str:
    """'Foo_Bar[x]>=1; python_version<"3"' -> 'foo-bar' (PEP 503 normalized), '' for non-names."""
    match = re.match(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement)
    return re.sub(r"[-_.]+", "-", match.group(1)).lower() if match else ""


@dataclass
class Facts:
    """What the readers found, before the rules turn it into a plan."""

    evidence: list[Evidence] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    requires: list[tuple[str, str]] = field(default_factory=list)  # (specifier, source)
    pinned: str | None = None  # .python-version
    tested: dict[str, set[str]] = field(default_factory=dict)  # kind (ci / tox / nox / classifiers) -> versions
    installable: bool = False
    extras_available: set[str] = field(default_factory=set)
    extras_wanted: list[str] = field(default_factory=list)  # named by tox / CI
    requirement_files: list[str] = field(default_factory=list)
    ci_installs: list[str] = field(default_factory=list)
    test_deps: list[str] = field(default_factory=list)
    known_deps: set[str] = field(default_factory=set)
    pytest_commands: list[tuple[list[str], str]] = field(default_factory=list)  # (args after pytest, source)
    testpaths: list[str] = field(default_factory=list)
    addopts: list[str] = field(default_factory=list)
    ini_keys: set[str] = field(default_factory=set)
    source_roots: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    compiled: bool = False

    def add(self, source: str, what: str, value: object) -> None:
        self.evidence.append(Evidence(source=source, field=what, value=str(value)[:300]))

    def tested_versions(self, kind: str, versions: object, source: str, what: str) -> None:
        found = {v for v in (normalize_version(x) for x in as_list(versions)) if v}
        if found:
            self.tested.setdefault(kind, set()).update(found)
            self.add(source, what, ", ".join(sorted(found, key=vkey)))

    def deps(self, items: object) -> None:
        self.known_deps.update(d for d in (dist_name(str(x)) for x in as_list(items)) if d)


def as_list(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple | set):
        return list(value)
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    return [value]


def ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser



def parsed(source: FileSource, path: str, parse: Callable[[str], Any], errors: type[Exception] | tuple,
           facts: Facts) -> Any | None:
    """``parse`` of the file at ``path``; None when it is absent, or does not parse (noted, and ignored)."""
    text = source.read(path)
    if text is None:
        return None
    try:
        return parse(text)
    except errors as exc:
        facts.notes.append(f"{path} does not parse ({exc}); ignored")
        return None


def pytest_args(command: str) -> list[str] | None:
    """The arguments after ``pytest`` in a shell command line, or None when it does not run pytest."""
    try:
        tokens = shlex.split(command, comments=True)
    except ValueError:
        return None
    for i, token in enumerate(tokens):
        base = PurePosixPath(token).name
        if base in ("pytest", "py.test") and (i == 0 or tokens[i - 1] in ("-m", "run", "exec", "--", "&&")
                                               or PurePosixPath(tokens[i - 1]).name.startswith("python")
                                               or "/" in token):
            args = tokens[i + 1:]
            for stop in ("&&", "||", ";", "|"):
                if stop in args:
                    args = args[: args.index(stop)]
            return args
    return None


def classifiers(items: object, source: str, facts: Facts) -> None:
    versions = []
    for item in as_list(items):
        match = re.match(r"Programming Language :: Python :: (3\.\d+)\s*$", str(item))
        if match:
            versions.append(match.group(1))
    facts.tested_versions("classifiers", versions, source, "classifiers")


def pytest_config(cfg: dict[str, Any], source: str, facts: Facts) -> None:
    paths = cfg.get("testpaths")
    if paths:
        facts.testpaths = [str(p) for p in (paths if isinstance(paths, list) else str(paths).split())]
        facts.add(source, "testpaths", " ".join(facts.testpaths))
    addopts = cfg.get("addopts")
    if addopts:
        opts = addopts if isinstance(addopts, list) else shlex.split(str(addopts))
        facts.addopts += [str(o) for o in opts]
        facts.add(source, "addopts", " ".join(map(str, opts)))
    facts.ini_keys.update(k.lower() for k in cfg)


def source_root(value: object, source: str, what: str, facts: Facts) -> None:
    root = str(value).strip().strip("/")
    if root and root != "." and root not in facts.source_roots:
        facts.source_roots.append(root)
        facts.add(source, what, root)
