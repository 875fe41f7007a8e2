"""The Python interpreters a spec environment can be built on: those pyenv has installed (the newest patch release
of a version first), else ``pythonX.Y`` on PATH. Never downloads one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from coharden.environment.build import BuildError

PYENV_ROOT = Path(os.environ.get("PYENV_ROOT", "/root/.pyenv"))


def installed_pythons(root: Path = PYENV_ROOT) -> list[str]:
    versions = root / "versions"
    found = [p.name for p in versions.iterdir() if (p / "bin" / "python").exists()] if versions.is_dir() else []
    return sorted(found, key=lambda v: [int(x) if x.isdigit() else 0 for x in v.split(".")])


def find_interpreter(version: str, root: Path = PYENV_ROOT) -> str:
    """The newest installed ``version.*`` under pyenv, else ``pythonX.Y`` on PATH; never downloads one."""
    matches = [v for v in installed_pythons(root) if v.startswith(version + ".")]
    if matches:
        return str(root / "versions" / matches[-1] / "bin" / "python")
    on_path = shutil.which(f"python{version}")
    if on_path:
        return on_path
    have = ", ".join(installed_pythons(root)) or "none"
    raise BuildError(f"python {version} is not installed (looked in {root / 'versions'} and PATH; installed there: "
                     f"{have}); install it (e.g. pyenv install {version}) or pass --python")
