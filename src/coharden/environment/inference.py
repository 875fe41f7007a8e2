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

import ast
import configparser
import itertools
import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

import yaml

from coharden.environment.plan import EnvPlan, Evidence
from coharden.environment.pyversions import (
    DEFAULT_CEILING,
    KNOWN_VERSIONS,
    admitted,
    normalize_version,
    poetry_to_pep440,
    vkey,
)
from coharden.environment.sources import FileSource

TEST_EXTRAS = ("test", "tests", "testing", "test-deps", "tests-deps")
TEST_GROUPS = ("test", "tests", "testing", "dev")
#: Tools a CI step installs that are not test dependencies of the project.
TOOLING = frozenset({"pip", "setuptools", "wheel", "tox", "nox", "build", "twine", "codecov", "coveralls",
                     "virtualenv", "uv", "pre-commit", "tox-gh-actions", "tox-gh", "poetry", "hatch", "pdm",
                     "setuptools-scm", "flit"})
#: Requirement files with these words in the name are not needed to run tests.
_REQ_SKIP = re.compile(r"doc|lint|typing|mypy|release|bench|format|style|publish|deploy", re.IGNORECASE)
_REQ_NAME = re.compile(r"(^|/)([\w.-]*requirements[\w.-]*\.txt|requirements/[\w.-]+\.txt|[\w.-]*reqs[\w.-]*\.txt)$",
                       re.IGNORECASE)

# pytest options: the ones that take a separate value, and the ones a verdict run must not inherit
_VALUE_OPTS = frozenset({"-m", "-k", "-p", "-W", "-n", "-c", "-o", "--rootdir", "--cov", "--cov-report",
                         "--cov-config", "--junitxml", "--junit-xml", "--durations", "--tb", "--maxfail",
                         "--deselect", "--ignore", "--ignore-glob", "--timeout", "--dist", "--color", "--basetemp",
                         "--numprocesses", "--import-mode", "--confcutdir", "--html", "--reruns",
                         "--cov-fail-under", "--log-level", "--override-ini", "--capture"})
_DROP_OPTS = frozenset({"-x", "--exitfirst", "-v", "-vv", "-vvv", "--verbose", "-q", "--quiet", "-qq", "-s",
                        "--lf", "--last-failed", "--ff", "--failed-first", "--sw", "--stepwise", "--no-cov",
                        "-k", "--cov", "--cov-report", "--cov-config", "--cov-append", "--cov-branch",
                        "--cov-fail-under", "--junitxml", "--junit-xml", "--durations", "--tb", "--maxfail",
                        "--color", "--basetemp", "-n", "--numprocesses", "--dist", "--html", "--showlocals", "-l",
                        "--capture", "--reruns", "--benchmark-skip", "--benchmark-disable"})
#: option prefix -> pytest plugin that provides it
_OPTION_PLUGINS = (("--cov", "pytest-cov"), ("--no-cov", "pytest-cov"), ("-n", "pytest-xdist"),
                   ("--numprocesses", "pytest-xdist"), ("--dist", "pytest-xdist"), ("--timeout", "pytest-timeout"),
                   ("--reruns", "pytest-rerunfailures"), ("--benchmark", "pytest-benchmark"),
                   ("--html", "pytest-html"), ("--doctest-plus", "pytest-doctestplus"), ("--mypy", "pytest-mypy"),
                   ("--randomly", "pytest-randomly"), ("--asyncio-mode", "pytest-asyncio"),
                   ("--ds", "pytest-django"), ("--env", "pytest-env"))
_INI_PLUGINS = {"asyncio_mode": "pytest-asyncio", "asyncio_default_fixture_loop_scope": "pytest-asyncio",
                "timeout": "pytest-timeout", "django_settings_module": "pytest-django", "env": "pytest-env",
                "mock_use_standalone_module": "pytest-mock", "xfail_strict": ""}
#: what a test module's text shows -> plugin it needs
_TEXT_PLUGINS = ((re.compile(r"def \w+\([^)]*\bmocker\b"), "pytest-mock"),
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
class _Facts:
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
        found = {v for v in (normalize_version(x) for x in _as_list(versions)) if v}
        if found:
            self.tested.setdefault(kind, set()).update(found)
            self.add(source, what, ", ".join(sorted(found, key=vkey)))

    def deps(self, items: object) -> None:
        self.known_deps.update(d for d in (dist_name(str(x)) for x in _as_list(items)) if d)


def _as_list(value: object) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list | tuple | set):
        return list(value)
    if isinstance(value, str):
        return [line.strip() for line in value.splitlines() if line.strip()]
    return [value]


