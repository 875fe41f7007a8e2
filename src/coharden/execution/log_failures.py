"""The failure sections of a log-based runner's output, read into the exceptions each failing test raised
(:class:`~coharden.schema.verdict.Raised`, what a pytest run reads from its result stream), so that a wrong fix
failing a test one way and another failing it another way are two behaviours (:mod:`coharden.mpe.behaviours`).

sympy's ``bin/test`` prints, after its per-test lines, one section per failing test: a line of underscores, then
``path:name`` centred in underscores (``path::name`` for a failure from sympy 1.12 on; between two spaces only
when longer than the terminal), then the traceback (sympy 1.0 and 1.1 print its frames without the
``Traceback`` line). unittest, whose runner Django's ``runtests.py`` uses, prints ``FAIL: description`` or
``ERROR: description`` between a line of ``=`` and one of ``-`` (the test's docstring line between them when it
has one; a subTest's description ends in its parameters), then the traceback.

Of a traceback the last exception counts (a chain's "During handling of the above exception" leads to it): its
type, its message, and *where* the test's own file was when it raised, the last frame in that file (its path
from the module's root, the line and its source). sympy's tests are bare asserts, whose AssertionError has no
message: the place is what tells one failing assert from another. Only the test's own file is looked at: its
lines are the same on every mutant, while a frame in the code under test moves when a mutant adds a line, and
the checkout's own path differs between runs. Text that is not such a section (output cut short, a section with
no exception line, a file that failed to import) gives nothing, never an error.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coharden.execution.log_parsers import DJANGO_ID, other_form, sympy_headers
from coharden.execution.pytest_results import cut
from coharden.schema.verdict import Raised

_CHAIN = re.compile(r"^(?:During handling of the above exception, another exception occurred:"
                    r"|The above exception was the direct cause of the following exception:)$", re.M)
_FRAME = re.compile(r'^\s+File "(?P<path>[^"\n]+)", line (?P<line>\d+)')
_EXCEPTION = re.compile(r"^(?P<type>[A-Za-z_][\w.]*)(?::(?: (?P<message>.*))?)?$")
_MARKS = re.compile(r"^\s*[~^]+\s*$")  # Python 3.11's position marks under a frame's source line
_SYMPY_END = re.compile(r"^(?:_+|={2,}(?: .*)?)$")  # the next section's rule, the summary line (or their start)
_UNITTEST_RULE = re.compile(r"^={20,}$")
_UNITTEST_BODY_RULE = re.compile(r"^-{20,}$")
_UNITTEST_HEADER = re.compile(r"^(?:FAIL|ERROR): (?P<description>.+)$")
_UNITTEST_TEST = re.compile(r"^\w+ \([\w.]+\)")  # a description before a subTest's parameters
_HEADER_LINES = 4
"""The most lines between unittest's header and its ``-`` line (the docstring's first line): past them, the
section is taken to have none."""
TYPE_CHARS = 200
WHERE_CHARS = 500


@dataclass(frozen=True)
class _Frame:
    path: str
    line: int
    source: str


def _last_exception(text: str) -> tuple[list[_Frame], list[str]]:
    """The frames of the last traceback in ``text`` and the lines of its exception (type and message), which
    follow a frame (none: no exception, as in text cut short before one)."""
    chained = list(_CHAIN.finditer(text))
    lines = text[chained[-1].end():].splitlines() if chained else text.splitlines()
    frames: list[_Frame] = []
    at = 0
    while at < len(lines):
        line = lines[at]
        match = _FRAME.match(line)
        if match is not None:
            at += 1
            source = ""
            while at < len(lines) and lines[at][:1].isspace() and not _FRAME.match(lines[at]):
                if not source and not _MARKS.match(lines[at]):
                    source = " ".join(lines[at].split())
                at += 1
            frames.append(_Frame(match["path"], int(match["line"]), source))
            continue
        if frames and line.strip() and not line[:1].isspace():
            return frames, [x.rstrip() for x in lines[at:]]
        at += 1
    return frames, []


def _in_module(path: str, dotted: str) -> str | None:
    """``path`` from the root of the module that ``dotted`` (``module.Class.test``) starts with: for
    ``sympy.core.tests.test_x.test_y``, ``/tmp/ws/sympy/core/tests/test_x.py`` is ``sympy/core/tests/test_x.py``;
    None for a file of another module."""
    parts = path.replace("\\", "/").split("/")
    if not parts[-1].endswith(".py"):
        return None
    names = [*parts[:-1], parts[-1][:-3]]
    for start in range(len(names)):
        module = ".".join(names[start:])
        if module and (dotted == module or dotted.startswith(module + ".")):
            return "/".join(parts[start:])
    return None


def _raised_of(case: str, body: str, dotted: str) -> Raised | None:
    """The exception a failure section's ``body`` shows for ``case``, where the module of ``dotted`` (the test as
    ``module.name`` or ``module.Class.name``) was when it raised; None where it shows no exception line."""
    frames, exception = _last_exception(body)
    while exception and not exception[-1].strip():
        exception.pop()
    first = _EXCEPTION.match(exception[0]) if exception else None
    if first is None:
        return None
    message = "\n".join([first["message"] or "", *exception[1:]]).strip()
    where = ""
    for frame in reversed(frames):
        shown = _in_module(frame.path, dotted)
        if shown is not None:
            where = cut(f"{shown}:{frame.line}" + (f": {frame.source}" if frame.source else ""), WHERE_CHARS)
            break
    kind = cut(first["type"], TYPE_CHARS)
    return Raised(case=cut(case), type=kind, bases=[kind], message=cut(message), where=where)


def in_checkout(output: str, root: Path) -> str:
    """``output`` with the checkout's own path (``root``, as given and resolved) cut from the paths it prints: a
    message naming a file of the checkout reads the same in every workspace, and so does the behaviour."""
    for prefix in dict.fromkeys((str(root), str(root.resolve()))):
        output = output.replace(prefix.rstrip("/") + "/", "")
    return output


def script_failure(script: str, output: str) -> Raised | None:
    """The exception a reproduction script (``python SCRIPT``, a path from the repository's root) died of, from the
    last traceback of its ``output``, with where the script itself was then; None where it printed none (it
    exited with a status of its own, or was killed)."""
    return _raised_of(script, output, script[:-3].replace("/", ".") if script.endswith(".py") else script)


def _sympy_sections(lines: list[str]) -> Iterator[tuple[str, str, list[str]]]:
    """(path, name, body lines) of every failure section of a test function in bin/test's output (a file's
    section, whose import failed, names no test and has no header here)."""
    for at, header in sympy_headers(lines):
        end = at + 1
        while end < len(lines) and not _SYMPY_END.match(lines[end]):
            end += 1
        yield header["path"], header["name"], lines[at + 1:end]


def sympy_failures(log: str) -> dict[str, list[Raised]]:
    """The exceptions of the failing tests in sympy's ``bin/test`` output, by bare test name (the runner's ids;
    two files' tests of one name share it, as their statuses do); each case is ``path::name``."""
    found: dict[str, list[Raised]] = {}
    for path, name, body in _sympy_sections(log.splitlines()):
        dotted = path[:-3].replace("/", ".") + "." + name
        raised = _raised_of(f"{path}::{name}", "\n".join(body), dotted)
        if raised is not None:
            found.setdefault(name, []).append(raised)
    return found


