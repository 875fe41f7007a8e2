"""The probe for a missing dependency at an instance's base commit (step 2 of :mod:`coharden.environment.derived`):
in the spec environment, at the base commit, every requirement the checkout declares must be installed in a
version it allows, and importing the project and collecting the touched test files must not fail on a missing
module. The probe runs the repository's own code, so it is confined like a test run."""

from __future__ import annotations

import ast
import configparser
import hashlib
import json
import re
import shutil
import tempfile
import tomllib
from pathlib import Path

from coharden import pysource
from coharden.environment.build import build_environ
from coharden.environment.inference.setuptools import literal
from coharden.environment.specbuild import SpecEnv
from coharden.environment.specs import EnvSpec, import_name
from coharden.execution.git import git
from coharden.execution.runners import runner_of
from coharden.execution.sandbox import Confinement, run_limited

MISSING_DEPENDENCY = re.compile(
    r"(ModuleNotFoundError: No module named [^\n]+|ImportError: No module named [^\n]+|"
    r"ImportError: cannot import name [^\n]+|[\w.]*DistributionNotFound[^\n]*|[\w.]*VersionConflict[^\n]*)")


def declared_requirements(src: Path) -> list[str]:
    """The requirements a checkout declares for installing it: ``setup.cfg``'s ``install_requires``,
    ``pyproject.toml``'s ``[project] dependencies``, and ``setup.py``'s ``install_requires`` when it is a list
    of string literals (inline or through a module-level name). What cannot be read statically is left out."""
    found: list[str] = []
    cfg = src / "setup.cfg"
    if cfg.is_file():
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read_string(cfg.read_text(errors="replace"))
            found += [r.strip() for r in parser.get("options", "install_requires", fallback="").splitlines()]
        except configparser.Error:
            pass
    pyproject = src / "pyproject.toml"
    if pyproject.is_file():
        try:
            deps = tomllib.loads(pyproject.read_text(errors="replace")).get("project", {}).get("dependencies", [])
            found += [d for d in deps if isinstance(d, str)]
        except tomllib.TOMLDecodeError:
            pass
    setup = src / "setup.py"
    if setup.is_file():
        found += _setup_py_requirements(setup.read_text(errors="replace"))
    return list(dict.fromkeys(r for r in found if r and not r.startswith("#")))


def _setup_py_requirements(text: str) -> list[str]:
    try:
        tree = pysource.parse(text)
    except (SyntaxError, ValueError):
        return []
    names: dict[str, ast.AST] = {n.targets[0].id: n.value for n in tree.body if isinstance(n, ast.Assign)
                                 and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name)}
    for node in ast.walk(tree):
        for keyword in node.keywords if isinstance(node, ast.Call) else []:
            value = literal(keyword.value, names) if keyword.arg == "install_requires" else None
            if isinstance(value, list | tuple):
                return [r for r in value if isinstance(r, str)]
    return []


# Runs in the environment's interpreter (Python 3.6 and later; ``packaging`` or pip's copy of it): prints the
# first declared requirement that is not installed or installed in a version it excludes (markers that do not
# apply are skipped). The harness installs the project at the base commit (and again before each test run), so
# pip would have installed or replaced that package there: pylint's base commits pin an older astroid.
_REQUIREMENTS_CHECK = """
import json, sys
try:
    from packaging.requirements import Requirement
except Exception:
    try:
        from pip._vendor.packaging.requirements import Requirement
    except Exception:
        sys.exit(0)
try:
    from importlib.metadata import version as _version
except Exception:
    try:
        import pkg_resources
    except Exception:
        sys.exit(0)
    def _version(name):
        return pkg_resources.get_distribution(name).version
def installed(name):
    for spelling in (name, name.replace("-", "_"), name.replace("_", "-"), name.lower()):
        try:
            return _version(spelling)
        except Exception:
            pass
    return None
for text in json.loads(sys.argv[1]):
    try:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate():
            continue
    except Exception:
        continue
    have = installed(req.name)
    if have is None:
        print("DistributionNotFound: the checkout requires %s, which is not installed" % text)
        sys.exit(1)
    if not req.specifier.contains(have, prereleases=True):
        print("VersionConflict: the checkout requires %s, the environment has %s %s" % (text, req.name, have))
        sys.exit(1)
"""


# a cached probe answer is reused only from the same probe (its requirement check and what it counts as missing)
PROBE_VERSION = hashlib.sha256(f"{_REQUIREMENTS_CHECK}\0{MISSING_DEPENDENCY.pattern}".encode()).hexdigest()[:12]


def probe_base_commit(repo: Path, spec: EnvSpec, env: SpecEnv, commit: str, test_files: list[str]) -> str:
    """The first missing-dependency error the spec environment shows at ``commit`` (import the project,
    collect ``test_files`` that exist there), or '' when there is none."""
    with tempfile.TemporaryDirectory(prefix="coharden-probe-") as tmp:
        src = Path(tmp) / "src"
        git(["clone", "--quiet", "--shared", "--no-checkout", str(repo), str(src)], Path(tmp))
        git(["checkout", "--quiet", "--detach", commit], src)
        if env.overlay is not None and env.overlay.is_dir():
            shutil.copytree(env.overlay, src, dirs_exist_ok=True, symlinks=True)
        run_env = {**build_environ(), **{k: v.replace("{workspace}", str(src)) for k, v in env.test_env.items()}}
        run_env["PYTHONDONTWRITEBYTECODE"] = "1"
        commands = [[env.python, "-c", _REQUIREMENTS_CHECK, json.dumps(declared_requirements(src))],
                    [env.python, "-c", f"import {import_name(spec)}"]]
        present = [f for f in test_files if f.endswith(".py") and (src / f).is_file()]
        if runner_of(spec.runner).needs_pytest and present:
            commands.append([env.python, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *present])
        confine = probe_confinement(repo, src, env)
        for command in commands:
            proc = run_limited(command, src, timeout=300, env=run_env, network=False, confine=confine)
            found = MISSING_DEPENDENCY.search(proc.output)
            if found and proc.returncode != 0:
                return found.group(0).strip()[:300]
    return ""


def probe_confinement(repo: Path, src: Path, env: SpecEnv) -> Confinement:
    """The probe runs the repository's own code (its import, its conftest files): confined like a test run.
    Only the probe's checkout is writable (its ``.git`` is not); the objects it borrows, the environment and the
    overlay are shown read-only (the sandbox's private ``/tmp`` would hide them)."""
    readable = [Path(repo) / ".git" / "objects", Path(env.env_dir)]
    venv = Path(env.python).parent.parent
    if (venv / "pyvenv.cfg").is_file():
        readable.append(venv)
    if env.overlay is not None:
        readable.append(Path(env.overlay))
    return Confinement(writable=(src,), readable=tuple(p for p in readable if p.exists()),
                       protected=(src / ".git",))
