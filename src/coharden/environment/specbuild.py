"""Environments built from SWE-bench specs, without Docker: one cached virtual environment per (spec,
environment-setup commit), shared by every instance of that spec.

Layout (``<cache_dir>/envs/spec-<name>-<version>-<digest>/``)::

    src/        checkout of the environment-setup commit; the spec's install ran here
    venv/       the virtual environment (the spec's interpreter, found under pyenv or on PATH, never downloaded)
    overlay/    files the install generated (C extensions, generated version modules), laid over every job's
                checkout after it is reset, so they are built once per environment
    build.json  the result (a successful build is reused as is); build.log every command with its output

The project itself is *not* importable from ``src/``: the install's editable hook (``__editable__*.pth``,
``*.egg-link``) is removed after the install (its metadata stays, for entry points and versions), and each
job's test processes get ``PYTHONPATH=<job checkout>[/src]`` instead, so the code that runs is the job's.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.build import BuildError, Log, StepLog, build_environ, last_lines
from coharden.environment.interpreters import PYENV_ROOT, find_interpreter
from coharden.environment.overlay import collect_overlay, detach_editable, site_packages
from coharden.environment.spec_requirements import CONDA_ONLY, requirements_from_env_yml, requirements_from_repo
from coharden.environment.specs import EnvSpec, import_name
from coharden.execution.confinement import BUILD_STEPS
from coharden.execution.git import check_repo, git, resolve_commit
from coharden.execution.locks import file_lock
from coharden.execution.runners import runner_of
from coharden.execution.sandbox import run_limited

# The version of the build steps: bump it when a change to them can turn a failed build into a working one (failed
# builds are cached, and only the current recipe's failures are reused) or a degraded one into a whole one.
# 3: the date bound reaches pip steps when the pre-install narrows a pinned package (sphinx 3.x).
BUILD_RECIPE = 3
# the warning of a build whose pip steps resolved without the spec's date bound: such a build is rebuilt by a
# newer recipe (it works, but not with the packages the harness had: sphinx 3.x got docutils 0.23)
DATE_BOUND_MISSED = "exclude_newer not applied to pip steps"
# a warning an environment built from the spec carries (and environments derived from it inherit)
SKIPPED_SYSTEM_STEP = "skipped system step"


class SpecEnv(BaseModel):
    """A built (or failed) spec environment."""

    ok: bool
    key: str
    repo: str
    version: str
    env_dir: Path
    python: str = ""
    python_version: str = ""
    runner: str = "pytest"
    pytest_version: str = ""
    overlay: Path | None = None
    test_env: dict[str, str] = Field(default_factory=dict)
    steps: list[StepLog] = Field(default_factory=list)
    failed_step: str = ""  # interpreter, packages, pins, pre_install, install, import
    error: str = ""
    cached: bool = False
    warnings: list[str] = Field(default_factory=list)
    build_seconds: float = 0.0
    derived_from: str = ""  # the spec environment this one copies, installed again at ``commit``
    commit: str = ""
    services: list[str] = Field(default_factory=list)  # the spec's (not part of the environment's identity)
    recipe: int = 0  # the BUILD_RECIPE that built it (a failure is reused only from the current recipe)

    def settings(self, base: Settings) -> Settings:
        """``base`` running tests in this environment. The fork server (Python 3.7+; the pytest runner, or one
        that forks: sympy's bin/test) starts each run from an interpreter that has imported pytest and the
        environment's plugins (or, for a runner script, the ``preload`` modules); the project itself is imported
        by each run from its job's checkout (PYTHONPATH is set per job), or kept warm (``warm_imports``)."""
        legacy = bool(self.pytest_version) and int(self.pytest_version.split(".")[0]) < 6
        fork = (base.server.fork_server and runner_of(self.runner).forks and bool(self.python_version)
                and _vkey(self.python_version) >= (3, 7))
        return base.with_overrides(python=self.python, fork_server=fork, runner=self.runner,
                                   test_env={**self.test_env, **base.environment.test_env}, env_overlay=self.overlay,
                                   legacy_pytest=legacy, pytest_version=self.pytest_version,
                                   services=self.services or base.environment.services)


def reusable(record: Path, newer_than: Path | None = None) -> SpecEnv | None:
    """The environment a ``build.json`` describes when it may be reused, else None. A built environment is reused
    whatever built it (it works, and its interpreter is still there) unless an older recipe built it without the
    spec's date bound; a failure only when the current recipe failed (a newer recipe may fix it: retrying costs
    one build, reusing the failure costs the instance). ``newer_than``: the record of the environment this one
    was derived from; a rebuilt origin makes its copies stale."""
    if not record.is_file():
        return None
    if newer_than is not None and newer_than.is_file() and newer_than.stat().st_mtime > record.stat().st_mtime:
        return None
    previous = SpecEnv.model_validate_json(record.read_text())
    if previous.ok:
        degraded = previous.recipe != BUILD_RECIPE and any(DATE_BOUND_MISSED in w for w in previous.warnings)
        ok = Path(previous.python).exists() and not degraded
    else:
        ok = previous.recipe == BUILD_RECIPE
    return previous if ok else None


class SpecBuilder:
    """Builds :class:`SpecEnv` s under ``<cache_dir>/envs``; install commands run with the network allowed."""

    def __init__(self, cache_dir: Path, *, installer: str = "auto", step_timeout: float = 1800.0,
                 pyenv_root: Path = PYENV_ROOT, log: Log | None = None) -> None:
        self.root = (cache_dir / "envs").resolve()
        self.installer = installer
        self.step_timeout = step_timeout
        self.pyenv_root = pyenv_root
        self.log = log or (lambda _msg: None)

    def key(self, spec: EnvSpec, setup_commit: str) -> str:
        digest = hashlib.sha256(f"{spec.identity_json()}\0{setup_commit}\0{self.installer}".encode()).hexdigest()
        name = spec.repo.split("/")[-1].lower()
        return f"spec-{name}-{spec.version}-{digest[:12]}"

    def build(self, repo: Path, spec: EnvSpec, setup_commit: str, *, replacements: list | None = None,
              force: bool = False) -> SpecEnv:
        repo = check_repo(repo)
        commit = resolve_commit(repo, setup_commit)
        key = self.key(spec, commit)
        env_dir = self.root / key
        with file_lock(self.root / f"{key}.lock"):
            record = env_dir / "build.json"
            previous = None if force else reusable(record)
            if previous is not None:
                self.log(f"reusing environment {env_dir}")
                if previous.ok and runner_of(previous.runner).needs_pytest and not previous.pytest_version:
                    previous.pytest_version = _pytest_version(previous)  # a record from before it was kept
                    record.write_text(previous.model_dump_json(indent=2))
                return previous.model_copy(update={"cached": True, "services": list(spec.services)})
            started = time.monotonic()
            result = self._build(repo, commit, spec, key, replacements or [])
            result.services = list(spec.services)
            result.recipe = BUILD_RECIPE
            result.build_seconds = round(time.monotonic() - started, 1)
            env_dir.mkdir(parents=True, exist_ok=True)
            record.write_text(result.model_dump_json(indent=2))
            return result

    # --- the steps ----------------------------------------------------------------------------------------
    def _build(self, repo: Path, commit: str, spec: EnvSpec, key: str,
               replacements: list[tuple[str, str | None]]) -> SpecEnv:
        env_dir = self.root / key
        shutil.rmtree(env_dir, ignore_errors=True)
        env_dir.mkdir(parents=True)
        result = SpecEnv(ok=False, key=key, repo=spec.repo, version=spec.version, env_dir=env_dir,
                         runner=spec.runner)
        result.warnings += [f"{SKIPPED_SYSTEM_STEP} (needs root / a system package manager): {c}"
                            for c in spec.system_steps()]
        try:
            base = find_interpreter(spec.python, self.pyenv_root)
        except BuildError as exc:
            result.failed_step, result.error = "interpreter", str(exc)
            return result
        src, venv = env_dir / "src", env_dir / "venv"
        git(["clone", "--quiet", "--shared", "--no-checkout", str(repo), str(src)], env_dir)
        git(["checkout", "--quiet", "--detach", commit], src)
        python = venv / "bin" / "python"
        env = build_environ()
        env.update({"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"})
        site = Installation(result, spec, src, env_dir, python, env)
        with open(env_dir / "build.log", "w") as log_file:
            run = self.step_runner(result, src, env, log_file)
            if not run("interpreter", f"{shlex.quote(base)} -m venv {shlex.quote(str(venv))}"):
                return result
            if spec.constraints:
                apply_constraints(spec, env_dir, env)
            install = self._installer(str(python), spec.python, spec.exclude_newer)
            if spec.exclude_newer and "--exclude-newer" not in install:
                result.warnings.append(f"exclude_newer {spec.exclude_newer} not applied: pip has no date bound "
                                       "(uv is missing or does not drive this interpreter)")
            # what a fresh conda environment has: pip, setuptools (before 70 dropped old commands) and wheel
            # (an old pip may still take a wheel release that needs a newer Python: 0.38 dropped 3.6)
            tooling = "'pip<24.1' 'setuptools<70' wheel" if _vkey(spec.python) >= (3, 8) \
                else "-U 'pip<22' 'wheel<0.38'"
            if not run("interpreter", f"{install} {tooling}"):
                return result
            if not self._packages(site, install, replacements, run):
                return result
            pins = " ".join(shlex.quote(p) for p in spec.pip_packages)
            if pins and not run("pins", f"{install} {pins}"):
                return result
            for command in spec.local_pre_install():
                if not run("pre_install", command):
                    return result
            if spec.exclude_newer:  # after pre-install, which may edit the requirements (sphinx pins in setup.py)
                self._date_constraints(site)
            if spec.install and not run("install", spec.install):
                return result
        return finish_environment(site)

    def step_runner(self, result: SpecEnv, src: Path, env: dict[str, str], log_file: Any) -> Any:
        """``run(step, command) -> bool``: one build command in ``src`` (network allowed), logged to ``log_file``
        and ``result.steps``; a failure fills ``result.failed_step`` / ``result.error``."""
        def run(step: str, command: str) -> bool:
            self.log(f"$ {command}")
            proc = run_limited(["/bin/bash", "-c", command], src, timeout=self.step_timeout, env=env, network=True,
                               confine=BUILD_STEPS)
            result.steps.append(StepLog(command=command, returncode=proc.returncode,
                                        duration=round(proc.duration, 3), timed_out=proc.timed_out,
                                        output_tail=last_lines(proc.output)))
            log_file.write(f"$ {command}\n{proc.output}\n[exit {proc.returncode}, {proc.duration:.1f}s]\n\n")
            log_file.flush()
            if proc.timed_out or proc.returncode != 0:
                what = "timed out" if proc.timed_out else f"exited with {proc.returncode}"
                result.failed_step = step
                result.error = f"{step} step `{command[:200]}` {what}:\n{last_lines(proc.output, 25)}"
                return False
            return True

        return run

    def _installer(self, python: str, version: str, exclude_newer: str = "") -> str:
        """``uv pip install --python ...`` (fast) where uv exists and supports the interpreter, else pip. With
        ``exclude_newer`` uv resolves as of that date."""
        uv = _uv_binary()
        if self.installer != "pip" and uv and _vkey(version) >= (3, 8):
            bound = f" --exclude-newer {shlex.quote(_rfc3339(exclude_newer))}" if exclude_newer else ""
            return f"{shlex.quote(uv)} pip install --python {shlex.quote(python)}{bound}"
        return f"{shlex.quote(python)} -m pip install"

    def _date_constraints(self, site: Installation) -> None:
        """Let the pip install step resolve as of ``spec.exclude_newer`` too (pip has no date
        option): uv compiles the project's requirements (all extras) with the pins as of that date into a
        constraints file pip reads (``PIP_CONSTRAINT``). Without uv, or when that fails, a warning says so."""
        spec, src, env_dir, python, env, result = site.spec, site.src, site.env_dir, site.python, site.env, site.result
        uv = _uv_binary()
        meta = next((src / n for n in ("pyproject.toml", "setup.py", "setup.cfg") if (src / n).is_file()), None)
        if uv is None or meta is None:
            result.warnings.append(f"{DATE_BOUND_MISSED}: " +
                                   ("uv is not installed" if uv is None else "no pyproject.toml/setup.py/setup.cfg"))
            return
        (env_dir / "pins.txt").write_text("".join(p + "\n" for p in spec.pip_packages))
        # the checkout itself, as the project: a dependency that depends on the project (sphinxcontrib-applehelp
        # 1.0.7 on Sphinx>=5) is then resolved against the checkout's version, not the index's newest
        (env_dir / "self.in").write_text(f"-e {Path(src).resolve().as_uri()}\n")  # a URI: spaces survive
        out = env_dir / "date-constraints.txt"
        base = [uv, "pip", "compile", "--python", str(python), "--exclude-newer", _rfc3339(spec.exclude_newer),
                "--all-extras", "--no-header", "--no-annotate", "-o", str(out), str(meta)]
        pins = str(env_dir / "pins.txt")
        for inputs in ([str(env_dir / "self.in"), pins], [pins]):
            command, pinned = base + inputs, set()
            proc = run_limited(command, src, timeout=self.step_timeout, env=env, network=True, confine=BUILD_STEPS)
            if proc.returncode != 0 and spec.pip_packages:
                # the pre-install may narrow what the pins name (sphinx 3.x: Jinja2<3.0 in setup.py, jinja2==3.0.3
                # pinned): resolve the project alone; the pinned packages stay out of the constraints, as installed
                command = command[:-1]
                pinned = {_normalized(re.split(r"[<>=!~ ;\[]", p.strip(), maxsplit=1)[0]) for p in spec.pip_packages}
                proc = run_limited(command, src, timeout=self.step_timeout, env=env, network=True, confine=BUILD_STEPS)
            if proc.returncode == 0:
                break
        result.steps.append(StepLog(command=shlex.join(command), returncode=proc.returncode,
                                    duration=round(proc.duration, 3), timed_out=proc.timed_out,
                                    output_tail=last_lines(proc.output)))
        if proc.returncode != 0 or not out.is_file():
            result.warnings.append(f"{DATE_BOUND_MISSED} (uv pip compile failed): "
                                   f"{last_lines(proc.output, 5)}")
            return
        # a dependency of the project may depend on the project (sphinxcontrib-* on Sphinx): the resolution then
        # names the project itself, from the index, which would refuse the local checkout's version
        own = _normalized(spec.repo.split("/")[-1])
        kept = [line for line in out.read_text().splitlines() if not line.strip().startswith(("-e", "file:"))
                and _normalized(re.split(r"[<>=!~ ;\[]", line.strip(), maxsplit=1)[0]) not in {own, *pinned}]
        out.write_text("\n".join([*kept, *spec.constraints]) + "\n")
        env["PIP_CONSTRAINT"] = str(out)

    def _packages(self, site: Installation, install: str, replacements: list[tuple[str, str | None]],
                  run: Any) -> bool:
        spec, src, env_dir, result = site.spec, site.src, site.env_dir, site.result
        if not spec.packages:
            return True
        if spec.packages == "requirements.txt":
            try:
                text = requirements_from_repo(src, spec, replacements)
            except BuildError as exc:
                result.failed_step, result.error = "packages", str(exc)
                return False
            (env_dir / "requirements.txt").write_text(text)
            return bool(run("packages", f"{install} -r {shlex.quote(str(env_dir / 'requirements.txt'))}"))
        if spec.packages == "environment.yml":
            try:
                wanted = requirements_from_env_yml(src, spec)
            except BuildError as exc:
                result.failed_step, result.error = "packages", str(exc)
                return False
            # the pins decide where the conda file and the pins disagree
            pinned = {re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0].lower() for p in spec.pip_packages}
            wanted = [w for w in wanted if re.split(r"[<>=!~\[ ]", w, maxsplit=1)[0].lower() not in pinned]
            (env_dir / "environment-requirements.txt").write_text("\n".join(wanted) + "\n")
            pins = " ".join(shlex.quote(p) for p in spec.pip_packages)
            if run("packages", f"{install} {pins} {' '.join(shlex.quote(w) for w in wanted)}"):
                return True
            # conda files name optional packages pip cannot always build: install what installs, say what not
            result.steps.pop()
            result.failed_step = result.error = ""
            for requirement in wanted:
                if not run("packages", f"{install} {pins} {shlex.quote(requirement)}"):
                    result.steps.pop()
                    result.warnings.append(f"optional package from environment.yml not installed: {requirement}")
                    result.failed_step = result.error = ""
            return True
        names = [p for p in spec.packages.split() if p.split("=")[0].lower() not in CONDA_ONLY]
        return not names or bool(run("packages", f"{install} {' '.join(shlex.quote(n) for n in names)}"))


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _rfc3339(date: str) -> str:
    """'2022-06-01' -> '2022-06-01T00:00:00Z' (what uv's --exclude-newer wants)."""
    return date if "T" in date else f"{date}T00:00:00Z"


