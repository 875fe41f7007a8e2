"""Local services for tests that talk to a server (requests' tests call httpbin): started inside the test's own
sandbox, on its loopback network, for the duration of one test command; the no-network rule is unchanged.

A service runs from its own small virtual environment, built once under ``<cache_dir>/services/`` (so the
environment under test gets no extra packages), by :mod:`coharden.execution.service_main`, which wraps the
test command: ``SERVICE_PYTHON -I service_main.py httpbin=HTTPBIN_URL -- python -m pytest ...``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from coharden.errors import CoHardenError
from coharden.execution.locks import file_lock

MAIN = Path(__file__).with_name("service_main.py")


@dataclass(frozen=True)
class Service:
    name: str
    packages: tuple[str, ...]  # what its environment installs
    variable: str  # the environment variable the tests read the service's URL from


SERVICES = {"httpbin": Service("httpbin", ("httpbin==0.10.*", "werkzeug"), "HTTPBIN_URL")}


class ServiceError(CoHardenError):
    """An unknown service, or one whose environment cannot be built."""


def known(names: list[str]) -> list[Service]:
    unknown = [n for n in names if n not in SERVICES]
    if unknown:
        raise ServiceError(f"unknown service {', '.join(unknown)} (known: {', '.join(SERVICES)})")
    return [SERVICES[n] for n in names]


def service_python(cache_dir: Path, names: list[str], *, timeout: float = 900.0) -> Path:
    """The interpreter of the venv holding ``names``' packages (built once, with this interpreter's version)."""
    packages = sorted({p for s in known(names) for p in s.packages})
    digest = hashlib.sha256(json.dumps([sys.version_info[:2], packages]).encode()).hexdigest()[:12]
    root = Path(cache_dir).resolve() / "services" / f"{'-'.join(sorted(names))}-{digest}"
    python = root / "venv" / "bin" / "python"
    record = root / "build.json"
    if record.is_file() and python.exists():
        return python

    root.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(root.parent / f"{root.name}.lock"):
        if record.is_file() and python.exists():
            return python
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        base = getattr(sys, "_base_executable", sys.executable)
        steps = [[base, "-m", "venv", str(root / "venv")]]
        uv = shutil.which("uv", path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
        steps.append([uv, "pip", "install", "--python", str(python), *packages] if uv
                     else [str(python), "-m", "pip", "install", "-q", *packages])
        for step in steps:
            try:
                proc = subprocess.run(step, capture_output=True, text=True, timeout=timeout)
            except (OSError, subprocess.TimeoutExpired) as exc:
                raise ServiceError(f"service {', '.join(names)}: `{shlex.join(step)[:200]}` failed: {exc}") from None
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
                raise ServiceError(f"service {', '.join(names)}: cannot build its environment "
                                   f"(`{shlex.join(step)[:200]}` exited with {proc.returncode}):\n{tail}")
        record.write_text(json.dumps({"packages": packages}))
    return python


def wrap(cmd: list[str], names: list[str], cache_dir: Path) -> tuple[list[str], tuple[Path, ...]]:
    """``cmd`` run beside ``names``' services, and the directories the sandbox must show read-only."""
    if not names:
        return cmd, ()
    python = service_python(cache_dir, names)
    pairs = [f"{s.name}={s.variable}" for s in known(names)]
    return [str(python), "-I", str(MAIN), *pairs, "--", *cmd], (python.parent.parent, MAIN.parent)
