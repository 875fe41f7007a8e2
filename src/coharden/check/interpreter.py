"""What a check needs to know of the test interpreter, asked once by one probe: a digest of it and of everything
installed in it (part of the stored report's key and of every verdict's), and where it imports the checked
repository from.

The probe runs the interpreter isolated (``-I``: no ``PYTHONPATH``, no user site, no script directory) in an
empty directory, as :mod:`coharden.execution.env_plugins` does, so neither the user's checkout nor the current
directory is on its path; it reads only files (``sys.path`` listings, ``.pth`` files, distribution metadata, the
editable finders' mapping): nothing of the project, a test or a mutant runs in it.

* **The digest**: the interpreter's version, prefix and ``sys.path``; in every directory of that path the ``.pth``
  and ``.egg-link`` files and each installed distribution's metadata (``RECORD`` holds the hash of every file pip
  installed, so an upgrade, a downgrade or a reinstall from another wheel changes it; ``METADATA``/``PKG-INFO``
  and ``direct_url.json`` name the version and the source). What it cannot see: the files of a dependency
  installed in editable mode from another local checkout (their source lies outside the environment).
* **The project's import roots**: a project installed in editable mode (``pip install -e .``, the usual way to
  work on one) is imported from the user's checkout: a ``.pth`` line puts its ``src/`` on ``sys.path``, or a
  setuptools finder maps the package to its directory there. A check's tests must import the code of the
  throwaway clone they run in (the parent, the fix, each mutant), never the checkout, so :func:`import_roots`
  names those directories relative to the repository, and the check puts the clone's own first on the test
  processes' ``PYTHONPATH``. The same holds for a project installed as a copy (``pip install .``): the
  directories that hold the fix's top-level packages are put first too."""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from coharden.errors import CoHardenError

_PROBE = r"""
import ast, hashlib, json, os, sys
h = hashlib.sha256()
def add(*parts):
    h.update(json.dumps(parts).encode() + b"\n")
def read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError:
        return b""
def content(path):
    return hashlib.sha256(read(path)).hexdigest()
mapped = []
add(sys.version, sys.executable, sys.prefix, sys.base_prefix, sys.path)
for entry in sys.path:
    try:
        names = sorted(os.listdir(entry))
    except OSError:
        continue
    for name in names:
        path = os.path.join(entry, name)
        if name.endswith((".pth", ".egg-link")):
            add(entry, name, content(path))
        elif name.endswith((".dist-info", ".egg-info")):
            if os.path.isdir(path):
                add(entry, name, [(meta, content(os.path.join(path, meta)))
                                  for meta in ("RECORD", "METADATA", "PKG-INFO", "direct_url.json", "SOURCES.txt")
                                  if os.path.exists(os.path.join(path, meta))])
            else:
                add(entry, name, content(path))
        if name.startswith("__editable__") and name.endswith("_finder.py"):
            add(entry, name, content(path))
            for line in read(path).decode("utf-8", "replace").splitlines():
                if line.startswith("MAPPING"):
                    try:
                        value = ast.literal_eval(line.split("=", 1)[1].strip())
                    except (ValueError, SyntaxError, IndexError):
                        continue
                    if isinstance(value, dict):
                        mapped.extend(v for v in value.values() if isinstance(v, str))
print(json.dumps({"digest": h.hexdigest(), "path": [p for p in sys.path if isinstance(p, str)], "mapped": mapped,
                  "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix]}))
"""


@dataclass(frozen=True)
class Interpreter:
    """What the probe found of one test interpreter."""

    python: str
    digest: str
    """sha256 of the interpreter and its installed distributions (see the module docstring)."""
    path: tuple[str, ...]
    """Its ``sys.path`` (isolated: what ``.pth`` files add included)."""
    mapped: tuple[str, ...]
    """Where its editable finders map packages to (a package directory or a module file each)."""
    prefixes: tuple[str, ...] = ()
    """Its installation and virtual environment (a ``.venv`` inside the repository is no import root)."""


def probe(python: str) -> Interpreter:
    """Ask ``python`` (see the module docstring); asked afresh on every call, so a long-lived process sees a
    package installed since. A :class:`CoHardenError` when it does not run or answer."""
    with tempfile.TemporaryDirectory(prefix="coharden-interpreter-") as empty:
        try:
            proc = subprocess.run([python, "-I", "-c", _PROBE], cwd=empty, capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CoHardenError(f"test interpreter {python!r} cannot run: {exc}") from exc
    try:
        data = json.loads(proc.stdout.strip().splitlines()[-1])
        return Interpreter(python=python, digest=str(data["digest"]), path=tuple(map(str, data["path"])),
                           mapped=tuple(map(str, data["mapped"])), prefixes=tuple(map(str, data["prefixes"])))
    except (ValueError, IndexError, KeyError, TypeError):
        said = (proc.stderr.strip().splitlines() or ["nothing"])[-1][:100]
        raise CoHardenError(f"test interpreter {python!r} is not a Python interpreter coharden can ask for its "
                            f"packages (exit status {proc.returncode}: {said})") from None


def import_roots(repo: Path, interpreter: Interpreter, fix_files: Iterable[str], tracked: Iterable[str]) -> list[str]:
    """The directories (relative to ``repo``, POSIX; ``.`` for its root) the checked code must be imported from:
    those of the interpreter's ``sys.path`` that lie in the repository (but in the interpreter's own
    environment, a ``.venv`` there), the parents of the packages its editable
    finders map into it, and, for each Python file the fix changes, the directory holding its top-level package
    (the topmost one up whose every directory has an ``__init__.py`` among ``tracked``, the commit's files).
    In the order found, each once."""
    root = repo.resolve()
    found: list[str] = []

    def inside(path: str) -> str | None:
        try:
            rel = Path(path).resolve().relative_to(root)
        except (ValueError, OSError):
            return None
        return rel.as_posix() if rel.parts else "."

    prefixes = [Path(p).resolve() for p in interpreter.prefixes if p]
    for entry in interpreter.path:
        if not entry or any(Path(entry).resolve().is_relative_to(p) for p in prefixes):
            continue
        if (rel := inside(entry)) is not None:
            found.append(rel)
    for target in interpreter.mapped:
        if (rel := inside(target)) is not None:
            found.append(PurePosixPath(rel).parent.as_posix() if rel != "." else ".")
    files = set(tracked)
    for path in fix_files:
        if not path.endswith(".py"):
            continue
        folder = PurePosixPath(path).parent
        while folder.parts and f"{folder.as_posix()}/__init__.py" in files:
            folder = folder.parent
        found.append(folder.as_posix() if folder.parts else ".")
    return [rel for rel in dict.fromkeys(found) if not rel.startswith(".git")]
