"""Hostile tests against the grader's own limits (issue 51, class 5): sizes that reach a command line, a count of
open file descriptors or a report. Each must end in a clear verdict (HARNESS_ERROR, or Invalid with the reason),
never a traceback, and the worktree must leave the host's disk whatever the test left in it.

Real test patches for ``examples/printer_brackets``, run in the real bwrap sandbox (as every attack file).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from tests.attacks.hostile import attack, needs_bwrap, patch_of

from coharden.config import Settings
from coharden.instances import LocalInstance
from coharden.schema.testpatch import TestPatch
from coharden.schema.verdict import Outcome

ATTACK_TIMEOUT = 30
FAILS_ON_THE_BUG = """\
    a, b, c = symbols("a b c")
    assert sstr(a / (b * c)) == "a/(b*c)"
"""

pytestmark = needs_bwrap


# --- sizes that reach a command line ---------------------------------------------------------------------------

LONG_NAME = "test_repro_" + "x" * 200_000


def test_a_test_id_longer_than_the_limit_is_refused_where_ids_are_read(make_executor) -> None:
    from coharden.errors import TestIdError

    ex = make_executor()
    with pytest.raises(TestIdError, match="characters"):
        attack(ex, f"def {LONG_NAME}():\n" + FAILS_ON_THE_BUG)


def test_a_huge_test_id_in_a_batch_is_invalid_with_the_reason(example: LocalInstance, tmp_path: Path) -> None:
    """``coharden mpe``'s path: the prediction is Invalid, with the limit in its reason; no traceback."""
    from coharden.mpe.batch import BatchGrading, evaluate_prediction
    from coharden.schema.mpe_config import MPEConfig
    from coharden.schema.prediction import Prediction

    settings = Settings(timeout=30, cache_dir=tmp_path / "cache", workers=1)
    patch = patch_of(f"def {LONG_NAME}():\n" + FAILS_ON_THE_BUG)
    prediction = Prediction(instance_id=example.instance.instance_id, model_name_or_path="long", model_patch=patch)
    row = evaluate_prediction(prediction, example.instance, BatchGrading(settings, MPEConfig(per_operator=1)), None)
    assert "error" not in row, row.get("error")
    assert row["test_class"] == "Invalid", row
    assert "characters" in str(row), str(row)[:2000]


def test_many_tests_whose_ids_total_over_the_limit_are_refused(make_executor) -> None:
    from coharden.errors import TestIdError

    ex = make_executor()
    body = "".join(f"def test_repro_{n:05d}_{'y' * 3000}():\n    pass\n\n\n" for n in range(400))
    with pytest.raises(TestIdError, match="characters"):
        attack(ex, body)


@pytest.mark.parametrize("fork_server", [True, False])
def test_a_command_line_over_the_system_s_limit_is_a_harness_error(make_executor, fork_server: bool) -> None:
    """Ids that reach the runner anyway (a record's FAIL_TO_PASS, several tests sharing a process): the command
    line that cannot be started is a HARNESS_ERROR saying so, not an OSError out of the grader."""
    ex = make_executor(fork_server=fork_server)
    real = attack(ex, "def test_repro_short():\n" + FAILS_ON_THE_BUG)
    huge = TestPatch(patch=real.patch, ids=[f"tests/test_attack.py::test_repro_short[{'z' * 200_000}]"],
                     name="attack", files=real.files)
    verdict = ex.verdict("", huge)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "command line" in verdict.reason, verdict.reason
    many = TestPatch(patch=real.patch, ids=[f"tests/test_attack.py::test_repro_short[{n}-{'z' * 100_000}]"
                                            for n in range(40)], name="attack", files=real.files)
    verdict = ex.verdict("", many)
    assert verdict.outcome is Outcome.HARNESS_ERROR, verdict.short()
    assert "command line" in verdict.reason, verdict.reason
    assert ex.verdict("", real).outcome is Outcome.FAIL  # the executor goes on


# --- sizes that reach a count of open file descriptors ---------------------------------------------------------

NEST = """\
    def test_repro_nest():
        start = os.open(".", os.O_RDONLY)
        try:
            for _ in range(5_000):  # past 1,024 descriptors and PATH_MAX (4,096 bytes)
                os.mkdir("d")
                os.chdir("d")
            open("leaf.txt", "w").write("deep")
        finally:
            os.fchdir(start)
    """


@pytest.mark.parametrize("fork_server", [True, False])
def test_deeply_nested_directories_are_reset_and_leave_the_host(make_executor, example: LocalInstance,
                                                                fork_server: bool) -> None:
    ex = make_executor(fork_server=fork_server)
    verdict = ex.verdict("", attack(ex, NEST))
    assert verdict.outcome is Outcome.PASS, verdict.short() + verdict.output_tail[-2000:]
    root = ex.workspace_root()
    assert (root / "d").is_dir()
    golden = ex.verdict(example.instance.patch, ex.golden_test())  # resets the checkout first
    assert golden.outcome is Outcome.PASS, golden.short()
    assert not (root / "d").exists()
    ex.verdict("", attack(ex, NEST))
    ex.close()
    assert not root.parent.exists(), f"{root.parent} left on the host"
    assert root.parent.name.startswith("coharden-ws-")


def test_removing_a_tree_deeper_than_the_descriptor_limit_works(tmp_path: Path) -> None:
    """The removal every reset and cleanup uses holds no descriptor per level (a test's 5,000 levels are far
    past the usual limit of 1,024 open files), and no recursion."""
    import resource

    from coharden.execution.removal import remove_tree

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    top = tmp_path / "top"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    try:
        for _ in range(3000):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        os.close(os.open("leaf", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd))
        os.chmod(fd, 0)  # noqa: PTH101 - a locked level on the way
    finally:
        os.close(fd)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
    try:
        remove_tree(top)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert not top.exists()


# --- sizes that reach a report ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fork_server", [True, False])
def test_a_huge_failure_message_is_a_plain_failure_not_a_replaced_file(make_executor, fork_server: bool) -> None:
    ex = make_executor(fork_server=fork_server, memory_mb=4096)
    verdict = ex.verdict("", attack(ex, """\
        def test_repro_huge_message():
            a, b, c = symbols("a b c")
            assert sstr(a / (b * c)) == "a/(b*c)", "x" * (96 << 20)
        """))
    assert verdict.outcome in (Outcome.FAIL, Outcome.HARNESS_ERROR), verdict.short()
    assert not any("replaced" in note for note in verdict.tampering), verdict.tampering
    assert "replaced" not in verdict.reason
    assert len(verdict.model_dump_json()) < 1 << 20  # what is stored stays small
    if verdict.outcome is Outcome.HARNESS_ERROR:
        assert "MiB" in verdict.reason, verdict.reason


def test_the_disk_watch_counts_what_lies_past_path_max(tmp_path: Path) -> None:
    """A file written at the bottom of 5,000 nested directories (a path of 10,000 characters) counts towards the
    disk limit: a path-based walk stopped at PATH_MAX and let it through."""
    from coharden.execution.disklimit import DiskWatch
    from coharden.execution.removal import remove_tree

    watch = DiskWatch([tmp_path], 1 << 30)
    fd = os.open(tmp_path, os.O_RDONLY)
    try:
        for _ in range(5000):
            os.mkdir("d", dir_fd=fd)
            inner = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = inner
        handle = os.open("big", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd)
        os.write(handle, b"x" * (8 << 20))
        os.close(handle)
    finally:
        os.close(fd)
    try:
        assert watch.measure() >= 8 << 20
    finally:
        remove_tree(tmp_path / "d")  # pytest's own cleanup of old temporary directories fails on such a tree