def _ini(text: str) -> configparser.ConfigParser:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(text)
    return parser


# --- readers -------------------------------------------------------------------------------------------------
def _read_pyproject(source: FileSource, facts: _Facts) -> None:
    text = source.read("pyproject.toml")
    if text is None:
        return
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        facts.notes.append(f"pyproject.toml does not parse ({exc}); ignored")
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
    _classifiers(project.get("classifiers") or poetry.get("classifiers"), "pyproject.toml", facts)
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
            reqs = [_poetry_requirement(k, v) for k, v in groups[name].items()]
            reqs = [r for r in reqs if r]
            facts.test_deps += reqs
            facts.deps(reqs)
            facts.add("pyproject.toml", f"tool.poetry group {name}", ", ".join(reqs))
    dep_groups = data.get("dependency-groups") or {}
    if isinstance(dep_groups, dict):
        for name in TEST_GROUPS:
            if name in dep_groups:
                reqs = _expand_group(dep_groups, name, set())
                facts.test_deps += reqs
                facts.deps(reqs)
                facts.add("pyproject.toml", f"dependency-groups.{name}", ", ".join(reqs))
                break
    pytest_cfg = (tool.get("pytest") or {}).get("ini_options")
    if isinstance(pytest_cfg, dict):
        _pytest_config(pytest_cfg, "pyproject.toml [tool.pytest.ini_options]", facts)
    setuptools = tool.get("setuptools") or {}
    package_dir = setuptools.get("package-dir") or {}
    if isinstance(package_dir, dict) and package_dir.get(""):
        _source_root(package_dir[""], "pyproject.toml", "tool.setuptools.package-dir", facts)
    find = (setuptools.get("packages") or {}) if isinstance(setuptools.get("packages"), dict) else {}
    for where in (find.get("find") or {}).get("where", []):
        _source_root(where, "pyproject.toml", "tool.setuptools.packages.find.where", facts)
    wheel = ((tool.get("hatch") or {}).get("build") or {}).get("targets", {}).get("wheel", {})
    for package in wheel.get("packages", []) if isinstance(wheel, dict) else []:
        parent = str(PurePosixPath(package).parent)
        if parent not in (".", ""):
            _source_root(parent, "pyproject.toml", "tool.hatch.build.targets.wheel.packages", facts)
    legacy = (tool.get("tox") or {}).get("legacy_tox_ini")
    if isinstance(legacy, str):
        _read_tox_text(legacy, "pyproject.toml [tool.tox]", facts)


def _expand_group(groups: dict, name: str, seen: set[str]) -> list[str]:  # type: ignore[type-arg]
    """PEP 735 group entries with ``{include-group = ...}`` expanded."""
    if name in seen:
        return []
    seen.add(name)
    out: list[str] = []
    for entry in groups.get(name) or []:
        if isinstance(entry, str):
            out.append(entry)
        elif isinstance(entry, dict) and isinstance(entry.get("include-group"), str):
            out += _expand_group(groups, entry["include-group"], seen)
    return out


def _poetry_requirement(name: str, spec: object) -> str:
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


def _classifiers(items: object, source: str, facts: _Facts) -> None:
    versions = []
    for item in _as_list(items):
        match = re.match(r"Programming Language :: Python :: (3\.\d+)\s*$", str(item))
        if match:
            versions.append(match.group(1))
    facts.tested_versions("classifiers", versions, source, "classifiers")


def _pytest_config(cfg: dict[str, Any], source: str, facts: _Facts) -> None:
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


def _source_root(value: object, source: str, what: str, facts: _Facts) -> None:
    root = str(value).strip().strip("/")
    if root and root != "." and root not in facts.source_roots:
        facts.source_roots.append(root)
        facts.add(source, what, root)


