"""Run the tests with the input recorder plugin and read what it saw.

The plugin (:mod:`coharden.mutation.recorder_plugin`) runs inside the test interpreter. It records, for the
functions the fix touches, argument -> outcome of their outermost calls, and for each such call up to two
calling frames inside the repository (their own argument -> outcome), so operators can imitate fixes made at
the caller. This module runs it and turns its JSON lines into records with repository-relative paths; what
the records of the fixed and the buggy code reveal is :mod:`coharden.mutation.revealing`'s.
"""

from __future__ import annotations

import functools
import hashlib
import json
import keyword
import logging
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from coharden.execution.executor import InstanceExecutor
from coharden.execution.pytest_runner import PLUGIN_PATH
from coharden.execution.readback import read_text
from coharden.execution.runners import runner_of
from coharden.mutation.encoding_check import check_encoding
from coharden.patches import touched_files
from coharden.pysource import parsing
from coharden.schema.testpatch import TestPatch

Mapper = Callable[[Sequence[Callable[[InstanceExecutor], Any]]], list[Any]]
"""Runs tasks (functions of an executor) and returns their results in order, e.g. on several workers."""

RECORDER = Path(__file__).with_name("recorder_plugin.py")
VALUES = Path(__file__).with_name("recorder_values.py")  # its value encoding, copied beside it
DECODE = Path(__file__).with_name("recorder_decode.py")  # the encoding's decoder, copied beside it too
SAME = Path(__file__).with_name("recorder_same.py")  # and the comparison of decoded values
START = Path(__file__).with_name("recorder_start.py")  # starts it without pytest (copied as sitecustomize.py)
log = logging.getLogger(__name__)

RECORDS_LIMIT = 256 << 20  # bytes of recorder output read back; a larger file is not read


def _serial(executor: InstanceExecutor) -> Mapper:
    return lambda tasks: [task(executor) for task in tasks]


@dataclass(frozen=True)
class Recording:
    """What one recording is of, and what a stored one is keyed on: each of ``tests`` run on base +
    ``source_patch`` with the recorder watching ``targets`` and, for ``probes`` (records from another run),
    trying their inputs on this code."""

    source_patch: str
    tests: Sequence[TestPatch]
    targets: list[dict[str, str]]
    probes: list[dict[str, Any]] | None = None


Recorder = Callable[[InstanceExecutor, Recording], list[dict[str, Any]]]
"""What makes a recording: :func:`record_calls`, or one that serves recordings started before they were asked
for (``mpe.early``)."""


def record_calls(executor: InstanceExecutor, recording: Recording, *, mapper: Mapper | None = None
                 ) -> list[dict[str, Any]]:
    """Run each test on base + ``source_patch`` with the recorder plugin: the deterministic inputs and outcomes
    of ``targets``, one ``summary`` record per function (calls seen, exception types that escaped), and, for
    ``probes``, a ``probe`` record with this code's outcome on that input.

    Tests that lay down the same files with the same ids (the golden test and a copy of it) are recorded once.
    ``mapper`` runs the per-test recordings (in parallel when it has several workers). With a result store the
    records of one (code, test, targets, probes) are kept, so grading several tests of one instance records the
    reference test once."""
    source_patch, tests, targets, probes = recording.source_patch, recording.tests, recording.targets, recording.probes
    if not targets:
        return []
    first: dict[str, int] = {}
    for index, test in enumerate(tests):
        first.setdefault(_recording_ident(test), index)
    unique = sorted(set(first.values()))
    runs = (mapper or _serial(executor))(
        [functools.partial(_record_one, source_patch=source_patch, test=tests[i], targets=targets, probes=probes)
         for i in unique])
    by_index = dict(zip(unique, runs, strict=True))
    records: list[dict[str, Any]] = []
    for test, label in zip(tests, test_labels(tests), strict=True):
        ran = by_index[first[_recording_ident(test)]]
        code = "fixed" if source_patch.strip() else "buggy"
        if isinstance(ran, str):  # the recorder did not run, or not to its end: said, never taken for "no input"
            records.append({"kind": FAILED, "from_test": label, "reason": ran, "code": code})
            continue
        if not any(rec["kind"] == FAILED for rec in ran):  # a complete recording ("not called" can be told)
            records.append({"kind": "session", "from_test": label})
        records += [{**rec, "from_test": label, **({"code": code} if rec["kind"] == FAILED else {})} for rec in ran]
    return records


