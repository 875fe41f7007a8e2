"""The Docker test host (``test_host: docker``): run a test command inside an instance's environment image
(when an engine exists).

Images follow the SWE-bench harness's naming (``swebench/sweb.eval.<arch>.<instance id>:latest``, with
``__`` spelled ``_1776_``); their repository lives at ``/testbed`` with a conda environment ``testbed``. The
workspace is mounted over ``/testbed`` and a scratch directory at ``/coharden`` receives the JUnit file, so
verdicts are read exactly as for local runs. The container has no network, a memory cap, and dies with its
test command (``timeout -s KILL`` inside; the client is killed from outside as well).
"""

from __future__ import annotations

import functools
import platform
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from coharden.config import SandboxSettings

CONTAINER_ROOT = "/testbed"
CONTAINER_SCRATCH = "/coharden"


@functools.cache
def docker_available(executable: str = "docker") -> bool:
    """True when a Docker engine answers (the client alone is not enough)."""
    if shutil.which(executable) is None:
        return False
    try:
        return subprocess.run([executable, "info"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def swebench_image(instance_id: str, *, arch: str | None = None, namespace: str = "swebench",
                   tag: str = "latest") -> str:
    """The SWE-bench instance image name (``swebench.harness.test_spec`` naming)."""
    arch = arch or ("arm64" if platform.machine() in ("arm64", "aarch64") else "x86_64")
    key = f"sweb.eval.{arch}.{instance_id.lower()}".replace("__", "_1776_")
    return f"{namespace}/{key}:{tag}" if namespace else f"{key}:{tag}"


@dataclass(frozen=True)
class ContainerRun:
    """One test command run in a container: the ``image``, the host directories mounted in it (``workspace`` at
    :data:`CONTAINER_ROOT`, ``scratch`` at :data:`CONTAINER_SCRATCH`) and the command ``inner``, its paths already
    in container terms."""

    image: str
    workspace: Path
    scratch: Path
    inner: Sequence[str]


def docker_command(run: ContainerRun, sandbox: SandboxSettings, *, executable: str = "docker",
                   activate: str = "source /opt/miniconda3/bin/activate testbed 2>/dev/null || true") -> list[str]:
    """``docker run`` of ``run`` under the ``sandbox`` section's limits: its ``timeout`` (inside the container),
    ``memory_mb`` and ``network``."""
    workspace = run.workspace
    # the worktree's .git read-only, as in the bwrap sandbox: a test must not plant hooks, config or attributes
    # there that coharden's own git commands would obey at the next reset
    dotgit = ["-v", f"{workspace / '.git'}:{CONTAINER_ROOT}/.git:ro"] if (workspace / ".git").is_dir() else []
    cmd = [executable, "run", "--rm", "--init", "-v", f"{workspace}:{CONTAINER_ROOT}", *dotgit,
           "-v", f"{run.scratch}:{CONTAINER_SCRATCH}", "-w", CONTAINER_ROOT,
           "-e", "PYTHONDONTWRITEBYTECODE=1", "-e", "PYTHONHASHSEED=0"]
    if not sandbox.network:
        cmd += ["--network", "none"]
    if sandbox.memory_mb:
        cmd += ["--memory", f"{sandbox.memory_mb}m"]
    script = f"{activate}; exec timeout -s KILL {int(sandbox.timeout) + 1} {shlex.join(run.inner)}"
    return [*cmd, run.image, "bash", "-c", script]
