"""The log parsers of the log-based runners: per-test statuses read from a run's output the way the SWE-bench
harness's log parsers read them (Django's verbosity-2 lines, sympy's ``bin/test`` lines, pytest's ``-rA`` short
summary). :mod:`coharden.execution.runners` names the parser of each runner."""

from __future__ import annotations

import re
from collections.abc import Iterator

from coharden.schema.verdict import TestStatus

DJANGO_ID = re.compile(r"^(?P<name>\w+) \((?P<where>[\w.]+)\)$")
"""A Django unittest description: ``test_x (module.Class)`` or ``test_x (module.Class.test_x)``."""
_SYMPY_HEADER = re.compile(r"^(?P<left>_*) (?P<path>\S+?\.py)::?(?P<name>\w+) _*$")
_SYMPY_RULE = re.compile(r"^_{20,}$")


def parse_django_log(log: str) -> dict[str, TestStatus]:
    """Statuses from Django's verbosity-2 runner output, with the SWE-bench harness's reading rules: ``X ...
    ok`` / ``skipped`` / ``FAIL`` / ``ERROR``, ``FAIL: X`` / ``ERROR: X`` headers, and an ``ok`` on a line of
    its own closing the last ``X ...`` line (a test that printed between the dots and its result)."""
    status: dict[str, TestStatus] = {}
    previous: str | None = None
    described: str | None = None  # 'test_x (module.Class)' alone on a line: its docstring line follows
    for raw in log.split("\n"):
        line = raw.strip()
        before = dict(status)
        if " ... " in line:
            previous = line.split(" ... ")[0]
        if line.endswith((" ... ok", " ... OK", " ...  OK")):
            status[line.rsplit(" ... ", 1)[0]] = TestStatus.PASSED
        elif " ... skipped" in line:
            status[line.split(" ... skipped")[0]] = TestStatus.SKIPPED
        elif line.endswith(" ... expected failure"):
            status[line.split(" ... ")[0]] = TestStatus.XFAIL
        elif line.endswith(" ... FAIL"):
            status[line.split(" ... FAIL")[0]] = TestStatus.FAILED
        elif line.endswith(" ... ERROR"):
            status[line.split(" ... ERROR")[0]] = TestStatus.ERROR
        if line.startswith(("FAIL:", "ERROR:")) and len(line.split()) > 1:
            kind, rest = line.split(":", 1)
            test = rest.strip()
            status[test] = TestStatus.FAILED if kind == "FAIL" else TestStatus.ERROR
            # 'FAIL: test_x (module.Class)' - the harness keys on the first word; keep both forms findable
            status.setdefault(test.split()[0], status[test])
        elif line.startswith("ok") and previous is not None and " ... " not in line:
            status[previous] = TestStatus.PASSED
        new = [k for k in status if before.get(k) is not status[k]]
        if described and new:  # the docstring line got a result: so did the test it describes
            status[described] = status[new[0]]
        if DJANGO_ID.match(line):
            described = line
        elif new or " ... " in line:
            described = None
    # Python 3.11+ prints 'test_x (module.Class.test_x)', older ones 'test_x (module.Class)': ids of either
    # form find the test
    for test_id, value in list(status.items()):
        other = other_form(test_id)
        if other is not None:
            status.setdefault(other, value)
    return status


def other_form(description: str) -> str | None:
    """A Django unittest description in the other Python's form: ``test_x (module.Class)`` (before Python 3.11)
    <-> ``test_x (module.Class.test_x)`` (3.11 and later); None for text that is no description."""
    match = DJANGO_ID.match(description)
    if not match:
        return None
    name, where = match["name"], match["where"]
    other = where[: -len(name) - 1] if where.endswith("." + name) else f"{where}.{name}"
    return f"{name} ({other})"


def sympy_headers(lines: list[str]) -> Iterator[tuple[int, re.Match[str]]]:
    """(line index, match: ``path``, ``name``) of the header of every failing test's section in bin/test's output:
    ``path:name`` (``path::name`` for a failure from sympy 1.12 on) centred in underscores after a line of them,
    or in none after it when wider than the terminal."""
    for at, line in enumerate(lines):
        match = _SYMPY_HEADER.match(line)
        if match is not None and (match["left"] or (at > 0 and _SYMPY_RULE.match(lines[at - 1]))):
            yield at, match


def parse_sympy_log(log: str) -> dict[str, TestStatus]:
    """Statuses from bin/test's per-test lines (``test_x ok`` / ``F`` / ``E`` / ...); a failing test that printed
    between its name and its result has no such line, and its failure section's header says it failed."""
    codes = {"ok": TestStatus.PASSED, "F": TestStatus.FAILED, "E": TestStatus.ERROR, "f": TestStatus.XFAIL,
             "s": TestStatus.SKIPPED, "X": TestStatus.PASSED, "w": TestStatus.SKIPPED}
    status: dict[str, TestStatus] = {}
    lines = log.split("\n")
    for _, match in sympy_headers(lines):
        status[match["name"]] = TestStatus.FAILED
    for raw in lines:
        words = raw.strip().split()
        if len(words) >= 3 and re.fullmatch(r"\[\w+\]", words[-1]):
            # the last test of a file carries the file's verdict ('test_x ok   [OK]'); the harness's parser,
            # which wants the line to end in ' ok', misses that test - here it counts
            words = words[:-1]
        if len(words) >= 2 and words[0].startswith("test_") and words[-1] in codes:
            status[words[0]] = codes[words[-1]]
    return status


def parse_pytest_log(log: str) -> dict[str, TestStatus]:
    """``PASSED id`` / ``FAILED id - message`` lines of ``pytest -rA`` (and ``id PASSED`` of ``-v``)."""
    names = {s.value for s in TestStatus if s is not TestStatus.MISSING}
    status: dict[str, TestStatus] = {}
    for raw in log.split("\n"):
        line = re.sub(r"\x1b\[[0-9;]*m", "", raw).strip()
        words = line.split()
        if len(words) < 2:
            continue
        if words[0] in names:
            status[words[1]] = TestStatus(words[0])
        elif words[1] in names and "::" in words[0]:
            status[words[0]] = TestStatus(words[1])
    return status