def test_labels(tests: Sequence[TestPatch]) -> list[str]:
    """The ``from_test`` label of each test's records: its name (``test<i>`` without one); two different tests
    never share a label (a ``'`` is added), the same test laid down twice does."""
    labels: dict[str, str] = {}  # recording ident -> label
    out: list[str] = []
    for index, test in enumerate(tests):
        label = test.name or f"test{index}"
        while label in labels.values() and labels.get(_recording_ident(test)) != label:
            label += "'"
        labels[_recording_ident(test)] = label
        out.append(label)
    return out


def called_by(records: list[dict[str, Any]], label: str) -> set[tuple[str, str]] | None:
    """(path, qualname) of the recorded functions the test labelled ``label`` called while its tests ran, or
    None when its recording is missing or incomplete."""
    mine = [r for r in records if r.get("from_test") == label]
    if not any(r["kind"] == "session" for r in mine) or any(r["kind"] == FAILED for r in mine):
        return None
    return {(r["path"], r["qualname"]) for r in mine if r["kind"] == "summary" and r["calls"]}


FAILED = "recorder_failed"
"""The kind of record that says a test's recording did not run or stopped early (``reason``)."""


def failures(fixed: list[dict[str, Any]], buggy: list[dict[str, Any]]) -> list[str]:
    """``<test> on the <code> code: <reason>`` of every failed recording, each once: the candidate and the
    reference share one recording when they are the same test (the golden test against itself), and its
    failure was said twice."""
    return list(dict.fromkeys(f"{r.get('from_test', '?')} on the {r.get('code', '?')} code: {r['reason']}"
                              for r in (*fixed, *buggy) if r["kind"] == FAILED))


def _recording_ident(test: TestPatch) -> str:
    """What a recording run depends on from the test: the files it lays down and the ids it runs."""
    files = test.files or {"<patch>": test.patch}
    return json.dumps([sorted(files.items(), key=lambda kv: kv[0]), list(test.ids)], default=str)


