"""A cached virtual environment with Python >= 3.12, the OpenHands SDK and this coharden (editable), for the
tests that run the OpenHands adapter for real. Found interpreters only (pyenv versions, then PATH); nothing is
downloaded but the packages, from the configured package index."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: What the environment holds besides coharden (the pins of the `openhands` extra in pyproject.toml).
REQUIREMENTS = ("openhands-sdk>=1.43", "openhands-tools>=1.43")


def find_python312() -> Path | None:
    """An interpreter >= 3.12: the newest 3.12 / 3.13 under ~/.pyenv/versions (or /root/.pyenv), else on PATH."""
    candidates: list[Path] = []
    for base in {Path.home() / ".pyenv" / "versions", Path("/root/.pyenv/versions")}:
        if base.is_dir():
            for version in sorted(base.iterdir(), reverse=True):
                if re.fullmatch(r"3\.(1[2-9])\.\d+", version.name):
                    candidates.append(version / "bin" / "python3")
    candidates += [Path(p) for name in ("python3.13", "python3.12") if (p := shutil.which(name))]
    for python in candidates:
        try:
            out = subprocess.run([str(python), "-c", "import sys; print(sys.version_info >= (3, 12))"],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == "True":
            return python
    return None


def _version(python: Path) -> str:
    return subprocess.run([str(python), "-c", "import platform; print(platform.python_version())"],
                          capture_output=True, text=True, check=True).stdout.strip()


def cache_root() -> Path:
    return Path(os.environ.get("COHARDEN_TEST_ENVS") or Path.home() / ".cache" / "coharden" / "test-envs")


def openhands_env(python: Path) -> Path:
    """The environment's interpreter; built once per (Python version, requirements, coharden's pyproject.toml,
    checkout path) and reused afterwards (coharden is installed editable, so source changes need no rebuild)."""
    key = hashlib.sha256("\n".join([_version(python), *REQUIREMENTS, str(ROOT),
                                    (ROOT / "pyproject.toml").read_text()]).encode()).hexdigest()[:12]
    env = cache_root() / f"openhands-py{_version(python)}-{key}"
    interpreter = env / "bin" / "python"
    if (env / ".complete").is_file():
        return interpreter
    shutil.rmtree(env, ignore_errors=True)
    env.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([str(python), "-m", "venv", str(env)], check=True)
    subprocess.run([*_installer(interpreter), *REQUIREMENTS, "-e", f"{ROOT}[llm]"], check=True, timeout=1800)
    (env / ".complete").write_text(" ".join(REQUIREMENTS) + "\n")
    return interpreter


def _installer(interpreter: Path) -> list[str]:
    """uv (a coharden dependency: parallel downloads, no bytecode compilation, several times faster than pip
    for the SDK's ~700 MB) where it is importable, else pip."""
    try:
        from uv import find_uv_bin
    except ImportError:
        return [str(interpreter), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    return [find_uv_bin(), "pip", "install", "--quiet", "--python", str(interpreter)]


if __name__ == "__main__":  # warm the cache: python tests/agent/openhands_env.py
    found = find_python312()
    if found is None:
        sys.exit("no Python >= 3.12 found")
    print(openhands_env(found))
