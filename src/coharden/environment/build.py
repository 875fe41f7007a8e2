"""Build the environment a plan describes: a virtual environment per repository, commit and plan, cached under
``<cache_dir>/envs/``, or a Docker image when an engine is running.

Local layout of one environment (``<cache_dir>/envs/<name>-<commit>-<plan digest>/``)::

    src/         checkout of the commit the project was installed from (editable installs point here)
    venv/        the virtual environment; its ``python`` runs the tests
    plan.json    the plan that was built
    build.json   the build result (a finished, successful build is reused as is)
    build.log    every install command with its output

Both backends plug into coharden's verdict machinery through :meth:`BuildResult.settings`: a venv sets
``Settings.python`` to the venv's interpreter; an image sets ``Settings.test_host = "docker"`` with
``docker_image`` naming it, and tests run there with the checkout under test mounted over ``/testbed`` (the
editable install in the image points at ``/testbed``, so the mounted checkout is the code that runs).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from coharden.config import Settings
from coharden.environment.dockerfile import PTH_NAME, render_dockerfile, workspace_pth
from coharden.environment.plan import EnvPlan
from coharden.environment.pyversions import admitted, vkey
from coharden.errors import CoHardenError
from coharden.execution.confinement import BUILD_STEPS
from coharden.execution.git import check_repo, git, resolve_commit
from coharden.execution.locks import file_lock
from coharden.execution.sandbox import run_limited
from coharden.execution.workspace import Workspace

Log = Callable[[str], None]


class BuildError(CoHardenError):
    """The environment cannot be built at all (no interpreter, no Docker engine, a broken repository)."""


class StepLog(BaseModel):
    """One build command and what it did."""

    command: str
    returncode: int | None
    duration: float
    timed_out: bool = False
    output_tail: str = ""


class BuildResult(BaseModel):
    """A built (or failed) environment."""

    ok: bool
    backend: Literal["venv", "docker"]
    key: str
    env_dir: Path
    python: str = Field(default="", description="Interpreter that runs tests in this environment ('python' on "
                        "the image's PATH for Docker).")
    python_version: str = ""
    base_python: str = ""
    image: str | None = None
    steps: list[StepLog] = Field(default_factory=list)
    error: str = ""
    cached: bool = False
    warnings: list[str] = Field(default_factory=list)

    def settings(self, base: Settings) -> Settings:
        """``base`` with this environment's interpreter. The fork server is off: a warm interpreter would keep
        the ``sys.path`` of the directory it started in, and the source-root ``.pth`` works per process."""
        if self.backend == "docker":
            return base.with_overrides(test_host="docker", docker_image=self.image, fork_server=False)
        return base.with_overrides(python=self.python, fork_server=False)


def last_lines(text: str, lines: int = 30) -> str:
    """The last ``lines`` lines of a step's output (a log's tail)."""
    return "\n".join(text.strip().splitlines()[-lines:])


def env_key(repo: str, commit: str, plan: EnvPlan) -> str:
    """Directory / image name of an environment: readable prefix + hash of repository, commit and plan."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(repo.rstrip("/")).name or "repo").strip("-").lower()[:40]
    digest = hashlib.sha256(f"{repo}\0{commit}\0{plan.digest()}".encode()).hexdigest()[:12]
    return f"{name}-{commit[:12]}-{digest}"