def _read_setup_cfg(source: FileSource, facts: _Facts) -> None:
    text = source.read("setup.cfg")
    if text is None:
        return
    try:
        cfg = _ini(text)
    except configparser.Error as exc:
        facts.notes.append(f"setup.cfg does not parse ({exc}); ignored")
        return
    if cfg.has_section("metadata") or cfg.has_section("options"):
        facts.installable = True
    if cfg.has_option("options", "python_requires"):
        spec = cfg.get("options", "python_requires").strip()
        facts.requires.append((spec, "setup.cfg"))
        facts.add("setup.cfg", "options.python_requires", spec)
    if cfg.has_option("metadata", "classifiers"):
        _classifiers(cfg.get("metadata", "classifiers"), "setup.cfg", facts)
    if cfg.has_option("options", "install_requires"):
        facts.deps(cfg.get("options", "install_requires"))
    if cfg.has_option("options", "tests_require"):
        reqs = _as_list(cfg.get("options", "tests_require"))
        facts.test_deps += reqs
        facts.deps(reqs)
        facts.add("setup.cfg", "options.tests_require", ", ".join(reqs))
    if cfg.has_section("options.extras_require"):
        facts.extras_available.update(cfg.options("options.extras_require"))
        for name in TEST_EXTRAS:
            if cfg.has_option("options.extras_require", name):
                facts.deps(cfg.get("options.extras_require", name))
    if cfg.has_option("options", "package_dir"):
        for line in _as_list(cfg.get("options", "package_dir")):
            key, _, value = line.partition("=")
            if not key.strip() and value.strip():
                _source_root(value, "setup.cfg", "options.package_dir", facts)
    if cfg.has_section("tool:pytest"):
        _pytest_config(dict(cfg.items("tool:pytest")), "setup.cfg [tool:pytest]", facts)
    if cfg.has_section("tox:tox") or cfg.has_section("testenv"):
        sections = {s: dict(cfg.items(s)) for s in cfg.sections()}
        sections["tox"] = sections.pop("tox:tox", {})
        _read_tox_sections(sections, "setup.cfg [tox:tox]", facts)


def _literal(node: ast.AST | None, names: dict[str, ast.AST]) -> Any:
    """The value of a literal expression, following module-level ``NAME = <literal>`` once; None if unknown."""
    if node is None:
        return None
    if isinstance(node, ast.Name) and node.id in names:
        node = names[node.id]
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return None


def _read_setup_py(source: FileSource, facts: _Facts) -> None:
    text = source.read("setup.py")
    if text is None:
        return
    facts.installable = True
    facts.add("setup.py", "present", "setup.py")
    try:
        tree = ast.parse(text)
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
    spec = _literal(keywords.get("python_requires"), names)
    if isinstance(spec, str):
        facts.requires.append((spec, "setup.py"))
        facts.add("setup.py", "python_requires", spec)
    _classifiers(_literal(keywords.get("classifiers"), names), "setup.py", facts)
    facts.deps(_literal(keywords.get("install_requires"), names))
    tests_require = _literal(keywords.get("tests_require"), names)
    if isinstance(tests_require, list | tuple) and tests_require:
        facts.test_deps += [str(r) for r in tests_require]
        facts.deps(tests_require)
        facts.add("setup.py", "tests_require", ", ".join(map(str, tests_require)))
    extras = _literal(keywords.get("extras_require"), names)
    if isinstance(extras, dict):
        facts.extras_available.update(str(k) for k in extras)
        for name in TEST_EXTRAS:
            facts.deps(extras.get(name))
    package_dir = _literal(keywords.get("package_dir"), names)
    if isinstance(package_dir, dict) and package_dir.get(""):
        _source_root(package_dir[""], "setup.py", "package_dir", facts)
    if "ext_modules" in keywords or "cythonize" in text:
        facts.compiled = True
        facts.add("setup.py", "ext_modules", "compiled extensions")


def _read_requirements(source: FileSource, facts: _Facts) -> None:
    candidates = [p for p in source.files() if _REQ_NAME.search(p) and p.count("/") <= 1]
    chosen = []
    for path in candidates:
        name = PurePosixPath(path).name
        if _REQ_SKIP.search(path):
            facts.notes.append(f"{path}: left out (not needed to run tests)")
            continue
        if name.lower() == "requirements.txt" or re.search(r"(^|[/_.-])(tests?|testing|dev|develop|ci)([/_.-]|$)",
                                                            path, re.IGNORECASE):
            chosen.append(path)
        elif path.startswith("requirements/") and re.search(r"base|main|install|prod|common", name, re.I):
            chosen.append(path)
    # base requirements first, then the others in name order
    chosen.sort(key=lambda p: (0 if re.search(r"(^|/)requirements\.txt$|base|main|common|install", p) else 1, p))
    for path in chosen:
        text = source.read(path) or ""
        facts.requirement_files.append(path)
        facts.deps([line for line in text.splitlines() if line.strip() and not line.lstrip().startswith(("#", "-"))])
        facts.add(path, "requirements", f"{len(text.splitlines())} lines")