def _record_one(executor: InstanceExecutor, *, source_patch: str, test: TestPatch, targets: list[dict[str, str]],
                probes: list[dict[str, Any]] | None) -> list[dict[str, Any]] | str:
    """The records (paths relative to the repository, None outside it; no ``from_test``) of one test, or why
    the recorder did not start; a run cut short (a crash, a timeout) gives what it saw and a ``FAILED`` record
    saying so. Only complete recordings are served from / kept in the executor's store, so a failure is never
    kept as "no input"."""
    store = executor.store
    key = hashlib.sha256(json.dumps([
        "recording", 3, executor.env_id, executor.instance.repo, executor.base_commit, source_patch,
        _recording_ident(test), targets, probes or [], hashlib.sha256(RECORDER.read_bytes()).hexdigest(),
        hashlib.sha256(VALUES.read_bytes()).hexdigest(), hashlib.sha256(START.read_bytes()).hexdigest(),
        hashlib.sha256(DECODE.read_bytes()).hexdigest(), hashlib.sha256(SAME.read_bytes()).hexdigest(),
    ], sort_keys=True, default=str).encode()).hexdigest()
    if store is not None:
        cached = store.get_record("recording", key)
        if cached is not None:
            return cached["records"]
    plugin_dir = Path(tempfile.mkdtemp(prefix="coharden-rec-", dir=executor.shared_dir()))
    try:
        shutil.copy(RECORDER, plugin_dir / "coharden_recorder.py")
        shutil.copy(VALUES, plugin_dir / "coharden_recorder_values.py")
        shutil.copy(DECODE, plugin_dir / "coharden_recorder_decode.py")
        shutil.copy(SAME, plugin_dir / "coharden_recorder_same.py")
        pytest_runner = runner_of(executor.settings.tests.runner).loads_plugins
        if not pytest_runner:  # the repository's own runner takes no -p plugin: start with the interpreter
            shutil.copy(START, plugin_dir / "sitecustomize.py")
        root = executor.workspace_root()
        targets_file = plugin_dir / "targets.json"
        targets_file.write_text(json.dumps([{"file": str(root / t["path"]), "qualname": t["qualname"]}
                                            for t in targets]))
        env = {
            PLUGIN_PATH: str(plugin_dir),
            **({} if pytest_runner else {"PYTHONPATH": str(plugin_dir)}),
            "COHARDEN_RECORD_TARGETS": str(targets_file),
            "COHARDEN_RECORD_ROOT": str(root.resolve()),
        }
        if probes:
            probe_file = plugin_dir / "probes.jsonl"
            probe_file.write_text("".join(json.dumps({
                "file": str(root / r["path"]), "qualname": r["qualname"], "key": r["key"],
                "args_enc": r["args_enc"], "receiver_key": r.get("receiver_key"),
                "receiver_enc": r.get("receiver_enc"), "kind": r["kind"], "outcome": r.get("outcome"),
                "value_enc": r.get("value_enc"), "value_obs": r.get("value_obs")}) + "\n" for r in probes))
            env["COHARDEN_RECORD_PROBE"] = str(probe_file)
        out = root / ".coharden-records.jsonl"  # the worktree: writable in the test sandbox
        out.unlink(missing_ok=True)  # never read a file an earlier run left
        env["COHARDEN_RECORD_OUT"] = str(out)
        # with pytest, a fork of the zygote that collected this test for its plain runs may load the recorder
        # (its tracing starts with the first test's call, so nothing of a fresh session's collection is lost)
        instrument = {"plugin": "coharden_recorder", "path": str(plugin_dir),
                      "env": sorted(k for k in env if k.startswith("COHARDEN_RECORD_"))} if pytest_runner else None
        run = executor.run_raw(source_patch, test, extra_args=["-p", "coharden_recorder"] if pytest_runner else [],
                               readable=[plugin_dir], extra_env=env, instrument=instrument)
        if not os.path.lexists(out):  # the plugin opens it at start: it ran, even if no target was called
            return f"the recorder did not start ({executor.settings.tests.runner} runner){_last_lines(run.output)}"
        try:  # the test may have swapped it for a link to a host file or a fifo
            text = read_text(out, anchor=root, limit=RECORDS_LIMIT)
        except OSError as exc:
            return f"the recorder's output could not be read safely: {getattr(exc, 'why', exc)}"
        packages = packages_of(targets)
        added = {path for path in touched_files(source_patch) if path.endswith(".py")}
        records = parse_records(text, root.resolve(), packages,
                                module_files(packages, executor.base_file, added))
        starts, ends = (sum(1 for r in records if r["kind"] == kind) for kind in ("start", "end"))
        records = [r for r in records if r["kind"] not in ("start", "end")]
        if run.timed_out:  # what it saw until then is used, and the run is said to be cut short
            return [*records, {"kind": FAILED, "reason": f"the recording run timed out after {run.duration:.0f} s"}]
        if not starts or ends < starts:
            return [*records, {"kind": FAILED, "reason": "the recording stopped before its end (the test process "
                               f"crashed or was killed?){_last_lines(run.output)}"}]
        if store is not None:
            store.put_record("recording", key, {"records": records})
        return records
    finally:
        shutil.rmtree(plugin_dir, ignore_errors=True)


def _last_lines(output: str, n: int = 3) -> str:
    lines = [line.strip() for line in (output or "").strip().splitlines() if line.strip()][-n:]
    return (": " + " | ".join(lines))[:400] if lines else ""


def packages_of(targets: list[dict[str, str]]) -> dict[str, str]:
    """The names a recorded object's package may have, each with the directory it lies in: the directories
    (and a top-level module) on the paths of the recorded functions (``sympy`` -> "" for
    ``sympy/core/add.py``; ``src`` -> "" and ``pkg`` -> "src" for ``src/pkg/m.py``)."""
    names: dict[str, str] = {}
    for target in targets:
        parts = Path(target["path"]).parts
        for index, part in enumerate(parts[:-1]):
            if part.isidentifier():
                names.setdefault(part, "/".join(parts[:index]))
        if len(parts) == 1 and parts[0].endswith(".py"):
            names.setdefault(parts[0][:-3], "")
    return names


