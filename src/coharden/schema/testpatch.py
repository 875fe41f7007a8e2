"""A test patch together with the pytest node ids it contributes."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

ExecMode = Literal["unit_test", "reproduction_script"]
"""How a test patch runs (SWT-bench's ``--exec_mode`` names)."""


class TestPatch(BaseModel):
    """A test-only patch (``t``) and the node ids whose results make its verdict.

    ``files`` holds the post-patch content of every file the patch touches (None: deleted), filled in by the
    executor once so a patch can also be laid down as renamed copies beside another test touching the same
    files (how candidate and reference tests share one pytest process).
    """

    __test__ = False

    patch: str
    ids: list[str]
    name: str = ""
    files: dict[str, str | None] = Field(default_factory=dict)
    # run the whole files its ids live in, as the SWE-bench harness runs a test patch's files, and read the
    # ids' results from that run: a test may depend on what an earlier test of its file left behind
    whole_files: bool = False
    exec_mode: ExecMode = "unit_test"
    """``reproduction_script``: the patch adds Python scripts the runner collects no test from (a root-level
    ``test_reproduce.py`` that sympy's ``bin/test`` never looks at, or one with no test function at all); its
    ``ids`` are the scripts' paths, each run as ``python SCRIPT`` from the repository root in the tests' sandbox,
    PASS on exit status 0 (SWT-bench's ``--exec_mode reproduction_script``)."""