def _brace_expand(text: str) -> list[str]:
    """'py{38,39}-x{a,b}' -> ['py38-xa', 'py38-xb', 'py39-xa', 'py39-xb']."""
    parts = re.split(r"(\{[^{}]*\})", text)
    options = [p[1:-1].split(",") if p.startswith("{") and p.endswith("}") else [p] for p in parts]
    return ["".join(choice).strip() for choice in itertools.product(*options)]


def _split_top(text: str) -> list[str]:
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


def _tox_value(value: str) -> str:
    return value.replace("{toxinidir}", ".").replace("{tox_root}", ".")


def _read_tox_text(text: str, label: str, facts: _Facts) -> None:
    try:
        cfg = _ini(text)
    except configparser.Error as exc:
        facts.notes.append(f"{label} does not parse ({exc}); ignored")
        return
    _read_tox_sections({s: dict(cfg.items(s)) for s in cfg.sections()}, label, facts)


def _read_tox_sections(sections: dict[str, dict[str, str]], label: str, facts: _Facts) -> None:
    tox = sections.get("tox", {})
    envs = [env for item in _split_top(tox.get("envlist", tox.get("env_list", ""))) for env in _brace_expand(item)]
    versions = []
    for env in envs:
        for factor in env.split("-"):
            match = re.match(r"^py(3)\.?(\d+)$", factor)
            if match:
                versions.append(f"3.{match.group(2)}")
    facts.tested_versions("tox", versions, label, "envlist")
    testenv = sections.get("testenv", {})
    for line in _as_list(testenv.get("deps", "")):
        line = _tox_value(line.split("#", 1)[0].strip())
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
    for extra in _split_top(testenv.get("extras", "")):
        if extra not in facts.extras_wanted:
            facts.extras_wanted.append(extra)
            facts.add(label, "testenv.extras", extra)
    for line in _as_list(testenv.get("setenv", "")):
        key, sep, value = line.partition("=")
        value = _tox_value(value.strip())
        if sep and key.strip() and "{" not in value and ":" not in key:
            facts.env[key.strip()] = value
            facts.add(label, "testenv.setenv", f"{key.strip()}={value}")
    commands = re.sub(r"\\\n\s*", " ", testenv.get("commands", ""))
    for line in _as_list(commands):
        args = _pytest_args(_tox_value(re.sub(r"\{posargs:?([^}]*)\}", r"\1", line.lstrip("- "))))
        if args is not None:
            facts.pytest_commands.append((args, label))
            facts.add(label, "testenv.commands", line)
    if "pytest" in sections:
        _pytest_config(sections["pytest"], f"{label} [pytest]", facts)


def _pytest_args(command: str) -> list[str] | None:
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


def _read_nox(source: FileSource, facts: _Facts) -> None:
    for path in ("noxfile.py", "noxfile"):
        text = source.read(path)
        if text is not None:
            break
    else:
        return
    try:
        tree = ast.parse(text)
    except SyntaxError:
        facts.notes.append(f"{path} does not parse; ignored")
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call):
                    for kw in deco.keywords:
                        if kw.arg in ("python", "py"):
                            facts.tested_versions("nox", _literal(kw.value, {}), path, f"session {node.name} python")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        values = [_literal(a, {}) for a in node.args]
        if not all(isinstance(v, str) for v in values) or not values:
            continue
        if node.func.attr == "install":
            reqs = [v for v in values if not v.startswith("-") and not v.startswith(".")]
            extras = [m.group(1) for v in values for m in [re.match(r"^\.\[([^\]]+)\]$", v)] if m]
            for group in extras:
                facts.extras_wanted += [e.strip() for e in group.split(",") if e.strip() not in facts.extras_wanted]
            if values[0] == "-r" and len(values) > 1:
                facts.requirement_files.append(values[1])
                reqs = reqs[1:] if reqs and reqs[0] == values[1] else reqs
            facts.test_deps += [r for r in reqs if dist_name(r) not in TOOLING]
            facts.deps(reqs)
            facts.add(path, "session.install", " ".join(values))
        elif node.func.attr == "run" and PurePosixPath(values[0]).name in ("pytest", "py.test"):
            facts.pytest_commands.append((values[1:], path))
            facts.add(path, "session.run", " ".join(values))