def module_files(packages: dict[str, str], read: Callable[[str], str | None], extra: set[str]
                 ) -> Callable[[str], bool]:
    """Whether a module (``pkg.a.b``) is a file of the repository: in ``read`` (the base commit) or among
    ``extra`` (the files the fix adds), not one a test laid down. Asked once per module."""
    @functools.cache
    def exists(module: str) -> bool:
        top = module.split(".")[0]
        if top not in packages:
            return False
        rel = "/".join(p for p in (packages[top], module.replace(".", "/")) if p)
        return any(path in extra or read(path) is not None for path in (rel + ".py", rel + "/__init__.py"))

    return exists


def parse_records(text: str, root: Path, packages: dict[str, str] | None = None,
                  module_exists: Callable[[str], bool] = lambda module: True) -> list[dict[str, Any]]:
    """The recorder's JSON lines as records with repository-relative paths, keeping only well-formed ones.

    The file lies in the worktree, which the test under record can rewrite: its names, paths and values end up
    in mutants' code and file lists, so a line is dropped (and counted in a log line, by reason) unless every
    field that reaches code is what the recorder writes: parameter names that are identifiers, a receiver
    named ``self``/``cls``, a file path (outside the repository it becomes None, never a ``..`` path), string
    ids, and value encodings that are well formed and name only objects of ``packages`` (the repository's), in
    modules for which ``module_exists`` (see :func:`~coharden.mutation.encoding_check.check_encoding`)."""
    records: list[dict[str, Any]] = []
    dropped: Counter[str] = Counter()
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            rec = None
        if not _well_formed(rec):
            dropped["malformed"] += 1
            continue
        assert isinstance(rec, dict)
        with parsing():  # check_encoding parses structural reprs with ast: one thread at a time
            unsafe = next((why for field in ENCODED if rec.get(field) is not None
                           and (why := check_encoding(rec[field], set(packages or {}), module_exists))), None)
        if unsafe is not None:
            dropped[f"unsafe_value:{unsafe}"] += 1
            continue
        rec["path"] = _relative(rec.pop("file"), root)
        if rec.get("via") is not None:
            rec["via"] = _relative(rec["via"], root)
        records.append(rec)
    if dropped:
        log.warning("recorder output: %d line(s) dropped (%s); written by the test under record?",
                    sum(dropped.values()), ", ".join(f"{k} {n}" for k, n in sorted(dropped.items())))
    return records


ENCODED = ("args_enc", "value_enc", "receiver_enc")
"""The record fields that hold a value's encoding (they reach mutants' code)."""


def _identifier(name: Any) -> bool:
    return isinstance(name, str) and name.isidentifier() and not keyword.iskeyword(name)


def _well_formed(rec: Any) -> bool:
    if not isinstance(rec, dict) or not isinstance(rec.get("kind"), str) or not isinstance(rec.get("file"), str):
        return False
    if not isinstance(rec.get("qualname"), str) or not all(
            _identifier(part) or part == "<locals>" for part in rec["qualname"].split(".")):
        return False
    params = rec.get("params", [])
    if not isinstance(params, list) or not all(_identifier(p) for p in params):
        return False
    if rec.get("receiver") not in (None, "self", "cls"):
        return False
    strings = ("key", *ENCODED, "value_repr", "receiver_key", "outcome", "exc_type", "callee", "shape",
               "type_shape", "via", "value_obs")
    numbers = ("calls", "depth", "line", "capped")
    counts = ("dropped", "dropped_types")
    raised = rec.get("raised", [])
    return (all(rec.get(field) is None or isinstance(rec[field], str) for field in strings)
            and all(rec.get(field) is None or type(rec[field]) is int for field in numbers)
            and all(rec.get(field) is None or (isinstance(rec[field], dict) and all(
                isinstance(k, str) and type(n) is int for k, n in rec[field].items())) for field in counts)
            and isinstance(raised, list) and all(isinstance(name, str) for name in raised))


def _relative(file: str, root: Path) -> str | None:
    """``file`` relative to the repository root; None for a file outside it (a caller in the standard
    library or site-packages: operators never patch those)."""
    try:
        relative = Path(os.path.normpath(file)).relative_to(root)
    except ValueError:
        return None
    return None if relative.parts[:1] == ("..",) or not relative.parts else str(relative)
