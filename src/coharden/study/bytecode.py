"""Checked-hash bytecode (PEP 552) in the study's long-lived checkouts, refreshed after every move."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from coharden.execution.pytest_runner import test_environment

# Test processes run with PYTHONDONTWRITEBYTECODE=1 (a rewritten file must never run from a stale .pyc), so
# every sympy test run compiled all of sympy again: about 3 of its 4 CPU seconds. A checkout instead gets
# *checked-hash* .pyc files (PEP 552) for the modules ``import <package>`` loads: the interpreter compares each
# one with the hash of its source on every import, so a file a fix or a mutant rewrote is compiled afresh and
# a stale .pyc cannot run. They live in the checkout's __pycache__ directories, which resets keep.
_WARM = r"""
import importlib.util, os, py_compile, sys
root = sys.argv[1]
sys.path.insert(0, root)
for name in sys.argv[2:]:
    try:
        __import__(name)
    except BaseException as exc:
        print("import of", name, "failed:", repr(exc)[:200], file=sys.stderr)
written = 0
for module in list(sys.modules.values()):
    path = getattr(module, "__file__", None) or ""
    if not path.endswith(".py") or not os.path.abspath(path).startswith(root + os.sep):
        continue
    cfile = importlib.util.cache_from_source(path)
    with open(path, "rb") as handle:
        digest = importlib.util.source_hash(handle.read())
    try:
        with open(cfile, "rb") as handle:
            head = handle.read(16)
        if int.from_bytes(head[4:8], "little") == 0b11 and head[8:16] == digest:
            continue
    except OSError:
        pass
    py_compile.compile(path, cfile=cfile, doraise=False, quiet=2,
                       invalidation_mode=py_compile.PycInvalidationMode.CHECKED_HASH)
    written += 1
print(written)
"""

KEEP = ["__pycache__"]  # git clean keeps the checked-hash bytecode


class Bytecode:
    """The ``on_move`` of a :class:`~coharden.execution.workspace.Checkout`: with ``packages`` (top-level
    packages) and an interpreter, each move refreshes the checked-hash bytecode of those packages."""

    def __init__(self, python: str | None = None, packages: Sequence[str] = ()) -> None:
        self.python = python
        self.packages = list(packages)
        self.warmed: list[int] = []  # modules compiled per move (0: all were current)

    def __call__(self, path: Path) -> None:
        if not self.python or not self.packages:
            return
        proc = subprocess.run([self.python, "-c", _WARM, str(path), *self.packages], cwd=path,
                              env=test_environment(()), capture_output=True, text=True, timeout=600, check=False)
        last = proc.stdout.strip().splitlines()[-1:] or ["-1"]
        self.warmed.append(int(last[0]) if last[0].isdigit() else -1)