def _unittest_sections(lines: list[str]) -> Iterator[tuple[str, str, list[str]]]:
    """(description, docstring line or "", body lines) of every ``FAIL:`` / ``ERROR:`` section."""
    at = 0
    while at < len(lines) - 1:
        header = _UNITTEST_HEADER.match(lines[at + 1]) if _UNITTEST_RULE.match(lines[at]) else None
        if header is None:
            at += 1
            continue
        start = at + 2
        rule = next((i for i in range(start, min(start + _HEADER_LINES, len(lines)))
                     if _UNITTEST_BODY_RULE.match(lines[i])), None)
        doc = next((line.strip() for line in lines[start:rule] if line.strip()), "") if rule is not None else ""
        start = rule + 1 if rule is not None else start
        end = start
        while end < len(lines) and not _UNITTEST_RULE.match(lines[end]) and not _UNITTEST_BODY_RULE.match(lines[end]):
            end += 1
        yield header["description"].strip(), doc, lines[start:end]
        at = end


def django_failures(log: str) -> dict[str, list[Raised]]:
    """The exceptions of the failing tests in the output of Django's ``runtests.py`` (unittest's ``FAIL:`` and
    ``ERROR:`` sections), under every id the status parser gives the test (:func:`parse_django_log`): its
    description in both Pythons' forms, its bare name, its docstring line; a subTest's under its test's too.
    Each case is the description as printed."""
    found: dict[str, list[Raised]] = {}
    for description, doc, body in _unittest_sections(log.splitlines()):
        test = _UNITTEST_TEST.match(description)
        base = test[0] if test else description
        match = DJANGO_ID.match(base)
        raised = _raised_of(description, "\n".join(body), match["where"] if match else "")
        if raised is None:
            continue
        keys = [description, base, other_form(base), base.split()[0] if base.split() else None, doc or None]
        for key in dict.fromkeys(k for k in keys if k):
            found.setdefault(key, []).append(raised)
    return found
