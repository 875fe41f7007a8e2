"""Environments for an instance's base commit when it needs more than its spec environment has.

A spec environment is installed from the environment-setup commit and shared by every instance of the spec.
The SWE-bench harness installs the project once more at each instance's base commit, so a dependency the
project declared only later (pytest needing ``importlib_metadata``, pylint needing ``appdirs``) is there.
Here the shared environment is kept and, only where the base commit needs it, a *derived* environment is made:

1. the base commit's dependency files (``setup.py``, ``setup.cfg``, ``pyproject.toml``, requirement and conda
   files) are compared with the setup commit's; identical files: the spec environment serves;
2. else a cheap probe in the spec environment at the base commit looks for a missing dependency: every
   requirement the checkout declares (``install_requires`` of ``setup.cfg`` or of a literal list in
   ``setup.py``, ``[project] dependencies``) must be installed in a version it allows, and importing the
   project and collecting the test files the test patch touches must not fail on a missing or unresolvable
   module (``ModuleNotFoundError``, ``ImportError``, ``DistributionNotFound``, ``VersionConflict``); the
   answer is cached per base commit and probe;
3. when one is found: a copy of the spec environment's venv with the spec's pre-install and install steps run
   at the base commit (editable hooks detached as for the spec environment), cached under
   ``<spec env key>-at-<digest of the base commit's dependency files>``.

The same holds for compiled extensions: the spec environment's C extensions (its overlay) were built from the
setup commit's sources. Where the base commit's extension sources (``.pyx``, ``.c``, ``.h``...) differ, a stale
extension would run against the base commit's Python code (astropy-13236: a ``_column_mixins`` built from a later
``.pyx`` returns plain arrays for a field of a structured column), so an environment is derived there too, its
extensions built at the base commit as the harness builds them (cached under a digest of the dependency files and
the extension sources).

The harness also runs the install step once more after applying the fix it grades, so a fix that declares a
new dependency (pylint's move to ``appdirs``) gets it. Here an instance whose reference fix changes dependency
files always gets a derived environment, installed with those files' changes applied (the digest covers them).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coharden.config import Settings
from coharden.environment.build import BuildError, Log, build_environ
from coharden.environment.dependency_probe import PROBE_VERSION, probe_base_commit
from coharden.environment.sources import EXTENSION_SOURCES
from coharden.environment.specbuild import (
    BUILD_RECIPE,
    DATE_BOUND_MISSED,
    SKIPPED_SYSTEM_STEP,
    Installation,
    SpecBuilder,
    SpecEnv,
    apply_constraints,
    finish_environment,
    reusable,
)
from coharden.environment.specs import EnvSpec, SpecTable, repo_slug
from coharden.errors import PatchError
from coharden.execution.git import git, resolve_commit
from coharden.execution.locks import file_lock
from coharden.patches import file_path, parse, touched_files

DEPENDENCY_FILES = ("setup.py", "setup.cfg", "pyproject.toml")
_DEPENDENCY_PATTERNS = ("requirements*.txt", "requirements/*.txt", "ci/requirements/*.yml", "environment.yml")


def is_dependency_file(path: str, spec: EnvSpec) -> bool:
    if path in (*DEPENDENCY_FILES, *spec.requirements_paths, *spec.environment_yml_paths):
        return True
    return any(Path(path).match(g) and path.count("/") == g.count("/") for g in _DEPENDENCY_PATTERNS)


def dependency_part(patch: str, spec: EnvSpec) -> str:
    """The part of ``patch`` that changes dependency files ('' when none, or the patch cannot be read)."""
    if not patch.strip():
        return ""
    try:
        return "".join(str(f) for f in parse(patch) if is_dependency_file(file_path(f), spec))
    except PatchError:
        return ""


def _tree_digest(repo: Path, commit: str, wanted: Callable[[str], bool]) -> str:
    """A digest of the ``ls-tree`` entries (mode, blob id, path) of the files at ``commit`` that ``wanted``."""
    entries = git(["ls-tree", "-r", "-z", commit], repo).stdout.split("\0")
    lines = sorted({e for e in entries if e and wanted(e.partition("\t")[2])})
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]


def dependency_digest(repo: Path, commit: str, spec: EnvSpec) -> str:
    """A digest of the files that declare the project's dependencies at ``commit`` (their blob ids)."""
    return _tree_digest(repo, commit, lambda path: is_dependency_file(path, spec))


