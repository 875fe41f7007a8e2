"""Where a test process's last traceback was raised: in the code under test, or in the runner or environment.

A process that ends with no per-test result (sympy's ``bin/test`` on a mutant that breaks ``import sympy``,
pytest's INTERNALERROR when a mutant breaks a plugin the repository's ``conftest.py`` loads) says something about
the code when the exception came from it: the tests did not run (a COLLECTION_ERROR, as an uncollectable test
module is), which a rerun would not change. Otherwise it is the harness's own failure.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

_TRACEBACK = "Traceback (most recent call last):"
_DURING = "During handling of the above exception, another exception occurred:"
_FRAME = re.compile(r'^\s*File "(?P<path>/[^"]+)", line \d+', re.M)  # absolute files only: no <frozen os>
_ERROR_LINE = re.compile(r"^(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit))(?:: .*)?$", re.M)
# what the machine or the environment raises, never a change of the code under test
_ENVIRONMENT_ERRORS = {"MemoryError", "OSError", "PermissionError", "FileNotFoundError", "FileExistsError",
                       "IsADirectoryError", "NotADirectoryError", "BlockingIOError", "ModuleNotFoundError"}


def raised_in(output: str, root: Path, runner_files: tuple[str, ...] = ()) -> str | None:
    """The error line of the output's last traceback when its innermost file frame is a file of the checkout
    ``root`` other than the runner's own (``runner_files``, relative to the root): the code under test raised
    (``import sympy`` in bin/test, on a mutant that breaks the package's import). None otherwise: the runner's or
    the environment's own failure (a missing module, the disk, the memory, a path the sandbox does not grant).

    A last traceback raised in a runner's file *while handling* an earlier one (Python's "During handling of the
    above exception" chain) is the runner failing to report that earlier exception: the earlier one decides
    (sympy-12481's wrong fix breaks a test module's import, and bin/test's reporter then crashes on it)."""
    end = len(output)
    while (at := output.rfind(_TRACEBACK, 0, end)) >= 0:
        tail = output[at:end]
        frames = _FRAME.findall(tail)
        errors = list(_ERROR_LINE.finditer(tail))
        if not frames or not errors or errors[-1]["type"].rsplit(".", 1)[-1] in _ENVIRONMENT_ERRORS:
            return None
        innermost = Path(os.path.normpath(frames[-1]))
        inside = next((innermost.relative_to(base).as_posix() for base in {root, root.resolve()}
                       if innermost.is_relative_to(base)), None)
        if inside is None:
            return None
        if inside not in runner_files:
            return errors[-1][0][:200]
        if not output[:at].rstrip().endswith(_DURING):
            return None
        end = output[:at].rstrip().rfind(_DURING)
    return None


_SHORT_FRAME = re.compile(r"^(?P<path>[^\s:][^:\n]*\.py):\d+: in ", re.M)  # pytest's short style: "pkg/m.py:1: in f"
_SHORT_ERROR = re.compile(r"^E\s+(?P<line>(?P<type>[A-Za-z_][\w.]*(?:Error|Exception|Exit))(?:: .*)?)$", re.M)


def raised_in_short(output: str, root: Path) -> str | None:
    """:func:`raised_in` for pytest's short traceback style (``pkg/plugin.py:1: in <module>`` frames, relative to
    the root, then ``E   NameError: ...``), which pytest 8 and later print when a plugin fails to load."""
    frames = list(_SHORT_FRAME.finditer(output))
    if not frames:
        return None
    errors = list(_SHORT_ERROR.finditer(output, frames[-1].end()))
    if not errors or errors[0]["type"].rsplit(".", 1)[-1] in _ENVIRONMENT_ERRORS:
        return None
    path = Path(frames[-1]["path"])
    innermost = Path(os.path.normpath(path if path.is_absolute() else root / path))
    if any(innermost.is_relative_to(base) for base in {root, root.resolve()}) and ".." not in path.parts:
        return errors[0]["line"][:200]
    return None
