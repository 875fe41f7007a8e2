"""The pytest plugins a test run loads: exactly the test environment's own, never one the code under test brings.

pytest loads every ``pytest11`` entry point it finds on ``sys.path`` at start (plugin autoload). A test process
runs from the checkout (its root, and ``src/`` or ``lib/`` through the environment's workspace ``.pth``, is on
``sys.path``), so a ``*.dist-info`` or ``*.egg-info`` directory a fix or a test adds there would load a plugin of
its own before any test runs: a plugin that rewrites every report to "passed". Test processes therefore run with
``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1`` and load the environment's plugins by name (``-p``).

Which plugins are the environment's is read outside any checkout: the interpreter runs isolated (``-I``: no
``PYTHONPATH``, no user site, no script directory) in an empty directory, so ``sys.path`` holds the standard
library and the environment's site-packages (and what its ``.pth`` files add: a workspace ``.pth`` names
directories of the current directory, which is empty there). The probe only reads package metadata; as for
:func:`coharden.execution.bwrap.interpreter_dirs`, nothing of a test, fix or mutant runs in it. The answer is kept
per interpreter for the life of the process.

pytest versions (SWE-bench environments reach back to pytest 3.x):

* ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` exists since pytest 3.8. Older pytest always autoloads: no variable and no
  ``-p`` there (``-p`` beside autoload registers a plugin twice under two names, which pytest refuses); the
  static guard of fixes (:mod:`coharden.evaluation.fix_tampering`: a fix's package metadata is never applied) is
  what keeps a fix's entry points out there.
* ``-p NAME`` loads an entry point by its name since pytest 4.5 (the plugin is then registered under the same
  name as by autoload, so an ini file's ``-p no:NAME`` still blocks it); before 4.5 ``-p`` takes a module only,
  so the entry point's module is named (an entry point naming an attribute, ``module:object``, cannot be
  loaded that way and is left out there).

Docker runs (``test_host = docker``) keep the image's autoload: the container's interpreter cannot be probed from
here.
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
import tempfile
from dataclasses import dataclass

AUTOLOAD_OFF = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"

_PROBE = r"""
import json, sys
found = []
try:
    from importlib.metadata import distributions
    for dist in distributions():
        try:
            eps = dist.entry_points
        except Exception:
            continue
        for ep in eps:
            if ep.group == "pytest11":
                found.append([ep.name, ep.value])
except ImportError:  # Python < 3.8
    try:
        import pkg_resources
        for ep in pkg_resources.iter_entry_points("pytest11"):
            found.append([ep.name, ep.module_name + (":" + ".".join(ep.attrs) if ep.attrs else "")])
    except Exception:
        pass
print(json.dumps(found))
"""


@dataclass(frozen=True)
class EntryPoint:
    """A ``pytest11`` entry point of the environment: its name and its target (``module`` or
    ``module:attribute``)."""

    name: str
    value: str

    @property
    def module(self) -> str:
        return self.value.split(":", 1)[0].strip()

    @property
    def plain(self) -> bool:
        """The target is a module (``-p MODULE`` loads it as the entry point would)."""
        return ":" not in self.value


_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


@functools.cache
def environment_plugins(python: str) -> tuple[EntryPoint, ...]:
    """The ``pytest11`` entry points of ``python``'s environment, first of each name, in ``sys.path`` order
    (see the module docstring); none when the probe fails (the run then has no third-party plugin)."""
    with tempfile.TemporaryDirectory(prefix="coharden-plugins-") as empty:
        try:
            proc = subprocess.run([python, "-I", "-c", _PROBE], cwd=empty, capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)
            found = json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0 else []
        except (OSError, subprocess.SubprocessError, ValueError, IndexError):
            found = []
    plugins: dict[str, EntryPoint] = {}
    for item in found:
        if not (isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)):
            continue
        name, value = item[0].strip(), item[1].strip()
        if _NAME.match(name) and _NAME.match(value.replace(":", ".", 1)):
            plugins.setdefault(name, EntryPoint(name, value))
    return tuple(plugins.values())


def autoload_can_be_off(pytest_version: str) -> bool:
    """pytest knows ``PYTEST_DISABLE_PLUGIN_AUTOLOAD`` (3.8 or later; an unknown version is taken as new)."""
    return not _before(pytest_version, (3, 8))


def plugin_args(python: str, pytest_version: str) -> list[str]:
    """``-p`` arguments loading the environment's plugins with autoload off (empty where it cannot be off)."""
    if not autoload_can_be_off(pytest_version):
        return []
    by_name = not _before(pytest_version, (4, 5))
    args: list[str] = []
    for ep in environment_plugins(python):
        if by_name:
            args += ["-p", ep.name]
        elif ep.plain:
            args += ["-p", ep.module]
    return args


def plugin_env(pytest_version: str) -> dict[str, str]:
    """The variable turning autoload off, where the pytest version knows it."""
    return {AUTOLOAD_OFF: "1"} if autoload_can_be_off(pytest_version) else {}


def plugins_id(python: str, pytest_version: str) -> str:
    """What the plugin set adds to a verdict's environment id (the ``-p`` list; a change of it runs afresh)."""
    args = plugin_args(python, pytest_version)
    return " plugins=" + (",".join(args[1::2]) or "-") if autoload_can_be_off(pytest_version) else ""


def _before(version: str, wanted: tuple[int, int]) -> bool:
    """``version`` (a pytest version string; '' = unknown, taken as new) is older than ``wanted``."""
    parts = re.findall(r"\d+", version)[:2]
    return len(parts) == 2 and (int(parts[0]), int(parts[1])) < wanted
