"""Static signs that a test patch could forge test results: read from the patch, before anything runs.

In-process code can always lie about its own result; what matters is that it is flagged. A test patch is
flagged when it adds or changes a ``conftest.py``, defines pytest hooks or registers plugins, reaches into
pytest's machinery (the plugin manager, ``gc`` walks for ``Config``), writes JUnit XML, or leaves the
interpreter with ``os._exit``. The runner adds what it sees while running (a JUnit file written although the
session never finished, JUnit results that contradict pytest's own reports): see
:func:`coharden.execution.pytest_verdicts.verdict_for`.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

from coharden.patches import file_path, parse

_SIGNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"^\s*def\s+(pytest_[a-z_]+)\s*\(", re.M), "defines the pytest hook {0}"),
    (re.compile(r"^\s*pytest_plugins\s*=", re.M), "registers pytest plugins (pytest_plugins)"),
    (re.compile(r"\bpluginmanager\b|\bPytestPluginManager\b|\bhookimpl\b"), "uses pytest's plugin manager"),
    (re.compile(r"\bgc\s*\.\s*get_(objects|referrers|referents)\b"), "walks the garbage collector (gc.{0})"),
    (re.compile(r"\bos\s*\.\s*_exit\b"), "calls os._exit"),
    (re.compile(r"junit(xml)?\b|junit\.xml|--junitxml", re.I), "refers to the JUnit XML report"),
    (re.compile(r"/proc/(?!self\b)|\bos\s*\.\s*getppid\b"), "reaches for other processes (/proc, its parent)"),
]


def _added_lines(patch: str) -> dict[str, str]:
    """path -> the text of the lines the patch adds (new files: the whole file)."""
    added: dict[str, list[str]] = {}
    try:
        files = parse(patch)
    except Exception:  # noqa: BLE001 - a patch that does not parse is reported where it is applied
        return {}
    for patched in files:
        path = file_path(patched)
        lines = added.setdefault(path, [])
        for hunk in patched:
            lines += [line.value for line in hunk if line.is_added]
    return {path: "".join(lines) for path, lines in added.items()}


def scan(patch: str) -> list[str]:
    """Tampering notes for a test patch, each naming what was found and where."""
    notes: list[str] = []
    for path, text in sorted(_added_lines(patch).items()):
        if PurePosixPath(path).name == "conftest.py":
            notes.append(f"{path}: adds or changes a conftest.py (runs before and around every test)")
        for pattern, what in _SIGNS:
            for match in pattern.finditer(text):
                line = text.count("\n", 0, match.start()) + 1
                notes.append(f"{path}: {what.format(*(g for g in match.groups() if g))} (added line {line})")
                break
    return notes