def _interpreter_version(python: str) -> str | None:
    """'3.11.7' when ``python`` runs and can create virtual environments, else None."""
    try:
        out = subprocess.run([python, "-c", "import sys, venv, ensurepip; print(sys.version.split()[0])"],
                             capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def find_base_python(plan: EnvPlan, override: str | None = None) -> tuple[str, str, list[str]]:
    """(interpreter, its version, warnings): the plan's version if installed here, else the closest installed
    version the plan's ``python_requires`` admits (``pythonX.Y`` on PATH, or the interpreter running coharden).
    """
    import sys

    if override:
        version = _interpreter_version(override)
        if version is None:
            raise BuildError(f"--base-python {override!r} does not run or cannot create virtual environments")
        return override, version, []
    wanted = vkey(plan.python)
    try:
        allowed = admitted(plan.python_requires)
    except ValueError:
        allowed = [plan.python]
    order = sorted(set(allowed) | {plan.python}, key=lambda v: (abs(vkey(v)[1] - wanted[1]), -vkey(v)[1]))
    running = ".".join(map(str, sys.version_info[:2]))
    for version in order:
        candidates = [shutil.which(f"python{version}")]
        if version == running:
            candidates.append(getattr(sys, "_base_executable", None) or sys.executable)
        for candidate in candidates:
            if not candidate:
                continue
            found = _interpreter_version(candidate)
            if found and found.startswith(version + "."):
                warnings = [] if version == plan.python else [
                    f"python {plan.python} is not installed here; built with {found}, which the plan's "
                    f"python_requires ({plan.python_requires or 'none'}) admits"]
                return candidate, found, warnings
    raise BuildError(f"no installed interpreter for python {plan.python} or another version admitted by "
                     f"{plan.python_requires!r}; install one, pass --base-python, or use --docker")


def _clone(repo: Path, commit: str, target: Path) -> None:
    git(["clone", "--quiet", "--no-checkout", str(repo), str(target)], target.parent)
    git(["checkout", "--quiet", "--detach", commit], target)


def build_environ() -> dict[str, str]:
    """The environment of a build step: coharden's own, without what would point the build elsewhere."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV",
                                                            "PYTHONSTARTUP", "PIP_REQUIRE_VIRTUALENV")}
    env.update({"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PYTHONNOUSERSITE": "1", "PIP_NO_INPUT": "1"})
    return env


class LocalBuilder:
    """Virtual environments under ``<cache_dir>/envs``; install commands run with the network allowed."""

    backend = "venv"

    def __init__(self, cache_dir: Path, *, step_timeout: float = 900.0, base_python: str | None = None,
                 log: Log | None = None) -> None:
        self.root = (cache_dir / "envs").resolve()
        self.step_timeout = step_timeout
        self.base_python = base_python
        self.log = log or (lambda _msg: None)

    def build(self, repo: Path, commit: str, plan: EnvPlan, *, force: bool = False) -> BuildResult:
        repo = check_repo(repo)
        commit = resolve_commit(repo, commit)
        key = env_key(plan.repo or str(repo), commit, plan)
        env_dir = self.root / key
        with file_lock(self.root / f"{key}.lock"):
            record = env_dir / "build.json"
            if record.is_file() and not force:
                previous = BuildResult.model_validate_json(record.read_text())
                if previous.ok and Path(previous.python).exists():
                    self.log(f"reusing environment {env_dir}")
                    return previous.model_copy(update={"cached": True})
            result = self._build(repo, commit, plan, key, env_dir)
            record.write_text(result.model_dump_json(indent=2))
            return result

    def _build(self, repo: Path, commit: str, plan: EnvPlan, key: str, env_dir: Path) -> BuildResult:
        shutil.rmtree(env_dir, ignore_errors=True)
        env_dir.mkdir(parents=True)
        (env_dir / "plan.json").write_text(plan.to_json())
        result = BuildResult(ok=False, backend="venv", key=key, env_dir=env_dir)
        try:
            base, version, warnings = find_base_python(plan, self.base_python)
        except BuildError as exc:
            result.error = str(exc)
            return result
        result.base_python, result.warnings = base, warnings
        source = env_dir / "src"
        _clone(repo, commit, source)
        venv = env_dir / "venv"
        python = venv / "bin" / "python"
        env = build_environ()
        env.update({"VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"})
        commands = [f"{_q(base)} -m venv {_q(str(venv))}", *plan.install]
        with open(env_dir / "build.log", "w") as log_file:
            for command in commands:
                self.log(f"$ {command}")
                proc = run_limited(["/bin/sh", "-c", command], source, timeout=self.step_timeout, env=env,
                                   network=True, confine=BUILD_STEPS)
                step = StepLog(command=command, returncode=proc.returncode, duration=round(proc.duration, 3),
                               timed_out=proc.timed_out, output_tail=last_lines(proc.output))
                result.steps.append(step)
                log_file.write(f"$ {command}\n{proc.output}\n[exit {proc.returncode}, {proc.duration:.1f}s]\n\n")
                log_file.flush()
                if proc.timed_out or proc.returncode != 0:
                    what = "timed out" if proc.timed_out else f"exited with {proc.returncode}"
                    result.error = f"build step `{command}` {what}:\n{last_lines(proc.output, 25)}"
                    return result
        if plan.source_roots:
            site = subprocess.run([str(python), "-c", "import site; print(site.getsitepackages()[0])"],
                                  capture_output=True, text=True, check=False, timeout=60)
            Path(site.stdout.strip(), PTH_NAME).write_text(workspace_pth(plan.source_roots))
        check = subprocess.run([str(python), "-c", "import sys, pytest; print(sys.version.split()[0])"],
                               capture_output=True, text=True, check=False, timeout=120, cwd=source)
        if check.returncode != 0:
            result.error = f"the environment has no working pytest: {last_lines(check.stderr, 10)}"
            return result
        result.ok, result.python, result.python_version = True, str(python), check.stdout.strip() or version
        return result


def _q(text: str) -> str:
    import shlex

    return shlex.quote(text)


# --- Docker ---------------------------------------------------------------------------------------------------
def docker_available(timeout: float = 20.0) -> tuple[bool, str]:
    """(True, "") when a Docker engine answers ``docker info``; else (False, why)."""
    docker = shutil.which("docker")
    if docker is None:
        return False, "the docker command is not installed"
    try:
        proc = subprocess.run([docker, "info", "--format", "{{.ServerVersion}}"], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, f"docker info failed: {exc}"
    if proc.returncode != 0:
        return False, last_lines(proc.stderr or proc.stdout, 3) or f"docker info exited with {proc.returncode}"
    return True, ""


class DockerBuilder:
    """Images ``coharden-env:<key>`` built from :func:`render_dockerfile` (tests then run on the Docker test host
    of :mod:`coharden.execution.docker`)."""

    backend = "docker"

    def __init__(self, cache_dir: Path, *, build_timeout: float = 3600.0, log: Log | None = None) -> None:
        self.root = (cache_dir / "envs").resolve()
        self.build_timeout = build_timeout
        self.log = log or (lambda _msg: None)

    def build(self, repo: Path, commit: str, plan: EnvPlan, *, force: bool = False) -> BuildResult:
        ok, why = docker_available()
        if not ok:
            raise BuildError(why)
        repo = check_repo(repo)
        commit = resolve_commit(repo, commit)
        key = env_key(plan.repo or str(repo), commit, plan)
        image = f"coharden-env:{key}"
        env_dir = self.root / f"docker-{key}"
        env_dir.mkdir(parents=True, exist_ok=True)
        dockerfile = render_dockerfile(plan)
        (env_dir / "Dockerfile").write_text(dockerfile)
        (env_dir / "plan.json").write_text(plan.to_json())
        result = BuildResult(ok=False, backend="docker", key=key, env_dir=env_dir, image=image)
        exists = subprocess.run(["docker", "image", "inspect", image], capture_output=True, check=False).returncode == 0
        if not exists or force:
            with Workspace(repo, commit) as ws:
                (ws.root / "Dockerfile.coharden").write_text(dockerfile)
                command = ["docker", "build", "-f", "Dockerfile.coharden", "-t", image, "."]
                started = time.monotonic()
                proc = run_limited(command, ws.root, timeout=self.build_timeout, network=True)
                result.steps.append(StepLog(command=" ".join(command), returncode=proc.returncode,
                                            duration=round(time.monotonic() - started, 3), timed_out=proc.timed_out,
                                            output_tail=last_lines(proc.output)))
                (env_dir / "build.log").write_text(proc.output)
                if proc.timed_out or proc.returncode != 0:
                    result.error = f"docker build failed:\n{last_lines(proc.output, 25)}"
                    return result
        else:
            result.cached = True
        check = subprocess.run(["docker", "run", "--rm", "--network", "none", image, "python", "-c",
                                "import sys, pytest; print(sys.version.split()[0])"],
                               capture_output=True, text=True, check=False, timeout=300)
        if check.returncode != 0:
            result.error = f"the image has no working pytest: {last_lines(check.stderr, 10)}"
            return result
        result.ok, result.python, result.python_version = True, "python", check.stdout.strip()
        (env_dir / "build.json").write_text(result.model_dump_json(indent=2))
        return result


def make_builder(settings: Settings, *, log: Log | None = None) -> LocalBuilder | DockerBuilder:
    """The builder the ``build`` section asks for: a Docker image, or a virtual environment."""
    return DockerBuilder(settings.cache_dir, log=log) if settings.build.docker else LocalBuilder(
        settings.cache_dir, base_python=settings.build.base_python, log=log)