def extension_digest(repo: Path, commit: str) -> str:
    """A digest of the compiled extensions' source files at ``commit`` (their blob ids)."""
    return _tree_digest(repo, commit, lambda path: path.endswith(EXTENSION_SOURCES))


_COMPILED_SUFFIXES = (".so", ".pyd")


def has_compiled_extensions(env: SpecEnv) -> bool:
    """Whether the install built extension modules inside the checkout (kept in the environment's overlay)."""
    overlay = env.overlay
    return overlay is not None and overlay.is_dir() and any(
        p.name.endswith(_COMPILED_SUFFIXES) or ".so." in p.name for p in overlay.rglob("*"))


@dataclass(frozen=True)
class SpecOrigin:
    """What a derived environment starts from: the spec environment ``env``, built by ``builder`` from ``repo``
    under ``spec``."""

    builder: SpecBuilder
    repo: Path
    spec: EnvSpec
    env: SpecEnv


def for_base_commit(origin: SpecOrigin, setup_commit: str, commit: str, test_files: list[str],
                    fix: str = "") -> SpecEnv:
    """``origin.env`` (the spec environment, built at ``setup_commit``) or the environment derived from it for
    ``commit`` (with the dependency-file changes of ``fix``, the reference fix) when the base commit needs
    dependencies the spec environment lacks or the fix changes what the project declares (see the module
    docstring)."""
    builder, repo, spec, env = origin.builder, origin.repo, origin.spec, origin.env
    if not env.ok:
        return env
    commit = resolve_commit(repo, commit)
    setup_commit = resolve_commit(repo, setup_commit)
    fix_deps = dependency_part(fix, spec)
    digest = dependency_digest(repo, commit, spec)
    if not fix_deps and (commit == setup_commit or digest == dependency_digest(repo, setup_commit, spec)):
        return _with_extensions(origin, setup_commit, commit, digest)
    if fix_deps:
        digest = hashlib.sha256(f"{digest}\0{fix_deps}".encode()).hexdigest()[:12]
        files = ", ".join(touched_files(fix_deps))
        builder.log(f"the fix changes {files}: deriving an environment installed with that change")
        return derive(origin, commit, digest, f"the fix changes {files}", fix_deps)
    probes = builder.root / "probes" / env.key
    record = probes / f"{commit}.json"
    built = env.env_dir / "build.json"
    # an answer is kept for the same probe of the same build (an environment rebuilt since may differ)
    fresh = record.is_file() and (not built.is_file() or record.stat().st_mtime >= built.stat().st_mtime)
    answer = json.loads(record.read_text()) if fresh else {}
    if answer.get("probe") == PROBE_VERSION:
        missing = str(answer.get("missing", ""))
    else:
        missing = probe_base_commit(repo, spec, env, commit, test_files)
        probes.mkdir(parents=True, exist_ok=True)
        record.write_text(json.dumps({"missing": missing, "probe": PROBE_VERSION}))
    if not missing:
        return _with_extensions(origin, setup_commit, commit, digest)
    builder.log(f"base commit {commit[:12]} needs what {env.key} lacks ({missing}): deriving an environment")
    return derive(origin, commit, digest, f"the spec environment lacks: {missing}")


def _with_extensions(origin: SpecOrigin, setup_commit: str, commit: str, digest: str) -> SpecEnv:
    """``env`` where its dependencies serve the base commit, unless the install built extensions and the base
    commit's extension sources differ from the setup commit's: then an environment derived at the base commit,
    whose extensions are built from its own sources (every other derived environment is built there anyway)."""
    env, repo = origin.env, origin.repo
    if commit == setup_commit or not has_compiled_extensions(env):
        return env
    extensions = extension_digest(repo, commit)
    if extensions == extension_digest(repo, setup_commit):
        return env
    why = "the compiled extensions' sources differ from the setup commit's"
    origin.builder.log(f"base commit {commit[:12]}: {why}: deriving an environment built there")
    key = hashlib.sha256(f"{digest}\0{extensions}\0".encode()).hexdigest()[:12]
    return derive(origin, commit, key, why)


