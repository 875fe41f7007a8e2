"""The harness's reading of a repository's requirement files for a spec environment: a pip requirements file
(includes inlined, editable and test-extra lines dropped, yanked packages replaced) or a conda
``environment.yml`` (conda-only names dropped, ``=`` pins made ``==``, its ``pip:`` section kept)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from coharden.environment.build import BuildError
from coharden.environment.specs import EnvSpec

# conda package names that are not pip distributions (or are the interpreter itself)
CONDA_ONLY = {"python", "pip", "setuptools_scm_git_archive", "pynio", "iris", "cdms2", "esmpy", "nomkl", "mkl",
               "libgfortran", "hdf5", "netcdf-fortran", "compilers", "cxx-compiler", "c-compiler", "make"}


def requirements_from_repo(src: Path, spec: EnvSpec, replacements: list[tuple[str, str | None]]) -> str:
    """The harness's reading of requirement files: the first of ``requirements_paths`` that exists, with ``-r``
    includes inlined and ``-e .`` / ``.[test`` / comment lines dropped; yanked packages replaced."""
    for rel in spec.requirements_paths:
        path = src / rel
        if path.is_file():
            break
    else:
        raise BuildError(f"no requirements file at {', '.join(spec.requirements_paths)} in {spec.repo}")
    lines: list[str] = []
    extra: list[str] = []

    def keep(line: str) -> bool:
        return not line.strip().startswith(("-e .", "#", ".[test"))

    for line in path.read_text().splitlines():
        if line.strip().startswith("-r"):
            included = path.parent / line.strip()[2:].strip()
            if included.is_file():
                extra += [x for x in included.read_text().splitlines() if keep(x)]
        elif keep(line):
            lines.append(line)
    text = "\n".join([*extra, *lines])
    for old, new in replacements:
        pattern = rf"^{re.escape(old)}([<>=!~]=?.*|$)\n?"
        text = re.sub(pattern, "" if new is None else new + "\n", text, flags=re.M)
    return text + "\n"


def requirements_from_env_yml(src: Path, spec: EnvSpec) -> list[str]:
    """Pip requirements for a conda ``environment.yml``: its dependencies (conda-only names dropped, ``=``
    pins turned into ``==``) and its ``pip:`` section."""
    for rel in spec.environment_yml_paths:
        if (src / rel).is_file():
            data: Any = yaml.safe_load((src / rel).read_text()) or {}
            break
    else:
        raise BuildError(f"no environment.yml at {', '.join(spec.environment_yml_paths)} in {spec.repo}")
    found: list[str] = []
    for dep in data.get("dependencies", []) or []:
        if isinstance(dep, dict):
            found += [str(d) for d in dep.get("pip", []) or []]
            continue
        name = re.split(r"[<>=!~ ]", str(dep).strip(), maxsplit=1)[0]
        if not name or name.lower() in CONDA_ONLY:
            continue
        rest = str(dep).strip()[len(name):].strip()
        if rest.startswith("=") and not rest.startswith("=="):
            rest = "==" + rest[1:].rstrip("*").rstrip(".")
        found.append(name + rest)
    return found
