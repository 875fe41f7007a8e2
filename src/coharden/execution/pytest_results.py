"""What a pytest run leaves behind, read back: the cases of its JUnit XML file, the events the coharden_stream
plugin streamed, and the record of the run (:class:`PytestRun`) the verdict rules read
(:mod:`coharden.execution.pytest_verdicts`); which cases a node id names.

The files are read through :mod:`coharden.execution.readback` (a test could have swapped them for a link or a
fifo): :class:`~coharden.execution.readback.UnsafeFile` then.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from xml.parsers import expat

from coharden.execution.readback import UnsafeFile, iter_bytes, read_text
from coharden.execution.sandbox import NETWORK_FAILURE
from coharden.execution.testids import runnable_id
from coharden.schema.verdict import Raised, TestStatus

# a parameter id pytest generated (``unit0``, ``x3``): the stand-in pytest 3 uses for an empty id
_GENERATED_PARAM = re.compile(r"[A-Za-z_]\w*?(\d+)\]")
# A refused connection: a host answered, and in a sandbox with no network only loopback does (the test's own server
# not listening). A host off the machine fails otherwise: its name does not resolve, the network is unreachable, or
# the guard refuses the connection.
_REFUSED = re.compile(r"Connection refused", re.I)
_UNREACHED = re.compile(r"network access blocked|Name or service not known|Temporary failure in name resolution|"
                        r"Network is unreachable|nodename nor servname|getaddrinfo failed", re.I)
_COLOUR = re.compile(r"(?:\x1b|#x1B)\[[0-9;]*m")  # terminal colours (JUnit writes ESC as "#x1B")


@dataclass
class Case:
    classname: str
    name: str
    status: TestStatus
    message: str = ""
    details: str = ""  # the failure/error text (traceback) when there is one
    captured: str = ""  # the test's captured stdout / stderr (JUnit system-out / system-err)

    def network_hint(self) -> str:
        """For a failure whose own message does not say so: the first captured line showing the test reached for
        the network (sphinx's "Could not fetch remote image: ... Name or service not known"), else ''."""
        raised = "\n".join(line for line in self.details.splitlines() if line.startswith("E "))  # not the source
        if NETWORK_FAILURE.search(self.message) or NETWORK_FAILURE.search(raised):
            return ""
        for line in self.captured.splitlines():
            if found := NETWORK_FAILURE.search(line):
                line = _COLOUR.sub("", line).strip()
                found = NETWORK_FAILURE.search(line) or found
                if found.end() <= 200:
                    return line[:200]
                return f"{line[:120]} ... {line[max(120, found.start() - 40):found.end() + 20]}"
        return ""

    def reached_network(self) -> bool:
        """Whether this failure is a network failure: its exception (the traceback's ``E`` lines) or its message
        names one. Captured output only hints (a log line may mention an error the test then asserts on), and
        ``DID NOT RAISE <...ConnectionError>`` is a test that wanted one (requests' own tests). A connection
        refused with no sign of a host off the machine is not one either: the sandbox has loopback only, so the
        refusal came from a local server of the test's that was not listening."""
        lines = [line for line in (*self.message.splitlines()[:1],
                                   *(ln for ln in self.details.splitlines() if ln.startswith("E ")))
                 if "DID NOT RAISE" not in line]
        raised = "\n".join(lines)
        if _REFUSED.search(raised) and not _UNREACHED.search(raised):
            return False  # only loopback answers in the sandbox: a refused connection is a local server's doing
        return bool(NETWORK_FAILURE.search(raised))

    def summary(self) -> str:
        """One line saying why: the last ``E   `` line of the traceback, else the message, else the status."""
        errors = [line[1:].strip() for line in self.details.splitlines() if line.startswith("E ")]
        if errors and errors[-1]:
            return errors[-1]
        return self.message.splitlines()[0] if self.message else self.status.value


@dataclass
class PytestRun:
    returncode: int | None
    timed_out: bool
    duration: float
    output: str
    cases: list[Case] = field(default_factory=list)
    junit_ok: bool = False
    isolation: str = "none"
    stream: list[dict] | None = None  # per-test events from the coharden_stream plugin (None: not streamed)
    lost: str = ""  # why the run has no result of its own (the fork server died under it)
    tampering: str = ""  # what forged the run's result (an unsigned line on the fork server's protocol)
    replaced: list[str] = field(default_factory=list)  # files read back that a test swapped for a link or a fifo
    oversize: str = ""  # why a file read back was not read: over the grader's size limit (a huge report), else ''
    disk: str = ""  # why the run was killed for writing too much into its directories (max_disk_mb), else empty
    time_limit: float | None = None
    junit_present: bool = False
    first_failure: bool = False  # run with -x: ids after the first failure were not run
    cpu_limited: bool = False  # the TIMEOUT came from the CPU-time limit (SIGXCPU), not the wall clock
    cpu_time_limit: bool = False  # time_limit bounded CPU time (a scaled limit); the wall clock allowed more
    root: str = ""  # the checkout it ran in, as its tracebacks name it ('' in a container, whose paths differ)

    @property
    def session_finished(self) -> bool:
        return any("finish" in event for event in self.stream or [])

    def hung_test(self) -> str | None:
        """The test that was running when the process stopped (started, no teardown report), if any."""
        running: str | None = None
        for event in self.stream or []:
            if "start" in event:
                running = event["start"]
            elif event.get("when") == "teardown" and event.get("report") == running:
                running = None
        return running

    def streamed_outcomes(self) -> dict[str, bool]:
        """node id -> passed (every phase fine and the call passed or xfailed), from the stream."""
        seen: dict[str, bool] = {}
        for event in self.stream or []:
            if "report" not in event:
                continue
            node, when, outcome = event["report"], event.get("when"), event.get("outcome")
            if outcome == "failed":
                seen[node] = False
            elif when == "call":
                seen.setdefault(node, outcome == "passed" or bool(event.get("xfail")))
                if outcome == "skipped" and not event.get("xfail"):
                    seen[node] = False
        return seen

    def rewritten_reports(self) -> list[str]:
        """Call-phase reports that contradict what the call did, from the stream (see ``coharden_stream``'s
        "call" events, recorded where pytest's report objects are not involved): a pass after a call that raised
        or skipped, a skip after a call that raised or returned, an expected failure after a call that returned,
        or without an xfail mark and without ``pytest.xfail``, or a call report with no call at all. Each is a
        result the code under test rewrote (a patched ``TestReport``, ``CallInfo`` or report hook)."""
        notes: list[str] = []
        calls: dict[str, dict] = {}
        for event in self.stream or []:
            if isinstance(event.get("call"), str):
                calls[event["call"]] = event
                continue
            if event.get("when") != "call" or not isinstance(event.get("report"), str):
                continue
            node, outcome, xfail = event["report"], event.get("outcome"), bool(event.get("xfail"))
            call = calls.pop(node, None)
            if call is None:
                notes.append(f"{node}: pytest reported its call {outcome} although no call of it ran")
                continue
            raised, kind = str(call.get("raised") or ""), str(call.get("type") or "")
            marked = bool(call.get("xfail_mark"))
            did = f"raised {kind}" if raised else "returned"
            if outcome == "passed" and raised:
                notes.append(f"{node}: reported {'XPASS' if xfail else 'passed'} although its call {did}")
            elif outcome == "skipped" and xfail and (raised in ("", "skip", "exit")
                                                     or not (marked or raised == "xfail")):
                notes.append(f"{node}: reported an expected failure (XFAIL) although its call {did}"
                             + ("" if marked or raised == "xfail" else " and it has no xfail mark"))
            elif outcome == "skipped" and not xfail and raised != "skip":
                notes.append(f"{node}: reported skipped although its call {did}")
        return notes

    def checkout_plugins(self) -> list[str]:
        """Entry-point plugins the run loaded from package metadata inside the checkout (``root``), from the
        stream: a plugin the code under test brought (autoload is off; ``-p NAME`` resolves an entry point by
        name, and the checkout comes first on ``sys.path``)."""
        if not self.root:
            return []
        root = os.path.realpath(self.root)
        return [f"the pytest plugin {e['plugin']!r} was loaded from package metadata in the checkout ({e['from']})"
                for e in self.stream or [] if isinstance(e.get("plugin"), str) and isinstance(e.get("from"), str)
                and (e["from"] == root or e["from"].startswith(root.rstrip(os.sep) + os.sep))]

    def skip_origins(self) -> dict[str, set[str]]:
        """node id -> the files whose code skipped or xfailed its call (pytest.skip / pytest.xfail), from the
        stream: relative paths are the checkout's."""
        found: dict[str, set[str]] = {}
        for event in self.stream or []:
            if isinstance(event.get("call"), str) and isinstance(event.get("origin"), str) and event["origin"]:
                found.setdefault(event["call"], set()).add(event["origin"])
        return found

    def expected_failures(self) -> set[str]:
        """Node ids whose call pytest reported as an expected failure (XFAIL, or XPASS: an xfail-marked test
        that passed, which the JUnit file shows as a plain pass), from the stream."""
        return {event["report"] for event in self.stream or []
                if isinstance(event.get("report"), str) and event.get("when") == "call" and event.get("xfail")}

    def raised(self) -> list[Raised]:
        """The exceptions test phases raised, from the stream (the exception objects' own types)."""
        found = []
        for event in self.stream or []:
            if isinstance(event.get("raised"), str) and isinstance(event.get("type"), str):
                bases = [b for b in event.get("bases") or [] if isinstance(b, str)]
                # a test can write this file: nothing in it is larger than a real event's
                kind = cut(event["type"])
                found.append(Raised(case=cut(event["raised"]), when=cut(str(event.get("when", ""))), type=kind,
                                    bases=[cut(b) for b in bases[:100]] or [kind],
                                    message=cut(str(event.get("message", "")))))
        return found

    def collection_errors(self) -> list[Case]:
        # with --continue-on-collection-errors pytest reports a broken module as an <error> case whose
        # classname is empty and whose name is the module path (dotted)
        return [c for c in self.cases if c.status is TestStatus.ERROR and not c.classname]


def split_node_id(node_id: str) -> tuple[str, list[str], str]:
    """'a/b/test_x.py::C::test_m[p]' -> ('a/b/test_x.py', ['C'], 'test_m[p]')."""
    path, *rest = node_id.split("::")
    if not rest:
        return path, [], ""
    return path, rest[:-1], rest[-1]


def junit_classname(node_id: str) -> str:
    path, classes, _ = split_node_id(node_id)
    module = path[:-3] if path.endswith(".py") else path
    return ".".join([module.replace("/", "."), *classes])


def case_matches(node_id: str, case: Case) -> bool:
    _, _, name = split_node_id(node_id)
    if case.classname != junit_classname(node_id):
        return False
    return case.name == name or ("[" not in name and case.name.startswith(name + "["))


def matching_cases(node_id: str, cases: list[Case]) -> list[Case]:
    """The cases of ``node_id``: its own, or every parameter of a base test. An id pytest cannot select as it is
    (:func:`~coharden.execution.testids.runnable_id`: the harness's parser cut it at a space, or its parameter
    holds ``::``) runs as its base test, and its cases are the parameters whose id, cut at the first space as
    the harness reads it, is this id - all of the base test's when none is (a parameter path the harness
    shortened). An empty parameter (``test_x[]``) is, under pytest 3, the parameter named ``<argname><index>``."""
    base = runnable_id(node_id)
    if base == node_id:
        return [c for c in cases if case_matches(node_id, c)]
    of_base = [c for c in cases if case_matches(base, c)]
    name = split_node_id(base)[2] + node_id[len(base):]
    named = [c for c in of_base if (c.name.split() or [""])[0] == name]
    if not named and name.endswith("[]"):  # pytest 3 named the empty parameter <argname><its position>
        named = [c for n, c in enumerate(of_base)
                 if (found := _GENERATED_PARAM.fullmatch(c.name.partition("[")[2])) and int(found[1]) == n]
    return named or of_base


#: The largest JUnit file read (bytes). A test printing a huge failure message makes a file of twice its size
#: (pytest writes the message as an attribute and again in the traceback); a 96 MiB message is read, and a file
#: over this is a HARNESS_ERROR saying so (:class:`~coharden.execution.readback.OversizeFile`).
JUNIT_LIMIT = 320 << 20
#: Characters kept of a case's message, of its failure text and of its captured output: what a verdict shows and
#: stores stays small however much a test prints (the rest is cut, the cut marked in the text).
MESSAGE_CHARS = 4 << 10
TEXT_CHARS = 64 << 10


class _Bounded:
    """Text kept up to ``limit`` characters: its start and its end (a traceback's ``E`` lines are at its end),
    the cut between them marked with how much was left out."""

    def __init__(self, limit: int) -> None:
        self.half = limit // 2
        self.head: list[str] = []
        self.head_size = 0
        self.tail = ""
        self.total = 0

    def add(self, text: str) -> None:
        self.total += len(text)
        if self.head_size < self.half:
            taken = text[: self.half - self.head_size]
            self.head.append(taken)
            self.head_size += len(taken)
            text = text[len(taken):]
        if text:
            self.tail += text
            if len(self.tail) > 2 * self.half:
                self.tail = self.tail[-self.half:]

    def text(self) -> str:
        head = "".join(self.head)
        tail = self.tail[-self.half:] if self.half else ""
        cut = self.total - len(head) - len(tail)
        return f"{head}\n[... {cut:,} characters cut by coharden ...]\n{tail}" if cut > 0 else head + tail


def cut(text: str, limit: int = MESSAGE_CHARS) -> str:
    """``text`` bounded to about ``limit`` characters (its start and end, the cut marked)."""
    if len(text) <= limit:
        return text
    kept = _Bounded(limit)
    kept.add(text)
    return kept.text()


class _JUnitCases:
    """The cases of a JUnit file, from expat's events as the file is read: no tree is built, and no text longer
    than :data:`TEXT_CHARS` is kept (a test's 96 MiB message costs the grader one attribute's worth of memory)."""

    def __init__(self) -> None:
        self.cases: list[Case] = []
        self.depth = 0
        self.case_depth = 0  # the depth of the <testcase> being read (0: none)
        self.case: dict | None = None
        self.text: _Bounded | None = None  # the text of the testcase's child being read
        self.child = ""

    def start(self, tag: str, attrs: dict[str, str]) -> None:
        self.depth += 1
        if tag == "testcase" and self.case is None:
            self.case_depth = self.depth
            self.case = {"classname": attrs.get("classname", ""), "name": attrs.get("name", ""),
                         "status": TestStatus.PASSED, "message": "", "details": "", "captured": []}
        elif self.case is not None and self.depth == self.case_depth + 1:
            self.child = tag
            self.text = _Bounded(TEXT_CHARS)
            if tag in ("failure", "error"):
                self.case["status"] = TestStatus.FAILED if tag == "failure" else TestStatus.ERROR
                self.case["message"] = cut(attrs.get("message", ""))
            elif tag == "skipped":
                kind = attrs.get("type", "")
                self.case["status"] = TestStatus.XFAIL if kind == "pytest.xfail" else TestStatus.SKIPPED
                self.case["message"] = cut(attrs.get("message", ""))

    def data(self, text: str) -> None:
        if self.text is not None:
            self.text.add(text)

    def end(self, tag: str) -> None:
        if self.case is not None and self.depth == self.case_depth + 1 and self.text is not None:
            text = self.text.text()
            if self.child in ("failure", "error"):
                self.case["details"] = text
                self.case["message"] = self.case["message"] or cut(text)
            elif self.child in ("system-out", "system-err"):
                self.case["captured"].append(text)
            self.text, self.child = None, ""
        elif self.case is not None and self.depth == self.case_depth:
            case = self.case
            # a failing teardown adds a second <testcase> with the same name; keep the worst one
            self.cases.append(Case(case["classname"], case["name"], case["status"], case["message"].strip(),
                                   case["details"], "\n".join(case["captured"])))
            self.case, self.case_depth = None, 0
        self.depth -= 1


def parse_junit(path: Path, *, anchor: Path | None = None, limit: int = JUNIT_LIMIT) -> list[Case] | None:
    """The cases of a JUnit XML file (None when it is missing or malformed), each text in it bounded (see
    :class:`_JUnitCases`). Read through :func:`~coharden.execution.readback.iter_bytes` from ``anchor``:
    :class:`UnsafeFile` when a test replaced it with a link or a fifo, its subclass
    :class:`~coharden.execution.readback.OversizeFile` when it is over ``limit`` bytes."""
    reader = _JUnitCases()
    parser = expat.ParserCreate()
    parser.buffer_text = True
    parser.buffer_size = 1 << 20  # a huge text in few calls
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.data

    def no_entities(*_: object) -> None:  # pytest writes no DTD: entity declarations only amplify (laughs)
        raise ValueError("an entity declaration")

    parser.EntityDeclHandler = no_entities
    try:
        for chunk in iter_bytes(path, anchor=anchor, limit=limit):
            parser.Parse(chunk, False)
        parser.Parse(b"", True)
    except UnsafeFile:
        raise
    except (expat.ExpatError, ValueError, OSError):
        return None
    return reader.cases


def read_stream(path: Path, *, anchor: Path | None = None) -> list[dict]:
    """The events the coharden_stream plugin wrote (a torn last line, as at a kill, is dropped); read as
    :func:`parse_junit` reads (:class:`UnsafeFile` for a link or a fifo)."""
    events: list[dict] = []
    try:
        text = read_text(path, anchor=anchor)
    except UnsafeFile:
        raise
    except OSError:
        return events
    for line in text.splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events