def derive(origin: SpecOrigin, commit: str, digest: str, why: str = "", deps_patch: str = "") -> SpecEnv:
    """A copy of the spec environment's venv with the spec's pre-install and install steps run at ``commit``
    (with ``deps_patch`` applied), cached."""
    builder, spec, env = origin.builder, origin.spec, origin.env
    key = f"{env.key}-at-{digest}"
    env_dir = builder.root / key
    with file_lock(builder.root / f"{key}.lock"):
        record = env_dir / "build.json"
        # the spec environment's skipped system steps are this copy's too (envcheck's hint reads them)
        inherited = [w for w in env.warnings if w.startswith(SKIPPED_SYSTEM_STEP)]
        previous = reusable(record, newer_than=env.env_dir / "build.json")
        if previous is not None and not _conflict_not_retried(previous):
            warnings = list(dict.fromkeys([*inherited, *previous.warnings]))
            return previous.model_copy(update={"cached": True, "services": list(spec.services),
                                               "warnings": warnings})
        started = time.monotonic()
        result = _derive(origin, commit, key, deps_patch)
        result.services = list(spec.services)
        result.recipe = BUILD_RECIPE
        result.build_seconds = round(time.monotonic() - started, 1)
        result.warnings = [*inherited, *result.warnings]
        if why:
            result.warnings.append(f"derived for base commit {commit[:12]}: {why}")
        env_dir.mkdir(parents=True, exist_ok=True)
        record.write_text(result.model_dump_json(indent=2))
        return result


def _derive(origin: SpecOrigin, commit: str, key: str, deps_patch: str) -> SpecEnv:
    builder, repo, spec, env = origin.builder, origin.repo, origin.spec, origin.env
    env_dir = builder.root / key
    shutil.rmtree(env_dir, ignore_errors=True)
    env_dir.mkdir(parents=True)
    result = SpecEnv(ok=False, key=key, repo=spec.repo, version=spec.version, env_dir=env_dir, runner=spec.runner,
                     derived_from=env.key, commit=commit)
    src, venv = env_dir / "src", env_dir / "venv"
    old_venv = Path(env.python).parent.parent
    git(["clone", "--quiet", "--shared", "--no-checkout", str(repo), str(src)], env_dir)
    git(["checkout", "--quiet", "--detach", commit], src)
    if deps_patch:
        applied = git(["apply", "--whitespace=nowarn", "-"], src, input=deps_patch, check=False)
        if applied.returncode != 0:
            result.failed_step = "install"
            result.error = f"the fix's dependency-file change does not apply: {applied.stderr.strip()[-300:]}"
            return result
    shutil.copytree(old_venv, venv, symlinks=True)
    relocate_venv(venv, old_venv)
    python = venv / "bin" / "python"
    run_env = build_environ()
    run_env.update({"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{run_env.get('PATH', '')}"})
    if spec.constraints:
        apply_constraints(spec, env_dir, run_env)
    constraints = env.env_dir / "date-constraints.txt"
    dated = bool(spec.exclude_newer) and constraints.is_file()
    if dated:
        run_env["PIP_CONSTRAINT"] = str(constraints)  # holds the spec's own constraints too
    with open(env_dir / "build.log", "w") as log_file:
        log_file.write(f"# derived from {env.key} for base commit {commit}\n")
        run = builder.step_runner(result, src, run_env, log_file)
        for command in spec.local_pre_install():
            if not run("pre_install", command):
                return result
        if spec.install and not run("install", spec.install):
            if not dated or not _constraint_conflict(result.error):
                return result
            # the spec environment's date constraints contradict what this commit (or the fix) declares, e.g.
            # a fix that narrows docutils below the pinned version: the harness, which reinstalls after the fix
            # without constraints, resolves it from the index - so does this retry (the spec's own stay)
            run_env.pop("PIP_CONSTRAINT")
            if spec.constraints:
                apply_constraints(spec, env_dir, run_env)
            result.warnings.append(f"{DATE_BOUND_MISSED}: {_UNCONSTRAINED} of commit {commit[:12]}; installed "
                                   "without them")
            result.failed_step = result.error = ""
            if not run("install", spec.install):
                return result
    return finish_environment(Installation(result, spec, src, env_dir, python, run_env))