@dataclass(frozen=True)
class Installation:
    """One environment being installed: the record it fills, its spec, the checkout, the directory it fills, the
    venv's interpreter and the environment its steps run with (steps may extend it: ``PIP_CONSTRAINT``)."""

    result: SpecEnv
    spec: EnvSpec
    src: Path
    env_dir: Path
    python: Path
    env: dict[str, str]


def finish_environment(site: Installation) -> SpecEnv:
    """After the install: detach the editable hooks, keep the built files (overlay), set the test environment
    and check the project imports from ``src`` with the spec's runner."""
    result, spec, src, env_dir, python, env = site.result, site.spec, site.src, site.env_dir, site.python, site.env
    detach_editable(site_packages(python), src)
    result.overlay = collect_overlay(src, env_dir / "overlay")
    roots = ["."] + [d for d in ("src", "lib") if any((src / d).glob("*/__init__.py"))]
    pythonpath = os.pathsep.join("{workspace}" if r == "." else "{workspace}/" + r for r in roots)
    result.test_env = {"PYTHONPATH": pythonpath, **spec.env}
    check_env = {**env, **{k: v.replace("{workspace}", str(src)) for k, v in result.test_env.items()}}
    module = import_name(spec)
    with_pytest = runner_of(spec.runner).needs_pytest
    probe = f"import sys, {module}" + (", pytest" if with_pytest else "")
    report = "print(sys.version.split()[0], pytest.__version__)" if with_pytest \
        else "print(sys.version.split()[0])"
    check = run_limited([str(python), "-c", f"{probe}; {report}"], src, timeout=300, env=check_env,
                        network=False)
    if check.returncode != 0:
        result.failed_step = "import"
        result.error = f"`{probe}` fails in the built environment:\n{last_lines(check.output, 15)}"
        return result
    result.ok, result.python = True, str(python)
    versions = check.output.strip().splitlines()[-1].split() if check.output.strip() else []
    result.python_version = versions[0] if versions else ""
    result.pytest_version = versions[1] if len(versions) > 1 else ""
    return result


