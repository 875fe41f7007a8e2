"""A test patch together with the pytest node ids it contributes."""

from __future__ import annotations

from pydantic import BaseModel, Field


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