_CONFLICT = re.compile(r"ResolutionImpossible|conflicting dependencies|Cannot install .* because")
_UNCONSTRAINED = "the date constraints conflict with the requirements"


def _constraint_conflict(error: str) -> bool:
    """pip could not resolve because of a constraint (its report names the "(constraint)" it was given)."""
    return bool(_CONFLICT.search(error)) and "(constraint)" in error


def _conflict_not_retried(previous: SpecEnv) -> bool:
    """A failure on a date-constraint conflict recorded before the retry without them existed: built again."""
    return (not previous.ok and previous.failed_step == "install" and _constraint_conflict(previous.error)
            and not any(_UNCONSTRAINED in w for w in previous.warnings))


def relocate_venv(venv: Path, old: Path) -> None:
    """Point a copied venv's scripts (shebangs, activate files) at the copy instead of the original."""
    before, after = str(old).encode(), str(venv).encode()
    for path in (venv / "bin").iterdir():
        if path.is_symlink() or not path.is_file():
            continue
        data = path.read_bytes()
        if before in data[:4096] or (path.name.startswith("activate") and before in data):
            path.write_bytes(data.replace(before, after))


def instance_environment(instance: Any, repo: Path, settings: Settings, *, log: Log | None = None) -> SpecEnv:
    """The environment ``instance`` (a SWE-bench record) runs in: its spec environment, or one derived from it
    for its base commit; built on first use, then cached. A failed build is returned (``ok`` False)."""
    table = SpecTable.load(settings.environment.swebench_specs)
    spec = table.get(repo_slug(instance.repo), str(instance.version))
    setup = instance.environment_setup_commit or instance.base_commit
    builder = SpecBuilder(settings.cache_dir, log=log)
    built = builder.build(repo, spec, setup, replacements=table.replacements())
    if not built.ok or not instance.environment_setup_commit:
        return built
    files = touched_files(getattr(instance, "test_patch", "") or "")
    derived = for_base_commit(SpecOrigin(builder, repo, spec, built), setup, instance.base_commit, files,
                              getattr(instance, "patch", "") or "")
    if derived is not built and not derived.ok:
        derived.error = (f"the environment derived from {built.key} for base commit {instance.base_commit[:12]} "
                         f"failed: {derived.error}")
    return derived


def describe(env: SpecEnv) -> str:
    """One line naming the environment (and what it was derived from)."""
    return env.key + (f" (derived from {env.derived_from} at {env.commit[:12]})" if env.derived_from else "")


def spec_settings(instance: Any, repo: Path, settings: Settings, *, log: Log | None = None) -> Settings:
    """``settings`` running ``instance`` (a SWE-bench record) in its spec environment (or the one derived from
    it for the instance's base commit), built on first use."""
    built = instance_environment(instance, repo, settings, log=log)
    if not built.ok:
        raise BuildError(f"{instance.instance_id}: environment {built.key} failed ({built.failed_step}): "
                         f"{built.error}")
    return built.settings(settings)


def auto_spec_settings(instance: Any, repo: Path, settings: Settings, *, log: Log | None = None) -> Settings:
    """The spec environment's settings for a SWE-bench record (one with a version and an environment-setup
    commit, of a repository the spec table knows), built on first use; ``settings`` unchanged when the user
    chose an interpreter (``--python`` / config) or the instance names its own, or it is not such a record."""
    import sys

    if settings.environment.python != sys.executable or getattr(instance, "python", None):
        return settings
    if not (instance.version and instance.environment_setup_commit):
        return settings
    if repo_slug(instance.repo) not in SpecTable.load(settings.environment.swebench_specs).repos():
        return settings
    return spec_settings(instance, repo, settings, log=log)