_PIP_INSTALL = re.compile(r"^(?:python\d?(?:\.\d+)?\s+-m\s+pip|pip\d?(?:\.\d+)?|uv\s+pip)\s+install\b(?P<rest>.*)$")


def _read_workflows(source: FileSource, facts: _Facts) -> None:
    paths = [p for p in source.files() if p.startswith(".github/workflows/") and p.endswith((".yml", ".yaml"))]
    for path in paths:
        try:
            data = yaml.safe_load(source.read(path) or "")
        except yaml.YAMLError as exc:
            facts.notes.append(f"{path} does not parse ({exc.__class__.__name__}); ignored")
            continue
        if not isinstance(data, dict):
            continue
        for job_name, job in (data.get("jobs") or {}).items():
            if not isinstance(job, dict):
                continue
            matrix = ((job.get("strategy") or {}).get("matrix") or {})
            if isinstance(matrix, dict):
                for key in ("python-version", "python", "python_version", "py"):
                    facts.tested_versions("ci", matrix.get(key), path, f"jobs.{job_name}.strategy.matrix.{key}")
                for include in matrix.get("include") or []:
                    if isinstance(include, dict):
                        for key in ("python-version", "python", "python_version"):
                            facts.tested_versions("ci", include.get(key), path, f"jobs.{job_name} matrix.include")
            for step in job.get("steps") or []:
                if not isinstance(step, dict):
                    continue
                if "setup-python" in str(step.get("uses", "")):
                    value = (step.get("with") or {}).get("python-version")
                    if value is not None and "${{" not in str(value):
                        facts.tested_versions("ci", value, path, f"jobs.{job_name} setup-python")
                if isinstance(step.get("run"), str):
                    _read_run_script(step["run"], f"{path} jobs.{job_name}", facts)


def _read_run_script(script: str, label: str, facts: _Facts) -> None:
    script = re.sub(r"\\\n\s*", " ", script)
    for raw in script.splitlines():
        for line in re.split(r"\s*&&\s*|\s*;\s*", raw.strip()):
            if not line or line.startswith("#") or "${{" in line or "$(" in line:
                continue
            match = _PIP_INSTALL.match(line)
            if match:
                command = _normalize_pip(match["rest"])
                if command:
                    facts.ci_installs.append(command)
                    facts.add(label, "run", line)
                continue
            args = _pytest_args(line)
            if args is not None:
                facts.pytest_commands.append((args, label))
                facts.add(label, "run", line)
            elif re.match(r"^(tox|nox)\b", line):
                facts.notes.append(f"{label}: CI runs {line.split()[0]}; its configuration was read instead")


def _normalize_pip(rest: str) -> str | None:
    """``pip install <rest>`` as ``python -m pip install ...`` for the environment, or None when it only installs
    tooling (pip itself, tox, build tools) or cannot be read."""
    try:
        tokens = shlex.split(rest)
    except ValueError:
        return None
    kept: list[str] = []
    installs_something = False
    skip_next = False
    for i, token in enumerate(tokens):
        if skip_next:
            skip_next = False
            continue
        if token in ("--user", "--system", "-U", "--upgrade", "--quiet", "-q", "--progress-bar"):
            if token == "--progress-bar":
                skip_next = True
            continue
        if token in ("-r", "--requirement", "-e", "--editable", "-c", "--constraint"):
            installs_something = True
            kept.append(token)
            continue
        if token.startswith("-"):
            kept.append(token)
            continue
        if i > 0 and tokens[i - 1] in ("-r", "--requirement", "-e", "--editable", "-c", "--constraint"):
            kept.append(token)
            continue
        if dist_name(token) in TOOLING and not token.startswith("."):
            continue
        installs_something = True
        kept.append(token)
    if not installs_something:
        return None
    return "python -m pip install " + " ".join(shlex.quote(t) for t in kept)