def _pytest_version(env: SpecEnv) -> str:
    src = env.env_dir / "src"
    run_env = {**build_environ(), **{k: v.replace("{workspace}", str(src)) for k, v in env.test_env.items()}}
    out = run_limited([env.python, "-c", "import pytest; print(pytest.__version__)"], src, timeout=300,
                      env=run_env, network=False)
    lines = out.output.strip().splitlines()
    return lines[-1].strip() if out.returncode == 0 and lines else ""


def _uv_binary() -> str | None:
    try:
        from uv import find_uv_bin  # the PyPI package ships the binary

        return find_uv_bin()
    except (ImportError, FileNotFoundError):
        return shutil.which("uv")


def _vkey(version: str) -> tuple[int, int]:
    major, minor = version.split(".")[:2]
    return int(major), int(minor)


def apply_constraints(spec: EnvSpec, env_dir: Path, env: dict[str, str]) -> None:
    """The spec's own ``constraints`` for every pip and uv install of a build (``PIP_CONSTRAINT``,
    ``UV_CONSTRAINT``), written to ``env_dir/constraints.txt``."""
    path = env_dir / "constraints.txt"
    path.write_text("".join(c + "\n" for c in spec.constraints))
    env["PIP_CONSTRAINT"] = env["UV_CONSTRAINT"] = str(path)
