"""The layout of one test process (:func:`lay_out`): which test patches are laid down in a checkout for one
pytest run, and under which ids.

The first test patch is applied with git. Only when the caller trusts every test (``combine``) may more share
the process: one touching files no earlier one touched is applied with git; one that shares a test module with
an earlier one is written as a renamed copy of that module (``test_coh<i>__<name>.py``), its ids renamed alike,
so both run in one pytest process. A test patch that touches anything but test modules (a conftest.py, a helper
module, a deletion) or runs whole files is alone in its process, and a test that cannot be laid down beside the
others is deferred to a later process. :func:`collect_key` names a process's test state for a fork server that
collects once.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from coharden.config import Settings
from coharden.errors import ApplyError
from coharden.execution.git import APPLY_FAILED, COPY, Applied
from coharden.execution.pytest_results import split_node_id
from coharden.execution.runners import runner_of
from coharden.patches import is_test_path, touched_files
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome, Verdict


class Tree(Protocol):
    """A checkout tests are laid down in (:class:`~coharden.execution.workspace.Workspace` is one)."""

    @property
    def root(self) -> Path: ...

    def apply(self, patch: str) -> Applied | None: ...

    def write(self, rel: str, content: str) -> None: ...


@dataclass
class Layout:
    """What :func:`lay_out` laid down, by index into its ``tests``."""

    groups: dict[int, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    """The tests of the process: their ids as run, and each renamed id's own id."""
    done: dict[int, Verdict] = field(default_factory=dict)
    """Tests whose patch does not apply (APPLY_ERROR)."""
    deferred: list[int] = field(default_factory=list)
    """Tests left for a later process."""
    applied: dict[int, Applied | None] = field(default_factory=dict)
    """How each test of ``groups`` was laid down: the patch applied (git or a fallback: ``Applied``; None for an
    empty patch) or its post-image files written as renamed copies (``copy``)."""


def lay_out(tree: Tree, tests: Sequence[TestPatch], claimed: set[str], combine: bool) -> Layout:
    """Lay ``tests[0]`` (and, when ``combine``, as many more as can share its process) down in ``tree``, whose
    files in ``claimed`` (what the source patch touched) are taken already."""
    claimed = set(claimed)
    layout = Layout()
    exclusive = False  # a group whose files could change how other tests run (conftest.py, helpers)
    for j, test in enumerate(tests):
        paths = set(test.files) or set(touched_files(test.patch))
        overlap = paths & claimed
        if layout.groups and (not combine or exclusive or not shareable(test, paths) or test.whole_files
                              or test.exec_mode != "unit_test"):  # a script runs alone, in a process of its own
            layout.deferred.append(j)
            continue
        if not overlap or not layout.groups:
            try:
                layout.applied[j] = tree.apply(test.patch)
            except ApplyError as exc:
                layout.done[j] = Verdict(outcome=Outcome.APPLY_ERROR, reason=f"test patch: {exc}",
                                         applied_with={"test": APPLY_FAILED})
                continue
            claimed |= paths
            layout.groups[j] = (list(test.ids), {})
            exclusive = not shareable(test, paths) or test.whole_files
            continue
        rename = _renames(tree, test, overlap, claimed, j)
        if rename is None:
            layout.deferred.append(j)
            continue
        for path, content in test.files.items():
            if content is not None:
                tree.write(rename.get(path, path), content)
        claimed |= set(rename.values()) | (paths - overlap)
        layout.applied[j] = Applied(COPY)
        ids: list[str] = []
        back: dict[str, str] = {}
        for node in test.ids:
            path, classes, name = split_node_id(node)
            ran = "::".join([rename.get(path, path), *classes, name])
            ids.append(ran)
            back[ran] = node
        layout.groups[j] = (ids, back)
    return layout


def _renames(tree: Tree, test: TestPatch, overlap: set[str], claimed: set[str], index: int) -> dict[str, str] | None:
    """Where the test modules ``test`` shares with earlier tests are written instead (None: it cannot share
    the process: a shared file is no test module, or a renamed path is taken in any form, a file or a link a
    source patch laid down, which is never written through)."""
    if not (test.files and all(PurePosixPath(p).name.startswith("test") and p.endswith(".py")
                               and PurePosixPath(p).name != "conftest.py" and test.files.get(p) is not None
                               for p in overlap)):
        return None
    rename = {p: renamed(p, index) for p in overlap}
    if set(rename.values()) & claimed or any(os.path.lexists(tree.root / r) for r in rename.values()):
        return None
    return rename


def collect_key(settings: Settings, source_patch: str, tests: Sequence[TestPatch]) -> str | None:
    """The name of the test state of a run of ``tests`` on ``source_patch``, for a fork server that collects
    once (``Settings.collect_once``): their patches and ids. None - collect as every run does - when the
    source patch touches anything but Python modules outside the tests (a conftest, a test helper, an ini
    file, data read at collection): the server only compares the Python modules the collection loaded."""
    if not settings.server.collect_once or not runner_of(settings.tests.runner).collects_once:
        return None
    for path in touched_files(source_patch):
        name = PurePosixPath(path).name
        if not path.endswith(".py") or name == "conftest.py" or is_test_path(path, settings.tests.test_patterns):
            return None
    body = [[t.patch, list(t.ids), t.whole_files] for t in tests]
    return hashlib.sha256(repr(body).encode()).hexdigest()


def renamed(path: str, index: int) -> str:
    """The path a shared test module is written to for the ``index``-th test of a process."""
    p = PurePosixPath(path)
    return str(p.with_name(f"test_coh{index}__{p.name}"))


def shareable(test: TestPatch, paths: set[str]) -> bool:
    """True when ``test`` only adds or edits test modules (and package ``__init__.py`` files), so laying it down
    beside another test cannot change how that test runs. A conftest.py or a helper module can."""
    for path in paths:
        name = PurePosixPath(path).name
        if test.files and test.files.get(path) is None:  # deletes a file
            return False
        if name == "__init__.py":
            continue
        if not (name.endswith(".py") and (name.startswith("test") or name.endswith("_test.py"))):
            return False
    return True