def _read_misc(source: FileSource, facts: _Facts) -> None:
    pin = source.read(".python-version")
    if pin:
        version = normalize_version(pin.strip().splitlines()[0])
        if version:
            facts.pinned = version
            facts.add(".python-version", "pin", version)
    pytest_ini = source.read("pytest.ini")
    if pytest_ini is not None:
        try:
            cfg = _ini(pytest_ini)
            if cfg.has_section("pytest"):
                _pytest_config(dict(cfg.items("pytest")), "pytest.ini", facts)
        except configparser.Error:
            facts.notes.append("pytest.ini does not parse; ignored")
    tox = source.read("tox.ini")
    if tox is not None:
        _read_tox_text(tox, "tox.ini", facts)
    files = source.files()
    if not facts.source_roots:
        src_packages = [p for p in files if re.match(r"^src/[^/]+(/__init__\.py|\.py)$", p)]
        if src_packages:
            _source_root("src", "layout", "src/ holds the package", facts)
    if any(p.endswith((".pyx", ".c", ".cpp")) and not p.startswith(("tests/", "docs/")) for p in files):
        facts.compiled = True
    facts.ini_keys = {k.lower() for k in facts.ini_keys}


# --- rules -------------------------------------------------------------------------------------------------------
def _choose_python(facts: _Facts) -> tuple[str, str | None, list[str]]:
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


def _filter_test_args(args: list[str]) -> tuple[list[str], list[str]]:
    """(kept options, test paths) from the arguments of a pytest command."""
    kept: list[str] = []
    paths: list[str] = []
    i = 0
    while i < len(args):
        token = args[i]
        name = token.split("=", 1)[0]
        takes_value = name in _VALUE_OPTS and "=" not in token
        value = [args[i + 1]] if takes_value and i + 1 < len(args) else []
        if token.startswith("-"):
            dropped = name in _DROP_OPTS or name.startswith(("--cov", "--junit", "--benchmark")) \
                or re.match(r"^-r\w+$", token) or re.match(r"^-[vqsx]+$", token)
            if not dropped:
                kept += [token, *value]
            i += 1 + len(value)
            continue
        paths.append(token.split("::")[0].rstrip("/") or token)
        i += 1
    return kept, paths


def _plugins(facts: _Facts, source: FileSource) -> list[tuple[str, str]]:
    """(plugin, why) for pytest plugins the configuration or the tests need."""
    wanted: list[tuple[str, str]] = []
    options = list(facts.addopts) + [a for args, _ in facts.pytest_commands for a in args]
    for option in facts.addopts:
        for prefix, plugin in _OPTION_PLUGINS:
            if option == prefix or option.startswith(prefix + "=") or (prefix.startswith("--")
                                                                       and option.startswith(prefix)):
                wanted.append((plugin, f"addopts {option}"))
    for i, option in enumerate(options):
        if option == "-p" and i + 1 < len(options):
            name = options[i + 1]
            if not name.startswith("no:") and "." not in name:
                wanted.append((f"pytest-{name.removeprefix('pytest_').removeprefix('pytest-')}", f"-p {name}"))
    for key in facts.ini_keys:
        plugin = _INI_PLUGINS.get(key)
        if plugin:
            wanted.append((plugin, f"ini option {key}"))
    test_files = [p for p in source.files() if p.endswith(".py") and re.search(r"(^|/)(tests?|testing)/|(^|/)test_"
                                                                                 r"|_test\.py$|conftest\.py$", p)]
    for path in test_files[:400]:
        text = source.read(path) or ""
        for pattern, plugin in _TEXT_PLUGINS:
            if pattern.search(text):
                wanted.append((plugin, f"{path} uses it"))
    out: list[tuple[str, str]] = []
    for plugin, why in wanted:
        if plugin not in facts.known_deps and plugin not in {p for p, _ in out}:
            out.append((plugin, why))
    return out


def infer_plan(source: FileSource, *, repo: str = "", commit: str = "") -> EnvPlan:
    """The environment plan for the files of ``source`` (see the module docstring for the rules)."""
    facts = _Facts()
    _read_pyproject(source, facts)
    _read_setup_cfg(source, facts)
    _read_setup_py(source, facts)
    _read_requirements(source, facts)
    _read_misc(source, facts)
    _read_nox(source, facts)
    _read_workflows(source, facts)
    python, spec, tested = _choose_python(facts)

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
    plugins = _plugins(facts, source)
    for plugin, why in plugins:
        facts.notes.append(f"{plugin}: {why}")
    install.append("python -m pip install " + " ".join(["pytest", *(p for p, _ in plugins)]))

    test_args: list[str] = []
    test_paths: list[str] = list(facts.testpaths)
    if facts.pytest_commands:
        args, label = facts.pytest_commands[0]
        test_args, cmd_paths = _filter_test_args(args)
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
